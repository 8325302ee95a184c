// Planned receive buffers of a rank's instruction list: post times, lifetimes and arena offsets.

#include "plan/receive_plan.hpp"

#include "core/error.hpp"
#include "partition/planner.hpp"
#include "plan/program.hpp"
#include "support/test_support.hpp"

#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ms = madpipe::schedule;
namespace marena = madpipe::arena;
namespace mplan = madpipe::plan;
namespace mp = madpipe::partition;

static std::vector<mplan::Instr> list_of(const std::vector<std::string>& tokens) {
  std::vector<mplan::Instr> list;
  for (const std::string& token : tokens) list.push_back(mplan::instr_from_string(token));
  return list;
}

// The last stage of a two-stage 1F1B pipeline, one micro-batch at a time.
static const std::vector<std::string> kLastStage = {
    "RECV_ACT0.0<0",  "F1.0",          "B1.0", "SEND_GRAD0.0>0", "RECV_ACT0.1<0", "F1.1", "B1.1",
    "SEND_GRAD0.1>0", "RECV_ACT0.2<0", "F1.2", "B1.2",           "SEND_GRAD0.2>0"};

TEST(ReceivePlan, ActivationsLiveFromTheirPostToTheBackward) {
  const mplan::ReceivePlan plan = mplan::plan_receives(list_of(kLastStage), {1000, 1000}, true, 0);
  ASSERT_EQ(plan.slots.size(), 3u);
  EXPECT_EQ(plan.slots[1].instr, 4);
  EXPECT_EQ(plan.slots[1].post_before, 4);  // no lookahead: right before it is waited for
  EXPECT_EQ(plan.slots[1].last_use, 6);     // B1.1
  EXPECT_EQ(plan.slots[1].bytes, 1024);     // rounded up to the alignment
  // The lifetimes are disjoint: one slot serves all three.
  EXPECT_EQ(plan.arena_bytes(), 1024);
  for (const mplan::ReceiveSlot& slot : plan.slots) EXPECT_EQ(slot.offset, 0);
}

TEST(ReceivePlan, LookaheadPostsEarlierAndNeedsMoreSlots) {
  const mplan::ReceivePlan plan = mplan::plan_receives(list_of(kLastStage), {1000, 1000}, true, 2);
  ASSERT_EQ(plan.slots.size(), 3u);
  EXPECT_EQ(plan.slots[0].post_before, 0);  // nothing to run before the first forward
  // Two compute instructions ahead would be before F1.0, which uses the activation of
  // micro-batch 0: one message in transit per cut, so right after it, while B1.0 runs.
  EXPECT_EQ(plan.slots[1].post_before, 2);
  EXPECT_EQ(plan.arena_bytes(), 2048);  // micro-batch 1 lands while 0 is still in use
  // Validation keeps no activation: the lookahead alone decides.
  EXPECT_EQ(mplan::plan_receives(list_of(kLastStage), {1000, 1000}, false, 2).slots[1].post_before,
            1);
  EXPECT_TRUE(marena::overlapping_live_buffers(plan.addresses).empty());
}

TEST(ReceivePlan, ValidationFreesAnActivationAfterItsForward) {
  const std::vector<std::string> forwards = {"RECV_ACT0.0<0", "F1.0", "RECV_ACT0.1<0", "F1.1"};
  const mplan::ReceivePlan plan = mplan::plan_receives(list_of(forwards), {4096, 4096}, false, 1);
  ASSERT_EQ(plan.slots.size(), 2u);
  EXPECT_EQ(plan.slots[0].last_use, 1);
  EXPECT_EQ(plan.slots[1].post_before, 1);  // one forward ahead: shares timestep 1 with slot 0
  EXPECT_EQ(plan.arena_bytes(), 8192);
}

TEST(ReceivePlan, GradientsLiveUntilTheirBackward) {
  const std::vector<std::string> first_stage = {
      "F0.0",           "SEND_ACT0.0>1", "F0.1",           "SEND_ACT0.1>1",
      "RECV_GRAD0.0<1", "B0.0",          "RECV_GRAD0.1<1", "B0.1"};
  const mplan::ReceivePlan plan = mplan::plan_receives(list_of(first_stage), {512, 512}, true, 1);
  ASSERT_EQ(plan.slots.size(), 2u);
  EXPECT_EQ(plan.slots[0].post_before, 2);  // F0.1 runs while the gradient of 0 arrives
  EXPECT_EQ(plan.slots[0].last_use, 5);
  // One compute instruction ahead would be before B0.0, which still uses the gradient of 0:
  // posted right after it, one buffer serves both.
  EXPECT_EQ(plan.slots[1].post_before, 6);
  EXPECT_EQ(plan.arena_bytes(), 512);
  // Validation programs receive no gradient.
  EXPECT_TRUE(mplan::plan_receives(list_of(first_stage), {512, 512}, false, 1).slots.empty());
}

// A peer sends the activation of stage 0 before that of stage 2; the rank needs them the other
// way round. Posting follows the sender (one order per GPU pair): stage 0's is posted first.
TEST(ReceivePlan, ReceivesFromAPeerArePostedInItsSendingOrder) {
  std::vector<mplan::Instr> list =
      list_of({"RECV_ACT2.0<0", "F3.0", "F3.1", "RECV_ACT0.0<0", "F1.0"});
  list[0].sequence = 1;
  list[3].sequence = 0;
  const mplan::ReceivePlan plan = mplan::plan_receives(list, {64, 64, 64, 64}, false, 0);
  ASSERT_EQ(plan.slots.size(), 2u);
  EXPECT_EQ(plan.slots[0].post_before, 0);
  EXPECT_EQ(plan.slots[1].post_before, 0);  // not 3: it comes first from peer 0
  EXPECT_EQ(plan.arena_bytes(), 512);       // both live at once
  // Without sequence numbers the list order is the sending order.
  list[0].sequence = list[3].sequence = -1;
  EXPECT_EQ(mplan::plan_receives(list, {64, 64, 64, 64}, false, 0).slots[1].post_before, 3);
}

// A rank between two stages of its peer (stage 2 here, stages 1 and 3 on rank 1) receives their
// activations and gradients from one sender, which sends the gradient of micro-batch 1 before the
// activation of micro-batch 2. The activation waits for the gradient's post, rather than pulling
// it before micro-batch 0's gradient is used: one gradient in transit per cut, as the memory
// model counts.
TEST(ReceivePlan, AReceiveWaitsForThoseItsPeerSendsBefore) {
  std::vector<mplan::Instr> list = list_of(
      {"RECV_ACT1.0<1", "F2.0", "SEND_ACT2.0>1", "RECV_ACT1.1<1", "F2.1", "SEND_ACT2.1>1",
       "RECV_GRAD2.0<1", "B2.0", "SEND_GRAD1.0>1", "RECV_ACT1.2<1", "F2.2", "SEND_ACT2.2>1",
       "RECV_GRAD2.1<1", "B2.1", "SEND_GRAD1.1>1", "RECV_GRAD2.2<1", "B2.2", "SEND_GRAD1.2>1"});
  const std::vector<int> receive_order = {0, 1, 2, 4, 3, 5};  // act1.2 after grad2.1
  std::vector<int> receives;
  for (int k = 0; k < static_cast<int>(list.size()); ++k)
    if (mplan::is_wait(list[k].kind)) receives.push_back(k);
  for (std::size_t r = 0; r < receives.size(); ++r) list[receives[r]].sequence = receive_order[r];
  const mplan::ReceivePlan plan = mplan::plan_receives(list, {0, 1024, 1024, 0}, true, 2);
  ASSERT_EQ(plan.slots.size(), 6u);
  const mplan::ReceiveSlot& gradient0 = plan.slots[2];
  const mplan::ReceiveSlot& activation2 = plan.slots[3];
  const mplan::ReceiveSlot& gradient1 = plan.slots[4];
  EXPECT_EQ(gradient0.last_use, 7);       // B2.0
  EXPECT_EQ(gradient1.post_before, 8);    // after it
  EXPECT_EQ(activation2.post_before, 8);  // not before the gradient sent before it
  EXPECT_LE(activation2.post_before, activation2.instr);
  EXPECT_TRUE(marena::overlapping_live_buffers(plan.addresses).empty());
}

TEST(ReceivePlan, AReceiveNobodyUsesIsAnError) {
  try {
    mplan::plan_receives(list_of({"RECV_ACT0.3<0", "F1.2"}), {8, 8}, true);
    FAIL() << "expected an error";
  } catch (const madpipe::Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "the receive RECV_ACT0.3<0 has no forward and backward of stage 1"),
              std::string::npos)
        << e.what();
  }
}

TEST(ReceivePlan, LongProgramsAreLeftToTheAllocator) {
  const mplan::ReceivePlan plan =
      mplan::plan_receives(list_of(kLastStage), {1000, 1000}, true, 2, 2);
  EXPECT_FALSE(plan.placed());
  for (const mplan::ReceiveSlot& slot : plan.slots) EXPECT_EQ(slot.offset, -1);
}

// Plans of the planner, lowered: every rank's receives get aligned, non-overlapping offsets in an
// arena no larger than their sum and no smaller than their live peak.
TEST(ReceivePlan, EveryRankOfPlannedPipelinesGetsAValidArena) {
  std::mt19937 rng(11);
  int arenas = 0;
  for (int trial = 0; trial < 8; ++trial) {
    const madpipe::Profile profile = madpipe::testing::random_chain(rng, 5 + trial % 4);
    madpipe::Platform platform;
    platform.gpus = 2 + trial % 3;
    platform.bandwidth_bytes_per_ms = 1e7;
    platform.memory_bytes = std::int64_t{1} << 40;
    mp::PlannerOptions options;
    options.scheduler = mp::Scheduler::Heuristic;
    options.discretization.time_steps = 21;
    options.discretization.delay_steps = 11;
    options.discretization.memory_steps = 6;
    options.discretization.iterations = 4;
    options.discretization.extra_targets = 1;
    const mp::PlanResult result = mp::make_plan(profile, platform, options);
    ASSERT_TRUE(result.feasible) << result.reason;
    std::vector<std::int64_t> bytes;
    for (const madpipe::Layer& layer : profile.layers) bytes.push_back(layer.output_bytes);
    std::vector<std::int64_t> stage_bytes;
    for (const ms::Stage& stage : result.plan.stages)
      stage_bytes.push_back(bytes[stage.last_layer]);
    const mplan::Program program = mplan::lower(result.plan, 6);
    for (const auto& list : program.per_gpu)
      for (bool train : {true, false}) {
        const mplan::ReceivePlan plan = mplan::plan_receives(list, stage_bytes, train);
        if (plan.slots.empty()) continue;
        ++arenas;
        EXPECT_TRUE(marena::overlapping_live_buffers(plan.addresses).empty());
        std::int64_t sum = 0;
        for (const mplan::ReceiveSlot& slot : plan.slots) {
          EXPECT_EQ(slot.offset % mplan::kReceiveAlignment, 0);
          EXPECT_LE(slot.post_before, slot.last_use);
          sum += slot.bytes;
        }
        EXPECT_LE(plan.arena_bytes(), sum);
        EXPECT_GE(plan.arena_bytes(), marena::live_bytes_lower_bound(plan.addresses.buffers));
      }
  }
  EXPECT_GT(arenas, 8);
}
