// Today's schedules as baselines: interleaved 1F1B, ZB-H1 and ZB-V, and madpipe against them.

#include "core/chain.hpp"
#include "core/profile.hpp"
#include "partition/allocation.hpp"
#include "partition/loop_placements.hpp"
#include "partition/planner.hpp"
#include "plan/plan.hpp"
#include "plan/simulate.hpp"
#include "plan/step.hpp"
#include "plan/validate.hpp"
#include "schedule/memory.hpp"
#include "support/planner_support.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <algorithm>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace mp = madpipe::partition;
namespace mplan = madpipe::plan;
namespace ms = madpipe::schedule;
namespace mt = madpipe::testing;

namespace {

// The largest compute or cut transfer of the best cut into `chunks`, by trying every cut.
double best_by_search(const madpipe::ChainCosts& costs, const madpipe::Platform& platform,
                      int chunks, int first, double so_far) {
  const int layers = costs.num_layers();
  if (chunks == 1) return std::max(so_far, costs.compute_ms(first, layers - 1));
  double best = std::numeric_limits<double>::infinity();
  for (int last = first; last <= layers - chunks; ++last) {
    const double here =
        std::max({so_far, costs.compute_ms(first, last), mp::link_ms(costs, last, platform)});
    best = std::min(best, best_by_search(costs, platform, chunks - 1, last + 1, here));
  }
  return best;
}

double worst_of(const madpipe::ChainCosts& costs, const madpipe::Platform& platform,
                const std::vector<int>& first_layers) {
  double worst = 0;
  for (std::size_t c = 0; c < first_layers.size(); ++c) {
    const int last = c + 1 < first_layers.size() ? first_layers[c + 1] - 1 : costs.num_layers() - 1;
    worst = std::max(worst, costs.compute_ms(first_layers[c], last));
    if (c > 0) worst = std::max(worst, mp::link_ms(costs, first_layers[c] - 1, platform));
  }
  return worst;
}

}  // namespace

TEST(LoopPlacements, BalancedCutsAreOptimal) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 30; ++trial) {
    const madpipe::Profile profile = mt::random_chain(rng, 3 + static_cast<int>(rng() % 7));
    const madpipe::ChainCosts costs(profile);
    const madpipe::Platform platform = mt::huge_memory_platform(2);
    const int chunks = 1 + static_cast<int>(rng() % costs.num_layers());
    const auto cuts = mp::balanced_cuts(costs, platform, chunks);
    ASSERT_TRUE(cuts.has_value());
    ASSERT_EQ(static_cast<int>(cuts->size()), chunks);
    EXPECT_EQ(cuts->front(), 0);
    EXPECT_TRUE(std::is_sorted(cuts->begin(), cuts->end()));
    EXPECT_EQ(std::adjacent_find(cuts->begin(), cuts->end()), cuts->end());  // no empty chunk
    EXPECT_NEAR(worst_of(costs, platform, *cuts), best_by_search(costs, platform, chunks, 0, 0),
                1e-9);
  }
  const madpipe::ChainCosts three(mt::make_chain({1, 1, 1}, {1, 1, 1}));
  EXPECT_FALSE(mp::balanced_cuts(three, mt::huge_memory_platform(2), 4).has_value());
}

TEST(LoopPlacements, LoopAndVPlaceChunksOnGpus) {
  const madpipe::ChainCosts costs(mt::make_chain(std::vector<double>(12, 1.0)));
  const madpipe::Platform platform = mt::huge_memory_platform(3);
  const auto loop = mp::interleaved_allocation(costs, platform, 2);
  ASSERT_TRUE(loop.has_value());
  EXPECT_EQ(loop->gpus, (std::vector<int>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(loop->first_layers, (std::vector<int>{0, 2, 4, 6, 8, 10}));
  const auto v = mp::v_shape_allocation(costs, platform);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->gpus, (std::vector<int>{0, 1, 2, 2, 1, 0}));
  madpipe::Platform four = platform;
  four.gpus = 7;
  EXPECT_FALSE(mp::v_shape_allocation(costs, four).has_value());  // 14 chunks, 12 layers
}

TEST(Baselines, PlansAreValidAndSplitWhereTheyShould) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 4; ++trial) {
    const madpipe::Profile profile = mt::with_split_backward(mt::random_chain(rng, 16), 0.5);
    const madpipe::Platform platform = mt::huge_memory_platform(2 + trial % 3);
    for (mp::Algorithm algorithm :
         {mp::Algorithm::Interleaved, mp::Algorithm::ZbH1, mp::Algorithm::ZbV}) {
      SCOPED_TRACE(mp::to_string(algorithm));
      mp::PlannerOptions options;
      options.algorithm = algorithm;
      const auto result = mp::make_plan(profile, platform, options);
      ASSERT_TRUE(result.feasible) << result.reason;
      const auto violations = mplan::validate(result.plan, profile);
      EXPECT_TRUE(violations.empty()) << mt::describe(violations);
      EXPECT_EQ(mt::has_weight_ops(result.plan), algorithm != mp::Algorithm::Interleaved);
      if (algorithm != mp::Algorithm::ZbH1) {
        EXPECT_EQ(static_cast<int>(result.plan.stages.size()), 2 * platform.gpus);
      }
      options.split_backward = mp::BackwardSplit::Off;
      const auto whole = mp::make_plan(profile, platform, options);
      ASSERT_TRUE(whole.feasible);
      EXPECT_FALSE(mt::has_weight_ops(whole.plan));
    }
  }
}

// ZB-H1 is 1F1B with W filling the bubbles: never slower than 1F1B, and equal without a split.
TEST(Baselines, ZbH1IsOneFOneBWithTheBubblesFilled) {
  std::mt19937 rng(6);
  for (int trial = 0; trial < 5; ++trial) {
    const madpipe::Profile whole_profile = mt::random_chain(rng, 10);
    const madpipe::Profile profile = mt::with_split_backward(whole_profile, 0.5);
    const madpipe::Platform platform = mt::huge_memory_platform(4);
    mp::PlannerOptions options;
    options.algorithm = mp::Algorithm::OneFOneB;
    const auto one_f_one_b = mp::make_plan(profile, platform, options);
    options.algorithm = mp::Algorithm::ZbH1;
    const auto zero_bubble = mp::make_plan(profile, platform, options);
    const auto unsplit = mp::make_plan(whole_profile, platform, options);
    ASSERT_TRUE(one_f_one_b.feasible && zero_bubble.feasible && unsplit.feasible);
    EXPECT_LE(zero_bubble.plan.predicted.period_ms,
              one_f_one_b.plan.predicted.period_ms * (1 + 1e-9));
    EXPECT_NEAR(unsplit.plan.predicted.period_ms, one_f_one_b.plan.predicted.period_ms,
                1e-9 * one_f_one_b.plan.predicted.period_ms);
  }
}

TEST(Baselines, TooFewLayersForTwoChunksPerGpu) {
  const madpipe::Profile profile = mt::make_chain({1, 1, 1, 1, 1}, {2, 2, 2, 2, 2});
  mp::PlannerOptions options;
  options.algorithm = mp::Algorithm::ZbV;
  const auto result = mp::make_plan(profile, mt::huge_memory_platform(3), options);
  EXPECT_FALSE(result.feasible);
  EXPECT_NE(result.reason.find("needs at least 6 layers, the chain has 5"), std::string::npos)
      << result.reason;
}

TEST(Baselines, SmallestFeasibleMemoryOfAPlacementIsFeasible) {
  std::mt19937 rng(8);
  const madpipe::Profile profile = mt::with_split_backward(mt::random_chain(rng, 12), 0.5);
  madpipe::Platform platform = mt::huge_memory_platform(3);
  for (mp::Algorithm algorithm : {mp::Algorithm::Interleaved, mp::Algorithm::ZbV}) {
    SCOPED_TRACE(mp::to_string(algorithm));
    mp::PlannerOptions options;
    options.algorithm = algorithm;
    const std::int64_t memory = mp::smallest_feasible_memory(profile, platform, options);
    ASSERT_GT(memory, 0);
    madpipe::Platform enough = platform;
    enough.memory_bytes = memory;
    EXPECT_TRUE(mp::make_plan(profile, enough, options).feasible);
  }
}

// madpipe schedules the baselines' placements and ZB-H1 among its candidates.
TEST(Baselines, MadPipeIsNeverWorse) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 6; ++trial) {
    const madpipe::Profile profile =
        mt::with_split_backward(mt::random_chain(rng, 12), 0.3 + 0.1 * trial);
    madpipe::Platform platform = mt::huge_memory_platform(2 + trial % 3);
    mp::PlannerOptions options;
    // The heuristic schedules alone already match every baseline (the stage ILP only improves).
    options.scheduler = mp::Scheduler::Heuristic;
    options.algorithm = mp::Algorithm::OneFOneB;
    const auto reference = mp::make_plan(profile, platform, options);
    ASSERT_TRUE(reference.feasible);
    const std::int64_t peak = *std::max_element(reference.plan.predicted.memory_bytes.begin(),
                                                reference.plan.predicted.memory_bytes.end());
    for (std::int64_t memory : {platform.memory_bytes, peak}) {
      platform.memory_bytes = memory;
      options.algorithm = mp::Algorithm::MadPipe;
      const auto madpipe_plan = mp::make_plan(profile, platform, options);
      ASSERT_TRUE(madpipe_plan.feasible);
      for (mp::Algorithm algorithm : {mp::Algorithm::OneFOneB, mp::Algorithm::Interleaved,
                                      mp::Algorithm::ZbH1, mp::Algorithm::ZbV}) {
        options.algorithm = algorithm;
        const auto baseline = mp::make_plan(profile, platform, options);
        if (!baseline.feasible) continue;
        EXPECT_LE(madpipe_plan.plan.predicted.period_ms,
                  baseline.plan.predicted.period_ms * (1 + 1e-9))
            << mp::to_string(algorithm) << ", trial " << trial << ", memory " << memory;
      }
    }
  }
}

// On the zero-bubble paper's uniform case (every stage F = 2 ms, B = 4 ms of which W = 2 ms, free
// links), a synchronous step of m micro-batches run as soon as possible takes what the papers
// say: 1F1B (m + p - 1)(F + B), and GPipe with m micro-batches per flush the same.
TEST(Baselines, StepsOfOneFOneBAndGPipeMatchTheirFormulasOnUniformChains) {
  for (int p : {2, 3, 4, 8}) {
    const madpipe::Profile profile = mt::zero_bubble_chain(p, 0);
    const madpipe::Platform platform = mt::huge_memory_platform(p);
    for (int m : {p, 2 * p, 4 * p}) {
      for (mp::Algorithm algorithm : {mp::Algorithm::OneFOneB, mp::Algorithm::GPipe}) {
        SCOPED_TRACE(std::string(mp::to_string(algorithm)) + " p " + std::to_string(p) + " m " +
                     std::to_string(m));
        mp::PlannerOptions options;
        options.algorithm = algorithm;
        options.micro_batches_per_step = m;
        const auto result = mp::make_plan(profile, platform, options);
        ASSERT_TRUE(result.feasible) << result.reason;
        mplan::SimOptions step;
        step.micro_batches = m;
        step.policy = mplan::StartPolicy::Asap;
        EXPECT_NEAR(mplan::simulate(result.plan, step).step_ms, (m + p - 1) * 6.0, 1e-6);
      }
    }
  }
}

// ZB-H1 on the same case (Qi et al. 2024): in a step its W ops wait in the warm-up's and drain's
// bubbles, with or without stored activations (1000 bytes, 100 kept for W). Planned with the
// step's micro-batches, the plan predicts the step, and the runtime's order (simulated) runs it.
// The zero-bubble paper's uniform case (F = B = W): ZB-H1's step, (p - 1)(F + B - W) + m (F + B +
// W) = (p - 1) F + m (F + B + W), at 1F1B's memory: the step takes no GPU above the busiest one's
// pattern peak (the prediction adds what the runtime's program holds besides).
TEST(Baselines, ZbH1StepMeetsItsFormulaWithinTheBusiestGpusMemory) {
  mt::for_each_zero_bubble_case(
      [](const madpipe::Profile& profile, const madpipe::Platform& platform, int p, int m) {
        mp::PlannerOptions options;
        options.algorithm = mp::Algorithm::ZbH1;
        options.micro_batches_per_step = m;
        const auto result = mp::make_plan(profile, platform, options);
        ASSERT_TRUE(result.feasible) << result.reason;
        ASSERT_TRUE(result.plan.predicted.step.has_value());
        const double zb_h1 = 2.0 * (p - 1) + 6.0 * m;
        EXPECT_NEAR(result.plan.predicted.step->time_ms, zb_h1, 1e-6);
        EXPECT_NEAR(mplan::step_lower_bound_ms(result.plan, m), zb_h1, 1e-6);
        mplan::SimOptions step;
        step.micro_batches = m;
        step.policy = mplan::StartPolicy::Asap;
        const mplan::SimResult simulated = mplan::simulate(result.plan, step);
        EXPECT_NEAR(simulated.step_ms, zb_h1, 1e-6);
        const std::vector<std::int64_t> pattern_peaks = ms::totals(
            ms::evaluate_memory(result.plan.stages, result.plan.pattern, result.plan.platform));
        const std::int64_t busiest = *std::max_element(pattern_peaks.begin(), pattern_peaks.end());
        for (int g = 0; g < p; ++g) {
          SCOPED_TRACE("gpu " + std::to_string(g));
          EXPECT_LE(simulated.peak_memory_bytes[g], busiest);
          EXPECT_LE(simulated.peak_memory_bytes[g], result.plan.predicted.memory_bytes[g]);
        }
      });
}

// Plans `algorithm` on the uniform case cut in chunks (mt::zero_bubble_chunks) with the step's m
// micro-batches, and checks what every plan with a published order satisfies: it has its order,
// passes the validator, and the runtime's order (simulated) runs the predicted step within the
// predicted memory. Returns the plan (std::nullopt where planning failed).
static std::optional<mplan::Plan> ordered_plan(mp::Algorithm algorithm, int p, int m,
                                               std::int64_t stored) {
  SCOPED_TRACE("p " + std::to_string(p) + " m " + std::to_string(m) + ", " +
               std::to_string(stored) + " bytes stored");
  const madpipe::Profile profile = mt::zero_bubble_chunks(p, stored);
  mp::PlannerOptions options;
  options.algorithm = algorithm;
  options.micro_batches_per_step = m;
  const auto result = mp::make_plan(profile, mt::huge_memory_platform(p), options);
  EXPECT_TRUE(result.feasible) << result.reason;
  EXPECT_TRUE(result.plan.step_order.has_value()) << ::testing::PrintToString(result.notes);
  EXPECT_TRUE(result.plan.predicted.step.has_value());
  if (!result.feasible || !result.plan.step_order || !result.plan.predicted.step)
    return std::nullopt;
  const auto violations = mplan::validate(result.plan, profile);
  EXPECT_TRUE(violations.empty()) << mt::describe(violations);
  const mplan::SimResult step = mplan::simulate_step(result.plan, m);
  EXPECT_NEAR(step.step_ms, result.plan.predicted.step->time_ms, 1e-6);
  for (int g = 0; g < p; ++g)
    EXPECT_LE(step.peak_memory_bytes[g], result.plan.predicted.memory_bytes[g]) << g;
  return result.plan;
}

// Interleaved 1F1B with two chunks per GPU on the uniform case cut in chunks (F = 1 ms, whole
// backward 2 ms per chunk): planned with the step's micro-batches, it runs Megatron's order
// (Plan::step_order) and its step takes Narayanan et al.'s m (F + B) + (p - 1)(F + B) / 2 per
// GPU, F and B each GPU's: 6 m + 3 (p - 1) ms.
TEST(Baselines, InterleavedStepMeetsMegatronsFormula) {
  for (int p : {2, 3, 4, 8})
    for (std::int64_t stored : {0, 1000})
      for (int m : {p, 2 * p, 4 * p}) {
        const auto plan = ordered_plan(mp::Algorithm::Interleaved, p, m, stored);
        ASSERT_TRUE(plan.has_value());
        EXPECT_NEAR(plan->predicted.step->time_ms, 6.0 * m + 3.0 * (p - 1), 1e-6)
            << "p " << p << " m " << m;
      }
}

// ZB-V on the same chunked case (F = B = W = 1 ms per chunk): planned with the step's
// micro-batches, it runs the zero-bubble paper's V order (torch.distributed.pipelining's
// ScheduleZBVZeroBubble, Plan::step_order). From m = 2p - 1 micro-batches on, which fill the V,
// its step is the V's isolated-step lower bound, (p - 1) F + m (F + B + W) per GPU = 6 m + p - 1
// ms, below ZB-H1's 6 m + 2 (p - 1): no GPU idles after micro-batch 0 reaches it. With fewer
// micro-batches it is no longer than ZB-H1's.
TEST(Baselines, ZbVStepMeetsTheVsLowerBound) {
  for (int p : {2, 3, 4, 8})
    for (std::int64_t stored : {0, 1000})
      for (int m : {p, 2 * p - 1, 2 * p, 4 * p}) {
        SCOPED_TRACE("p " + std::to_string(p) + " m " + std::to_string(m));
        const auto plan = ordered_plan(mp::Algorithm::ZbV, p, m, stored);
        ASSERT_TRUE(plan.has_value());
        const double step_ms = plan->predicted.step->time_ms;
        const double bound = 6.0 * m + (p - 1);
        EXPECT_NEAR(mplan::step_lower_bound_ms(*plan, m), bound, 1e-6);
        if (m >= 2 * p - 1)
          EXPECT_NEAR(step_ms, bound, 1e-6);
        else
          EXPECT_LE(step_ms, 6.0 * m + 2.0 * (p - 1) + 1e-6);
      }
}
