// Lowering plans to per-GPU instruction lists and the symbolic dry run.

#include "plan/program.hpp"

#include "core/chain.hpp"
#include "core/error.hpp"
#include "partition/planner.hpp"
#include "schedule/memory.hpp"
#include "support/test_support.hpp"

#include <map>
#include <random>
#include <tuple>

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

TEST(InstrToken, RoundTrips) {
  for (const char* token : {"F2.7", "B0.0", "SEND_ACT2.7>1", "RECV_ACT2.7<0", "SEND_GRAD1.3>0",
                            "RECV_GRAD0.12<3", "OPT4"}) {
    EXPECT_EQ(mplan::to_string(mplan::instr_from_string(token)), token);
  }
  for (const char* bad : {"", "F", "X1.2", "F1.2>3", "SEND_ACT1.2", "SEND_ACT1.2<3", "OPT1.2"})
    EXPECT_THROW(mplan::instr_from_string(bad), madpipe::Error) << bad;
}

TEST(Lower, EveryPlanOfEveryAlgorithmRunsWithoutDeadlock) {
  std::mt19937 rng(7);
  int programs = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const madpipe::Profile profile = madpipe::testing::random_chain(rng, 4 + trial % 6);
    for (int gpus : {2, 3, 4}) {
      for (mp::Algorithm algorithm : mp::all_algorithms()) {
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

TEST(DryRun, ReportsADeadlockWithTheStuckInstructions) {
  mplan::Program program;
  program.micro_batches = 1;
  // Each GPU waits for the other before sending: a cycle.
  program.per_gpu = {
      {mplan::instr_from_string("RECV_GRAD0.0<1"), mplan::instr_from_string("SEND_ACT0.0>1")},
      {mplan::instr_from_string("RECV_ACT0.0<0"), mplan::instr_from_string("SEND_GRAD0.0>0")}};
  const std::string report = mplan::dry_run(program);
  EXPECT_NE(report.find("program deadlocks"), std::string::npos) << report;
  EXPECT_NE(report.find("RECV_GRAD0.0<1 <-- stuck"), std::string::npos) << report;
  EXPECT_NE(report.find("RECV_ACT0.0<0 <-- stuck"), std::string::npos) << report;
}

TEST(DryRun, ReportsUnreceivedMessages) {
  mplan::Program program;
  program.micro_batches = 1;
  program.per_gpu = {{mplan::instr_from_string("SEND_ACT0.0>1")}, {}};
  EXPECT_NE(mplan::dry_run(program).find("never received"), std::string::npos);
}

TEST(Lower, RejectsZeroMicroBatches) {
  const madpipe::Profile profile =
      madpipe::testing::make_chain({1, 1}, {1, 1}, {10, 10}, {5, 5}, 5);
  madpipe::Platform platform;
  platform.gpus = 2;
  platform.memory_bytes = 1000;
  platform.bandwidth_bytes_per_ms = 1;
  const mp::PlanResult result = mp::make_plan(profile, platform);
  ASSERT_TRUE(result.feasible);
  EXPECT_THROW(mplan::lower(result.plan, 0), madpipe::Error);
}
