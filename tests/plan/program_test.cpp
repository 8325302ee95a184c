// Lowering plans to per-GPU instruction lists and the symbolic dry run.

#include "plan/program.hpp"

#include "core/chain.hpp"
#include "core/error.hpp"
#include "partition/planner.hpp"
#include "plan/program_memory.hpp"
#include "schedule/memory.hpp"
#include "support/planner_support.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>

#include <gtest/gtest.h>

namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;
namespace mp = madpipe::partition;

static madpipe::Platform platform_for(const madpipe::Profile& profile, int gpus, double fraction) {
  const madpipe::ChainCosts costs(profile);
  const int L = costs.num_layers();
  madpipe::Platform platform;
  platform.gpus = gpus;
  platform.bandwidth_bytes_per_ms = 1e7;
  platform.memory_bytes = static_cast<std::int64_t>(
      fraction * (3.0 * costs.weight_bytes(0, L - 1) + costs.stored_bytes(0, L - 1)));
  return platform;
}

// Every receive has a buffer posted before it is waited for and free after its last use; the
// messages of each GPU pair are numbered 0, 1, ... in sending order on both sides; a stage's
// neighbour on the same GPU gets its data by a hand-over, one elsewhere by a transfer.
static void expect_receives_and_messages_consistent(const mplan::Plan& plan,
                                                    const mplan::Program& program) {
  const int gpus = static_cast<int>(program.per_gpu.size());
  std::map<std::pair<int, int>, int> sent, posted;  // (from, to) -> messages so far
  for (int g = 0; g < gpus; ++g) {
    const auto& list = program.per_gpu[g];
    const auto& buffers = program.receive_buffers[g];
    std::vector<int> waited(buffers.size(), 0);
    for (int k = 0; k < static_cast<int>(list.size()); ++k) {
      const mplan::Instr& instr = list[k];
      const int s = instr.stage;
      switch (instr.kind) {
        case mplan::InstrKind::SendAct:
        case mplan::InstrKind::SendGrad:
          EXPECT_EQ(instr.sequence, (sent[{g, instr.peer}]++));
          EXPECT_NE(instr.peer, g);
          break;
        case mplan::InstrKind::PostRecvAct:
        case mplan::InstrKind::PostRecvGrad:
          EXPECT_EQ(instr.sequence, (posted[{instr.peer, g}]++));
          ASSERT_GE(instr.buffer, 0);
          EXPECT_EQ(buffers.at(instr.buffer).post, k);
          break;
        case mplan::InstrKind::RecvAct:
        case mplan::InstrKind::RecvGrad:
          ASSERT_GE(instr.buffer, 0);
          EXPECT_LT(buffers.at(instr.buffer).post, k);
          EXPECT_GT(buffers.at(instr.buffer).last_use, k);
          ++waited[instr.buffer];
          break;
        case mplan::InstrKind::HandAct:
          EXPECT_EQ(plan.stages[s].gpu, g);
          EXPECT_EQ(plan.stages[s + 1].gpu, g);
          break;
        case mplan::InstrKind::HandGrad:
          EXPECT_EQ(plan.stages[s].gpu, g);
          EXPECT_EQ(plan.stages[s + 1].gpu, g);
          break;
        default:
          break;
      }
    }
    for (int count : waited) EXPECT_EQ(count, 1);
  }
  EXPECT_EQ(sent, posted);
  // Every message travels on a channel of message_channels (one NCCL communicator each).
  const std::vector<std::pair<int, int>> channels = mplan::message_channels(plan);
  for (const auto& [pair, count] : sent)
    EXPECT_TRUE(std::binary_search(channels.begin(), channels.end(), pair))
        << pair.first << " -> " << pair.second;
}

// The index of the next instruction after x that makes a message of the send's kind on its cut:
// the stage's next forward for an activation, the next backward of the stage above for a gradient.
static int next_message_maker(const std::vector<mplan::Instr>& list, int x) {
  const bool gradient = list[x].kind == mplan::InstrKind::SendGrad;
  const int stage = gradient ? list[x].stage + 1 : list[x].stage;
  for (int k = x + 1; k < static_cast<int>(list.size()); ++k)
    if (list[k].stage == stage &&
        list[k].kind == (gradient ? mplan::InstrKind::Backward : mplan::InstrKind::Forward))
      return k;
  return -1;
}

// Each send completes at the end, right before its stage makes the next message of its kind on
// the cut (where the program still runs: the dry run models those waits), or right after its GPU
// waited for a message from the same peer that the peer sent after it had waited for this one.
static void expect_sends_complete_after_their_receipt(const mplan::Program& program) {
  const int gpus = static_cast<int>(program.per_gpu.size());
  ASSERT_EQ(program.send_completions, mplan::send_completions(program));
  for (int g = 0; g < gpus; ++g) {
    const auto& list = program.per_gpu[g];
    const int n = static_cast<int>(list.size());
    ASSERT_EQ(static_cast<int>(program.send_completions[g].size()), n);
    for (int x = 0; x < n; ++x) {
      const int done = program.send_completions[g][x];
      if (!mplan::is_send(list[x].kind)) {
        EXPECT_EQ(done, -1);
        continue;
      }
      if (done == n) continue;
      if (done + 1 == next_message_maker(list, x)) {
        EXPECT_GE(done, x);
        continue;
      }
      ASSERT_GT(done, x);
      ASSERT_LT(done, n);
      const mplan::Instr& back = list[done];
      ASSERT_TRUE(mplan::is_wait(back.kind));
      ASSERT_EQ(back.peer, list[x].peer);
      const auto& theirs = program.per_gpu[back.peer];
      int receipt = -1, sent_back = -1;
      for (int k = 0; k < static_cast<int>(theirs.size()); ++k) {
        if (mplan::is_wait(theirs[k].kind) && theirs[k].peer == g &&
            theirs[k].sequence == list[x].sequence)
          receipt = k;
        if (mplan::is_send(theirs[k].kind) && theirs[k].peer == g &&
            theirs[k].sequence == back.sequence)
          sent_back = k;
      }
      EXPECT_GE(receipt, 0);
      EXPECT_GT(sent_back, receipt);
    }
  }
}

TEST(InstrToken, RoundTrips) {
  for (const char* token : {"F2.7", "B0.0", "HAND_ACT1.2", "HAND_GRAD0.4", "SEND_ACT2.7>1",
                            "RECV_ACT2.7<0", "SEND_GRAD1.3>0", "RECV_GRAD0.12<3",
                            "POST_RECV_ACT2.7<0", "POST_RECV_GRAD3.1<2", "OPT4.0"}) {
    EXPECT_EQ(mplan::to_string(mplan::instr_from_string(token)), token);
  }
  for (const char* bad : {"", "F", "X1.2", "F1.2>3", "SEND_ACT1.2", "SEND_ACT1.2<3", "OPT1",
                          "POST_RECV_ACT1.2>0", "HAND_ACT1.2<0"})
    EXPECT_THROW(mplan::instr_from_string(bad), madpipe::Error) << bad;
}

TEST(Lower, EveryPlanOfEveryAlgorithmRunsWithoutDeadlock) {
  std::mt19937 rng(7);
  int programs = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const madpipe::Profile profile = madpipe::testing::random_chain(rng, 4 + trial % 6);
    for (int gpus : {2, 3, 4}) {
      for (mp::Algorithm algorithm : madpipe::testing::runnable_algorithms()) {
        // The full ILP is slow to prove anything beyond a few layers; short chains suffice here.
        if (algorithm == mp::Algorithm::Ilp && (profile.layers.size() > 5 || gpus > 2)) continue;
        mp::PlannerOptions options;
        options.algorithm = algorithm;
        options.milp.time_limit_s = 2;
        options.discretization.time_steps = 21;
        options.discretization.delay_steps = 11;
        options.discretization.memory_steps = 6;
        options.discretization.iterations = 6;
        options.discretization.extra_targets = 2;
        const mp::PlanResult result =
            mp::make_plan(profile, platform_for(profile, gpus, 0.8), options);
        if (!result.feasible) continue;
        const mplan::Plan& plan = result.plan;
        const int n = 3 * plan.pattern.k + 1;
        const mplan::Program program = mplan::lower(plan, n);
        EXPECT_EQ(mplan::dry_run(program), "");
        // Every stage runs F and B of every micro-batch exactly once, on its GPU, and F first.
        std::map<std::tuple<int, int, int>, int> seen;  // (kind, stage, mb) -> count
        for (int g = 0; g < gpus; ++g) {
          std::map<std::pair<int, int>, bool> forward_done;
          for (const mplan::Instr& instr : program.per_gpu[g]) {
            if (instr.kind != mplan::InstrKind::Forward && instr.kind != mplan::InstrKind::Backward)
              continue;
            EXPECT_EQ(plan.stages[instr.stage].gpu, g);
            EXPECT_GE(instr.slot, 0);
            EXPECT_LT(instr.slot, program.slots[instr.stage]);
            ++seen[{static_cast<int>(instr.kind), instr.stage, instr.micro_batch}];
            if (instr.kind == mplan::InstrKind::Forward)
              forward_done[{instr.stage, instr.micro_batch}] = true;
            else
              EXPECT_TRUE((forward_done[{instr.stage, instr.micro_batch}]));
          }
        }
        EXPECT_EQ(seen.size(), 2u * plan.stages.size() * n);
        for (const auto& entry : seen) EXPECT_EQ(entry.second, 1);
        expect_receives_and_messages_consistent(plan, program);
        expect_sends_complete_after_their_receipt(program);
        // The validation program runs forwards only, and runs.
        mplan::LowerOptions forwards;
        forwards.micro_batches = n;
        forwards.train = false;
        const mplan::Program validation = mplan::lower(plan, forwards);
        EXPECT_EQ(mplan::dry_run(validation), "");
        for (const auto& list : validation.per_gpu)
          for (const mplan::Instr& instr : list) {
            EXPECT_NE(instr.kind, mplan::InstrKind::Backward);
            EXPECT_NE(instr.kind, mplan::InstrKind::RecvGrad);
          }
        // A step never needs more activation slots than the pattern keeps in flight.
        const std::vector<int> nca =
            ms::concurrent_activations(plan.pattern, static_cast<int>(plan.stages.size()));
        for (std::size_t s = 0; s < plan.stages.size(); ++s)
          EXPECT_LE(program.slots[s], std::max(nca[s], 1)) << "stage " << s;
        ++programs;
      }
    }
  }
  EXPECT_GT(programs, 50);
}

static std::vector<mplan::Instr> list_of(const std::vector<std::string>& tokens) {
  std::vector<mplan::Instr> list;
  for (const std::string& token : tokens) list.push_back(mplan::instr_from_string(token));
  return list;
}

TEST(DryRun, ReportsADeadlockWithTheStuckInstructions) {
  mplan::Program program;
  program.micro_batches = 1;
  // Each GPU waits for the other before sending: a cycle.
  program.per_gpu = {list_of({"POST_RECV_GRAD0.0<1", "RECV_GRAD0.0<1", "SEND_ACT0.0>1"}),
                     list_of({"POST_RECV_ACT0.0<0", "RECV_ACT0.0<0", "SEND_GRAD0.0>0"})};
  const std::string report = mplan::dry_run(program);
  EXPECT_NE(report.find("program deadlocks"), std::string::npos) << report;
  EXPECT_NE(report.find("RECV_GRAD0.0<1 <-- stuck"), std::string::npos) << report;
  EXPECT_NE(report.find("RECV_ACT0.0<0 <-- stuck"), std::string::npos) << report;
}

TEST(DryRun, ReportsUnreceivedMessages) {
  mplan::Program program;
  program.micro_batches = 1;
  program.per_gpu = {list_of({"SEND_ACT0.0>1"}), {}};
  EXPECT_NE(mplan::dry_run(program).find("never received"), std::string::npos);
}

// An ordered transport matches the k-th send with the k-th posted receive: posting two messages
// of one GPU pair the other way round is an error even though each is received.
TEST(DryRun, ReportsReceivesPostedOutOfSendingOrder) {
  mplan::Program program;
  program.micro_batches = 2;
  program.per_gpu = {list_of({"F0.0", "SEND_ACT0.0>1", "F0.1", "SEND_ACT0.1>1"}),
                     list_of({"POST_RECV_ACT0.1<0", "POST_RECV_ACT0.0<0", "RECV_ACT0.0<0", "F1.0",
                              "RECV_ACT0.1<0", "F1.1"})};
  const std::string report = mplan::dry_run(program);
  EXPECT_NE(report.find("message order differs: gpu 0 -> gpu 1: message 0 is SEND_ACT0.0>1"),
            std::string::npos)
      << report;
  std::swap(program.per_gpu[1][0], program.per_gpu[1][1]);
  EXPECT_EQ(mplan::dry_run(program), "");
}

TEST(DryRun, ReportsAReceiveWaitedForButNeverPosted) {
  mplan::Program program;
  program.micro_batches = 1;
  program.per_gpu = {list_of({"F0.0", "SEND_ACT0.0>1"}),
                     list_of({"RECV_ACT0.0<0", "POST_RECV_ACT0.0<0", "F1.0"})};
  EXPECT_NE(mplan::dry_run(program).find("gpu 1: waits for a receive it never posted"),
            std::string::npos)
      << mplan::dry_run(program);
}

// With the stages known (Program::slots), every op must find its data delivered.
TEST(DryRun, ReportsAnOpWhoseDataIsNotDelivered) {
  mplan::Program program;
  program.micro_batches = 1;
  program.slots = {1, 1};
  program.per_gpu = {list_of({"F0.0", "F1.0", "B1.0", "HAND_GRAD0.0", "B0.0"})};
  EXPECT_NE(mplan::dry_run(program).find("the input of F1.0 is not delivered before it"),
            std::string::npos)
      << mplan::dry_run(program);
  program.per_gpu = {list_of({"F0.0", "HAND_ACT0.0", "F1.0", "B1.0", "B0.0"})};
  EXPECT_NE(mplan::dry_run(program).find("the gradient that B0.0 needs is not delivered"),
            std::string::npos)
      << mplan::dry_run(program);
  program.per_gpu = {list_of({"F0.0", "HAND_ACT0.0", "F1.0", "B1.0", "HAND_GRAD0.0", "B0.0"})};
  EXPECT_EQ(mplan::dry_run(program), "");
}

TEST(Lower, RejectsBadOptions) {
  const mplan::Plan plan = madpipe::testing::pipelined_plan();
  EXPECT_THROW(mplan::lower(plan, 0), madpipe::Error);
  mplan::LowerOptions options;
  options.lookahead = -1;
  EXPECT_THROW(mplan::lower(plan, options), madpipe::Error);
  options.lookahead = 2;
  options.message_bytes = {8, 8, 8};  // not one per stage
  EXPECT_THROW(mplan::lower(plan, options), madpipe::Error);
  options.message_bytes.clear();
  options.update_micro_batches = -1;
  EXPECT_THROW(mplan::lower(plan, options), madpipe::Error);
}

// Asynchronous training asks for optimizer steps inside the program: one per stage after the
// m-th backward of each update, none for an incomplete last update.
TEST(Lower, OptimizerStepsFollowTheLastBackwardOfEachUpdate) {
  const mplan::Plan plan = madpipe::testing::pipelined_plan();
  mplan::LowerOptions options;
  options.micro_batches = 7;
  options.update_micro_batches = 3;
  const mplan::Program program = mplan::lower(plan, options);
  EXPECT_EQ(mplan::dry_run(program), "");
  EXPECT_EQ(program.update_micro_batches, 3);
  int steps = 0;
  for (const auto& list : program.per_gpu) {
    std::map<std::pair<int, int>, int> backwards;  // (stage, update) -> done
    for (const mplan::Instr& instr : list) {
      if (instr.kind == mplan::InstrKind::Backward)
        ++backwards[{instr.stage, instr.micro_batch / 3}];
      if (instr.kind != mplan::InstrKind::OptimizerStep) continue;
      ++steps;
      EXPECT_EQ((backwards[{instr.stage, instr.micro_batch}]), 3) << mplan::to_string(instr);
    }
  }
  EXPECT_EQ(steps, 2 * static_cast<int>(plan.stages.size()));  // updates 0 and 1
  EXPECT_EQ(mplan::lower(plan, 7).update_micro_batches, 0);
}

// Receive buffers with sizes get arena offsets; Upfront posts every receive first, each in its
// own allocation.
TEST(Lower, PlacesReceiveBuffersOrPostsThemUpFront) {
  const mplan::Plan plan = madpipe::testing::pipelined_plan();  // two stages on two GPUs
  mplan::LowerOptions options;
  options.micro_batches = 4;
  options.message_bytes = {1000, 8};
  const mplan::Program arena = mplan::lower(plan, options);
  const int receiver = plan.stages[1].gpu;
  ASSERT_EQ(arena.receive_buffers[receiver].size(), 4u);
  EXPECT_GT(arena.arena_bytes[receiver], 0);
  for (const mplan::ReceiveBuffer& buffer : arena.receive_buffers[receiver]) {
    EXPECT_EQ(buffer.bytes, 1024);
    EXPECT_GE(buffer.offset, 0);
    EXPECT_LE(buffer.offset + buffer.bytes, arena.arena_bytes[receiver]);
  }
  options.posting = mplan::ReceivePosting::Upfront;
  const mplan::Program upfront = mplan::lower(plan, options);
  EXPECT_EQ(mplan::dry_run(upfront), "");
  EXPECT_EQ(upfront.arena_bytes[receiver], 0);
  const auto& list = upfront.per_gpu[receiver];
  for (std::size_t k = 0; k < list.size(); ++k) {
    const bool post = list[k].kind == mplan::InstrKind::PostRecvAct ||
                      list[k].kind == mplan::InstrKind::PostRecvGrad;
    EXPECT_EQ(post, k < 4) << mplan::to_string(list[k]);
  }
  for (const mplan::ReceiveBuffer& buffer : upfront.receive_buffers[receiver])
    EXPECT_EQ(buffer.offset, -1);
}

TEST(Lower, MessageChannelsAreTheGpuPairsOfNeighbouringStages) {
  mplan::Plan plan;
  for (int gpu : {0, 0, 2, 1, 2}) {
    plan.stages.emplace_back();
    plan.stages.back().gpu = gpu;
  }
  const std::vector<std::pair<int, int>> expected = {{0, 2}, {1, 2}, {2, 0}, {2, 1}};
  EXPECT_EQ(mplan::message_channels(plan), expected);
  plan.stages.resize(2);  // both on GPU 0: no message
  EXPECT_TRUE(mplan::message_channels(plan).empty());
}
