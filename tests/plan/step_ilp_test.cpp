// The step ILP (plan/step_ilp.hpp): every op of a step, ordered on each GPU and link, the step's
// end minimized within a memory budget.

#include "plan/step_ilp.hpp"

#include "core/error.hpp"
#include "partition/planner.hpp"
#include "plan/simulate.hpp"
#include "plan/step.hpp"
#include "plan/validate.hpp"
#include "schedule/memory.hpp"
#include "solver/solve.hpp"
#include "support/planner_support.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <climits>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace mp = madpipe::partition;
namespace mplan = madpipe::plan;
namespace ms = madpipe::schedule;
namespace mt = madpipe::testing;

namespace {

// Interleaved 1F1B's loop on 2 GPUs (F = 1, B = 2 ms per chunk), planned without the step's
// micro-batches: its step runs the pattern's order, longer than Megatron's formula.
mplan::Plan loop_plan() {
  mp::PlannerOptions options;
  options.algorithm = mp::Algorithm::Interleaved;
  auto profile = mt::zero_bubble_chunks(2, 1000);
  for (auto& layer : profile.layers) layer.split_backward.reset();
  const auto result = mp::make_plan(profile, mt::huge_memory_platform(2), options);
  EXPECT_TRUE(result.feasible) << result.reason;
  return result.plan;
}

mplan::StepIlpOptions ilp_options(std::vector<std::int64_t> budget) {
  mplan::StepIlpOptions options;
  options.backend = madpipe::solver::built_backends().front();
  options.solve.time_limit_s = 60;
  options.memory_budget_bytes = std::move(budget);
  return options;
}

}  // namespace

// The ILP finds the shortest step of the loop's ops: Megatron's interleaved step, 6 m + 3 (p - 1)
// = 15 ms for m = 2, where the pattern's order takes longer; and proves it. Its order, run as the
// plan's step order, gives that step.
TEST(StepIlp, FindsAndProvesTheShortestStep) {
  if (madpipe::solver::built_backends().empty()) GTEST_SKIP() << "no MILP backend built";
  mplan::Plan plan = loop_plan();
  const int m = 2;
  const mplan::SimResult pattern_step = mplan::simulate_step(plan, m);
  EXPECT_GT(pattern_step.step_ms, 15 + 1e-6);
  const std::vector<std::int64_t> loose(2, std::int64_t{1} << 40);
  const mplan::StepIlpResult solved =
      mplan::solve_step_ilp(plan, m, ilp_options(loose), pattern_step);
  ASSERT_EQ(solved.status, madpipe::solver::Status::Optimal) << solved.message;
  ASSERT_TRUE(solved.order.has_value());
  EXPECT_NEAR(solved.step_ms, 15, 1e-6);
  EXPECT_NEAR(solved.bound_ms, 15, 1e-3);
  plan.step_order = solved.order;
  EXPECT_NEAR(mplan::simulate_step(plan, m).step_ms, 15, 1e-6);
  EXPECT_GT(mplan::step_ilp_binaries(plan, m), 0);
  EXPECT_EQ(mplan::step_ilp_binaries(plan, 100000), INT_MAX);
}

// Within the memory that the pattern's order holds, the ILP's order is no longer and keeps every
// GPU within it (Megatron's warm-up holds more).
TEST(StepIlp, KeepsTheMemoryBudget) {
  if (madpipe::solver::built_backends().empty()) GTEST_SKIP() << "no MILP backend built";
  mplan::Plan plan = loop_plan();
  const int m = 3;
  const mplan::SimResult pattern_step = mplan::simulate_step(plan, m);
  const std::vector<std::int64_t> budget = pattern_step.peak_memory_bytes;
  const mplan::StepIlpResult solved =
      mplan::solve_step_ilp(plan, m, ilp_options(budget), pattern_step);
  ASSERT_TRUE(solved.order.has_value()) << solved.message;
  plan.step_order = solved.order;
  const mplan::SimResult step = mplan::simulate_step(plan, m);
  EXPECT_LE(step.step_ms, pattern_step.step_ms + 1e-6);
  for (int g = 0; g < 2; ++g) EXPECT_LE(step.peak_memory_bytes[g], budget[g]) << g;
}

// With transfers that take time, the order gives each link's transfers too, and the step that
// order runs is the ILP's.
TEST(StepIlp, OrdersTheLinksToo) {
  if (madpipe::solver::built_backends().empty()) GTEST_SKIP() << "no MILP backend built";
  mp::PlannerOptions options;
  options.algorithm = mp::Algorithm::Interleaved;
  const madpipe::Profile profile =
      mt::make_chain({1, 1, 1, 1}, {2, 2, 2, 2}, {}, {500, 500, 500, 500});
  const auto result = mp::make_plan(profile, mt::huge_memory_platform(2, 1000), options);
  ASSERT_TRUE(result.feasible) << result.reason;
  mplan::Plan plan = result.plan;
  const int m = 3;
  const mplan::SimResult pattern_step = mplan::simulate_step(plan, m);
  const std::vector<std::int64_t> loose(2, std::int64_t{1} << 40);
  const mplan::StepIlpResult solved =
      mplan::solve_step_ilp(plan, m, ilp_options(loose), pattern_step);
  ASSERT_TRUE(solved.order.has_value()) << solved.message;
  EXPECT_FALSE(solved.order->per_link.empty());
  plan.step_order = solved.order;
  EXPECT_TRUE(mplan::validate(plan).empty()) << mt::describe(mplan::validate(plan));
  const double step_ms = mplan::simulate_step(plan, m).step_ms;
  EXPECT_NEAR(step_ms, solved.step_ms, 1e-6);
  EXPECT_LE(step_ms, pattern_step.step_ms + 1e-6);
}

TEST(StepIlp, RefusesWhatItCannotModel) {
  const mplan::Plan plan = loop_plan();
  const mplan::SimResult step = mplan::simulate_step(plan, 2);
  EXPECT_THROW(mplan::solve_step_ilp(plan, 0, ilp_options({1, 1}), step), madpipe::Error);
  EXPECT_THROW(mplan::solve_step_ilp(plan, 2, ilp_options({1}), step), madpipe::Error);
  EXPECT_THROW(mplan::solve_step_ilp(plan, 100000, ilp_options({1, 1}), step), madpipe::Error);
}

// madpipe with --scheduler ilp and the step's micro-batches solves the step ILP where its step
// is above the lower bound, keeps the ILP's order where it is shorter, and says so.
TEST(StepIlp, TheMadPipePlannerProvesOrImprovesItsStep) {
  if (madpipe::solver::built_backends().empty()) GTEST_SKIP() << "no MILP backend built";
  std::mt19937 rng(11);
  int noted = 0;
  for (int trial = 0; trial < 3; ++trial) {
    const madpipe::Profile profile = mt::with_split_backward(mt::random_chain(rng, 5), 0.4);
    const madpipe::Platform platform = mt::huge_memory_platform(2);
    mp::PlannerOptions options;
    options.micro_batches_per_step = 3;
    options.scheduler = mp::Scheduler::Ilp;
    options.milp.time_limit_s = 5;
    const auto result = mp::make_plan(profile, platform, options);
    ASSERT_TRUE(result.feasible);
    EXPECT_TRUE(mplan::validate(result.plan, profile).empty());
    for (const std::string& note : result.notes)
      if (note.rfind("the step ILP (", 0) == 0) {
        ++noted;
        EXPECT_NE(note.find("is shorter than"), std::string::npos) << note;
        if (note.find(": kept") != std::string::npos) {
          EXPECT_TRUE(result.plan.step_order.has_value());
        }
      }
  }
  EXPECT_GT(noted, 0);
}
