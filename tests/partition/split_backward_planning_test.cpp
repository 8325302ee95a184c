// Planning with split backwards (--split-backward auto|off).

#include "core/chain.hpp"
#include "core/profile.hpp"
#include "core/units.hpp"
#include "partition/allocation.hpp"
#include "partition/backward_splits.hpp"
#include "partition/madpipe_dp.hpp"
#include "partition/planner.hpp"
#include "plan/plan.hpp"
#include "plan/validate.hpp"
#include "schedule/memory.hpp"
#include "schedule/search.hpp"
#include "solver/solve.hpp"
#include "support/planner_support.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <algorithm>
#include <iostream>
#include <random>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace mp = madpipe::partition;
namespace mplan = madpipe::plan;
namespace ms = madpipe::schedule;
namespace mt = madpipe::testing;

namespace {

// Every layer defers `fraction` of its backward to W and keeps half its saved bytes until W.
std::string text_of(const mplan::Plan& plan) {
  std::ostringstream out;
  mplan::write_plan(plan, out);
  return out.str();
}

// Eight equal layers, F = 1, B = 2 (I = W = 1 when split), 1 MB stored each, no weights.
madpipe::Profile equal_layers() {
  madpipe::Profile profile =
      mt::make_chain(std::vector<double>(8, 1.0), std::vector<double>(8, 2.0),
                     std::vector<std::int64_t>(8, 0), std::vector<std::int64_t>(8, 1000), 1000);
  profile.name = "equal";
  for (madpipe::Layer& layer : profile.layers) layer.saved_bytes = 1000000;
  return profile;
}

}  // namespace

TEST(SplitBackwardPlanning, OffPlansTheWholeProfileByteForByte) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 4; ++trial) {
    const madpipe::Profile profile = mt::random_chain(rng, 8);
    const madpipe::Platform platform = mt::huge_memory_platform(3);
    mp::PlannerOptions options;
    const auto whole = mp::make_plan(profile, platform, options);
    options.split_backward = mp::BackwardSplit::Off;
    const auto off = mp::make_plan(mt::with_split_backward(profile, 0.5), platform, options);
    ASSERT_TRUE(whole.feasible && off.feasible);
    EXPECT_EQ(text_of(off.plan), text_of(whole.plan));
    EXPECT_FALSE(mt::has_weight_ops(off.plan));
  }
}

TEST(SplitBackwardPlanning, AutoIsValidAndNeverSlowerThanWholeBackwards) {
  std::mt19937 rng(12);
  int split_kept = 0;
  for (int trial = 0; trial < 6; ++trial) {
    const madpipe::Profile profile =
        mt::with_split_backward(mt::random_chain(rng, 8), 0.4 + 0.1 * trial);
    madpipe::Platform platform = mt::huge_memory_platform(2 + trial % 3);
    mp::PlannerOptions options;
    options.split_backward = mp::BackwardSplit::Off;
    const auto off = mp::make_plan(profile, platform, options);
    ASSERT_TRUE(off.feasible);
    // Tight memory: what the whole plan needs on its fullest GPU, less 20%.
    std::int64_t peak = 0;
    for (std::int64_t bytes : off.plan.predicted.memory_bytes) peak = std::max(peak, bytes);
    for (std::int64_t memory : {platform.memory_bytes, peak * 8 / 10}) {
      platform.memory_bytes = memory;
      options.split_backward = mp::BackwardSplit::Off;
      const auto whole = mp::make_plan(profile, platform, options);
      options.split_backward = mp::BackwardSplit::Auto;
      const auto automatic = mp::make_plan(profile, platform, options);
      if (!whole.feasible) continue;
      ASSERT_TRUE(automatic.feasible);
      const auto violations = mplan::validate(automatic.plan, profile);
      EXPECT_TRUE(violations.empty()) << mt::describe(violations);
      EXPECT_LE(automatic.plan.predicted.period_ms, whole.plan.predicted.period_ms * (1 + 1e-9));
      split_kept += mt::has_weight_ops(automatic.plan);
      bool noted = false;
      for (const std::string& note : automatic.notes)
        noted = noted || note.find("split backward (B and W)") != std::string::npos;
      EXPECT_TRUE(noted);
    }
  }
  EXPECT_GT(split_kept, 0);
}

// Plans `profile` with --split-backward off, then auto: auto keeps a valid plan with W ops and a
// shorter period.
static void expect_the_split_wins(const madpipe::Profile& profile,
                                  const madpipe::Platform& platform, mp::PlannerOptions options) {
  options.split_backward = mp::BackwardSplit::Off;
  const auto whole = mp::make_plan(profile, platform, options);
  options.split_backward = mp::BackwardSplit::Auto;
  const auto automatic = mp::make_plan(profile, platform, options);
  ASSERT_TRUE(whole.feasible && automatic.feasible);
  EXPECT_EQ(automatic.plan.algorithm, mp::to_string(options.algorithm));
  EXPECT_TRUE(mt::has_weight_ops(automatic.plan));
  EXPECT_LT(automatic.plan.predicted.period_ms, whole.plan.predicted.period_ms * (1 - 1e-6))
      << "split " << automatic.plan.predicted.period_ms << " ms, whole "
      << whole.plan.predicted.period_ms << " ms";
  const auto violations = mplan::validate(automatic.plan, profile);
  EXPECT_TRUE(violations.empty()) << mt::describe(violations);
}

TEST(SplitBackwardPlanning, TheSplitWinsWhereMemoryLimitsMicroBatchesInFlight) {
  const madpipe::Profile profile = mt::with_split_backward(equal_layers(), 0.5);
  // Four GPUs, room for the stored bytes of about three micro-batches of a two-layer stage.
  const madpipe::Platform platform = mt::make_platform(4, 7000000, 1e6, 1);
  mp::PlannerOptions options;
  // The heuristic schedules show it (the stage ILP, without a time limit, spends a minute here).
  options.scheduler = mp::Scheduler::Heuristic;
  expect_the_split_wins(profile, platform, options);
}

// The full ILP too: on four of those layers and two GPUs, with room for the stored bytes of two
// and a half micro-batches of a layer, whole backwards take 9 ms per micro-batch at best (the
// solver proves it in about a second), and the split plan of its warm start alone takes 8 ms.
TEST(SplitBackwardPlanning, TheFullIlpKeepsTheSplitWhereMemoryLimitsMicroBatchesInFlight) {
  if (madpipe::solver::built_backends().empty()) GTEST_SKIP() << "no MILP backend built";
  madpipe::Profile chain = equal_layers();
  chain.layers.resize(4);
  mp::PlannerOptions options;
  options.algorithm = mp::Algorithm::Ilp;
  options.time_limit_s = 4;
  expect_the_split_wins(mt::with_split_backward(chain, 0.5), mt::make_platform(2, 2500000, 1e6, 1),
                        options);
}

TEST(SplitBackwardPlanning, BaselinesRunWholeBackwards) {
  const madpipe::Profile profile = mt::with_split_backward(equal_layers(), 0.5);
  const madpipe::Platform platform = mt::huge_memory_platform(4);
  for (mp::Algorithm algorithm :
       {mp::Algorithm::OneFOneB, mp::Algorithm::GPipe, mp::Algorithm::PipeDream}) {
    mp::PlannerOptions options;
    options.algorithm = algorithm;
    const auto result = mp::make_plan(profile, platform, options);
    ASSERT_TRUE(result.feasible) << mp::to_string(algorithm);
    EXPECT_FALSE(mt::has_weight_ops(result.plan)) << mp::to_string(algorithm);
    for (const ms::Stage& stage : result.plan.stages) EXPECT_FALSE(stage.splits_backward());
  }
  EXPECT_TRUE(mp::can_split_backward(mp::Algorithm::MadPipe));
  EXPECT_TRUE(mp::can_split_backward(mp::Algorithm::Ilp));
  EXPECT_FALSE(mp::can_split_backward(mp::Algorithm::GPipe));
  EXPECT_EQ(mp::backward_split_from_string("off"), mp::BackwardSplit::Off);
  EXPECT_THROW(mp::backward_split_from_string("sometimes"), madpipe::Error);
}

// The DPs count a split stage's round trip without its W (1F1B* groups do): under tight memory
// they estimate fewer micro-batches in flight, hence allocations the whole-backward estimate
// rejects.
TEST(SplitBackwardPlanning, DpEstimatesGroupsWithoutW) {
  const madpipe::Profile whole = equal_layers();
  const madpipe::Profile profile = mt::with_split_backward(whole, 0.5);
  const madpipe::Platform platform = mt::make_platform(4, 7000000, 1e6, 1);
  const mp::Discretization discretization;
  int split_better = 0;
  for (double target : {6.0, 7.0, 8.0, 9.0}) {
    const mp::DpResult with =
        mp::madpipe_dp(madpipe::ChainCosts(profile), platform, discretization, false, target, 1e9);
    const mp::DpResult without =
        mp::madpipe_dp(madpipe::ChainCosts(whole), platform, discretization, false, target, 1e9);
    EXPECT_LE(with.period_ms, without.period_ms) << "target " << target;
    split_better += with.period_ms < without.period_ms;
  }
  EXPECT_GT(split_better, 0);
}

// Where memory is short, splitting the backward only on part of the chain can beat both whole
// backwards and the split everywhere: auto tries the first and last halves and quarters, keeps
// the shortest period and says so. Random 16-layer chains whose split keeps all their saved
// bytes, on the least memory a whole-backward 1F1B plan needs.
TEST(SplitBackwardPlanning, APartialSplitCanWinWhereMemoryIsShort) {
  std::mt19937 rng(31);
  int partial_kept = 0;
  for (int trial = 0; trial < 8; ++trial) {
    madpipe::Profile profile = mt::with_split_backward(mt::random_chain(rng, 16), 0.5);
    for (madpipe::Layer& layer : profile.layers)
      layer.split_backward->kept_bytes = layer.saved_bytes;
    madpipe::Platform platform = mt::make_platform(4, 1, 5e7, 1);
    mp::PlannerOptions options;
    options.scheduler = mp::Scheduler::Heuristic;
    options.split_backward = mp::BackwardSplit::Off;
    mp::PlannerOptions one_f_one_b = options;
    one_f_one_b.algorithm = mp::Algorithm::OneFOneB;
    platform.memory_bytes = mp::smallest_feasible_memory(profile, platform, one_f_one_b);
    ASSERT_GT(platform.memory_bytes, 0);
    const auto whole = mp::make_plan(profile, platform, options);
    options.split_backward = mp::BackwardSplit::Auto;
    const auto automatic = mp::make_plan(profile, platform, options);
    ASSERT_TRUE(whole.feasible && automatic.feasible);
    const auto violations = mplan::validate(automatic.plan, profile);
    EXPECT_TRUE(violations.empty()) << mt::describe(violations);
    EXPECT_LE(automatic.plan.predicted.period_ms, whole.plan.predicted.period_ms * (1 + 1e-9));
    std::string note;
    for (const std::string& n : automatic.notes)
      if (n.find("split backward (B and W)") != std::string::npos) note = n;
    if (note.find("the partial split is kept") == std::string::npos) continue;
    ++partial_kept;
    int split = 0, whole_stages = 0;
    for (const ms::Stage& stage : automatic.plan.stages)
      (stage.splits_backward() ? split : whole_stages) += 1;
    EXPECT_GT(split, 0) << note;
    EXPECT_GT(whole_stages, 0) << note;
    EXPECT_LT(automatic.plan.predicted.period_ms, whole.plan.predicted.period_ms * (1 - 1e-6));
  }
  EXPECT_GT(partial_kept, 0);
}

// On a fixed allocation, the choice of which stages split never makes the period longer, leaves
// every stage split as its layers are or whole, and shortens the period of some tight plans.
TEST(SplitBackwardPlanning, ChoosingWhichStagesSplitNeverLosesAndCanWin) {
  std::mt19937 rng(32);
  int shorter = 0;
  for (int trial = 0; trial < 12; ++trial) {
    madpipe::Profile profile = mt::with_split_backward(mt::random_chain(rng, 12), 0.5);
    for (madpipe::Layer& layer : profile.layers)
      layer.split_backward->kept_bytes = layer.saved_bytes;
    const madpipe::ChainCosts costs(profile);
    mp::Allocation allocation;
    for (int s = 0; s < 6; ++s) {
      allocation.first_layers.push_back(2 * s);
      allocation.gpus.push_back(s % 3);
    }
    const std::vector<ms::Stage> stages = mp::stages_of(costs, allocation);
    madpipe::Platform platform = mt::make_platform(3, 0, 5e7, 1);
    platform.memory_bytes = mt::kHugeMemory;
    const auto loose = ms::schedule_under_memory(stages, platform);
    ASSERT_TRUE(loose);
    std::int64_t peak = 0;
    for (std::int64_t bytes : ms::totals(ms::evaluate_memory(stages, loose->pattern, platform)))
      peak = std::max(peak, bytes);
    platform.memory_bytes = peak * 9 / 10;
    const auto start = ms::schedule_under_memory(stages, platform);
    if (!start) continue;
    mp::RefineOptions options;
    options.max_evaluations = 60;
    const mp::SplitChoice chosen =
        mp::choose_backward_splits(costs, platform, {stages, *start}, options, nullptr);
    const double before = start->pattern.normalized_period_ms();
    const double after = chosen.scheduled.pattern.normalized_period_ms();
    EXPECT_LE(after, before * (1 + 1e-9));
    ASSERT_EQ(chosen.stages.size(), stages.size());
    for (std::size_t s = 0; s < stages.size(); ++s) {
      const ms::Stage& stage = chosen.stages[s];
      EXPECT_TRUE(stage == stages[s] || stage == madpipe::schedule::with_whole_backward(stages[s]))
          << s;
    }
    EXPECT_TRUE(ms::fits_memory(chosen.stages, chosen.scheduled.pattern, platform));
    const auto violations =
        mplan::validate(mt::plan_of(chosen.stages, platform, chosen.scheduled.pattern), profile);
    EXPECT_TRUE(violations.empty()) << mt::describe(violations);
    shorter += after < before * (1 - 1e-6);
  }
  EXPECT_GT(shorter, 0);
}

// Given the step's micro-batches, madpipe compares whole and split backwards by the step's time:
// on the zero-bubble paper's uniform case (F = B = W = 2 ms per stage, nothing stored) both have
// the period 6 ms, but only the split fills the warm-up's and drain's bubbles with W: a step of
// (p - 1) F + m (F + B + W), the isolated step's lower bound, where 1F1B's takes
// (p - 1 + m)(F + B + W).
TEST(StepObjective, MadPipeReachesTheIsolatedStepLowerBoundOnUniformChains) {
  mt::for_each_zero_bubble_case([](const madpipe::Profile& profile,
                                   const madpipe::Platform& platform, int p, int m) {
    mp::PlannerOptions options;
    options.micro_batches_per_step = m;
    const auto result = mp::make_plan(profile, platform, options);
    ASSERT_TRUE(result.feasible) << result.reason;
    EXPECT_TRUE(mplan::validate(result.plan, profile).empty());
    ASSERT_TRUE(result.plan.predicted.step.has_value());
    EXPECT_NEAR(result.plan.predicted.step->time_ms, 2.0 * (p - 1) + 6.0 * m, 1e-6);
    EXPECT_NEAR(result.plan.predicted.period_ms, 6.0, 1e-6);
    const std::string note =
        "split backward (B and W): a step of " + madpipe::format_ms(2.0 * (p - 1) + 6.0 * m) +
        " (6.00 ms per micro-batch), whole backwards: " + madpipe::format_ms(6.0 * (p - 1 + m)) +
        " (6.00 ms); the split is kept";
    EXPECT_NE(std::find(result.notes.begin(), result.notes.end(), note), result.notes.end())
        << "no note \"" << note << "\" among:\n"
        << ::testing::PrintToString(result.notes);
    // Without the step the period decides: a tie, and whole backwards are kept.
    const auto steady = mp::make_plan(profile, platform, {});
    ASSERT_TRUE(steady.feasible);
    EXPECT_FALSE(steady.plan.predicted.step.has_value());
    EXPECT_NEAR(steady.plan.predicted.period_ms, 6.0, 1e-6);
  });
}

// Given the step's micro-batches, madpipe's plan never has a longer step than any baseline's
// (ZB-H1, ZB-V and interleaved 1F1B in their published orders, 1F1B): where the best plan by
// period loses to a baseline's partition and schedule in the step, madpipe keeps the latter and
// says so.
TEST(StepObjective, MadPipesStepIsNoLongerThanAnyBaselines) {
  std::mt19937 rng(47);
  int replaced = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const int gpus = 2 + trial % 3, layers = 2 * gpus + trial % 5;
    const madpipe::Profile profile =
        mt::with_split_backward(mt::random_chain(rng, layers), 0.3 + 0.1 * (trial % 3));
    const madpipe::Platform platform = mt::huge_memory_platform(gpus);
    for (int m : {gpus, 2 * gpus}) {
      SCOPED_TRACE("trial " + std::to_string(trial) + " m " + std::to_string(m));
      mp::PlannerOptions options;
      options.micro_batches_per_step = m;
      const auto madpipe = mp::make_plan(profile, platform, options);
      ASSERT_TRUE(madpipe.feasible && madpipe.plan.predicted.step);
      EXPECT_TRUE(mplan::validate(madpipe.plan, profile).empty());
      EXPECT_EQ(madpipe.plan.algorithm, "madpipe");
      for (mp::Algorithm algorithm : {mp::Algorithm::ZbH1, mp::Algorithm::ZbV,
                                      mp::Algorithm::Interleaved, mp::Algorithm::OneFOneB}) {
        SCOPED_TRACE(mp::to_string(algorithm));
        options.algorithm = algorithm;
        const auto baseline = mp::make_plan(profile, platform, options);
        ASSERT_TRUE(baseline.feasible && baseline.plan.predicted.step) << baseline.reason;
        EXPECT_LE(madpipe.plan.predicted.step->time_ms,
                  baseline.plan.predicted.step->time_ms * (1 + 1e-9));
      }
      const auto kept =
          std::find_if(madpipe.notes.begin(), madpipe.notes.end(), [](const std::string& note) {
            return note.find("'s partition and schedule give a shorter step") != std::string::npos;
          });
      if (kept != madpipe.notes.end()) ++replaced;
    }
  }
  std::cout << replaced << " of 24 steps kept a baseline's plan\n";
}
