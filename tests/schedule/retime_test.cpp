// retime(): shortest period keeping the cyclic order of every resource and every shift.

#include "schedule/retime.hpp"

#include "core/chain.hpp"
#include "plan/plan.hpp"
#include "plan/simulate.hpp"
#include "plan/validate.hpp"
#include "schedule/k_periodic.hpp"
#include "schedule/memory.hpp"
#include "schedule/modulo.hpp"
#include "schedule/one_f_one_b.hpp"
#include "schedule/pattern.hpp"
#include "schedule/stage.hpp"
#include "support/planner_support.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;
namespace mt = madpipe::testing;
using ms::OpKind;

namespace {

struct Case {
  std::string name;
  std::vector<ms::Stage> stages;
  madpipe::Platform platform;
  ms::Pattern pattern;
};

// Modulo patterns of random allocations, 1F1B* patterns of contiguous ones at several periods,
// their k-periodic variants, and 1F1B.
std::vector<Case> pattern_cases() {
  std::vector<Case> cases;
  std::mt19937 rng(4242);
  for (int trial = 0; trial < 30; ++trial) {
    const int layers = 3 + trial % 8;
    const int gpus = 2 + trial % 3;
    const int n = 2 + static_cast<int>(rng() % (layers - 1));
    Case c;
    c.stages = mt::random_stages(rng, layers, n, gpus, false);
    c.platform = mt::huge_memory_platform(gpus);
    const double busiest = mt::busiest_load(c.stages, c.platform);
    for (double factor : {1.1, 1.5, 3.0}) {
      if (auto p = ms::modulo_schedule(c.stages, c.platform, factor * busiest)) {
        c.name = "modulo trial " + std::to_string(trial) + " x" + std::to_string(factor);
        c.pattern = *p;
        cases.push_back(c);
        if (trial % 3 == 0) {
          c.name += " k=2";
          c.pattern = ms::drop_every_kth_plus_one(*p, 2);
          cases.push_back(c);
        }
      }
    }
  }
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 2 + trial % 5;
    Case c;
    c.stages = mt::random_stages(rng, n + trial % 3, n, n, true);
    c.platform = mt::huge_memory_platform(n);
    const auto resources = ms::pipeline_resources(c.stages, c.platform);
    const double lo = mt::max_load(resources), hi = mt::sum_of_loads(resources);
    for (double fraction : {0.0, 0.2, 0.5, 1.0, 2.0}) {
      const double T = lo + fraction * (hi - lo);
      auto p = ms::one_f_one_b_star(c.stages, c.platform, T);
      if (!p) continue;
      c.name = "1f1b* trial " + std::to_string(trial) + " T " + std::to_string(T);
      c.pattern = *p;
      cases.push_back(c);
      if (fraction == 0.0) {
        c.name += " k=3";
        c.pattern = ms::drop_every_kth_plus_one(*p, 3);
        cases.push_back(c);
      }
    }
    c.name = "1f1b trial " + std::to_string(trial);
    c.pattern = ms::one_f_one_b(c.stages, c.platform);
    cases.push_back(c);
  }
  return cases;
}

}  // namespace

TEST(Retime, NeverIncreasesThePeriodAndKeepsValidityAndMemory) {
  const std::vector<Case> cases = pattern_cases();
  ASSERT_GE(cases.size(), 150u);
  int shrunk = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(mplan::validate(mt::plan_of(c.stages, c.platform, c.pattern)).empty());
    const auto retimed = ms::retime(c.pattern, c.stages, c.platform);
    ASSERT_TRUE(retimed.has_value());
    EXPECT_EQ(retimed->k, c.pattern.k);
    EXPECT_EQ(retimed->ops.size(), c.pattern.ops.size());
    EXPECT_LE(retimed->period_ms, c.pattern.period_ms * (1 + 1e-12));
    if (retimed->period_ms < c.pattern.period_ms * (1 - 1e-6)) ++shrunk;
    // Never below the busiest resource's work per period.
    EXPECT_GE(retimed->period_ms,
              c.pattern.k * mt::busiest_load(c.stages, c.platform) * (1 - 1e-9));
    const auto violations = mplan::validate(mt::plan_of(c.stages, c.platform, *retimed));
    EXPECT_TRUE(violations.empty()) << mt::describe(violations);
    const int n = static_cast<int>(c.stages.size());
    EXPECT_EQ(ms::concurrent_activations(*retimed, n), ms::concurrent_activations(c.pattern, n));
    const auto before = ms::evaluate_memory(c.stages, c.pattern, c.platform);
    const auto after = ms::evaluate_memory(c.stages, *retimed, c.platform);
    ASSERT_EQ(before.size(), after.size());
    for (std::size_t g = 0; g < before.size(); ++g) {
      EXPECT_EQ(after[g].weights, before[g].weights) << "gpu " << g;
      EXPECT_EQ(after[g].activations, before[g].activations) << "gpu " << g;
      EXPECT_EQ(after[g].buffers, before[g].buffers) << "gpu " << g;
      EXPECT_EQ(after[g].workspace, before[g].workspace) << "gpu " << g;
    }
    // Retiming is idempotent: the result is already as tight as its order allows.
    const auto again = ms::retime(*retimed, c.stages, c.platform);
    ASSERT_TRUE(again.has_value());
    EXPECT_NEAR(again->period_ms, retimed->period_ms, 1e-9 * retimed->period_ms);
  }
  EXPECT_GE(shrunk, 40);
}

TEST(Retime, ShrinksOneFOneBStarWithSlackToTheChainLength) {
  // With T above the sum of the loads 1F1B* has one group: every stage keeps one micro-batch, so
  // micro-batch i+1 enters stage 0 after micro-batch i left it, and the tightest period is the
  // length of one micro-batch's chain.
  std::mt19937 rng(31);
  for (int trial = 0; trial < 10; ++trial) {
    const int n = 2 + trial % 4;
    const auto stages = mt::random_stages(rng, n, n, n, true);
    const auto platform = mt::huge_memory_platform(n);
    const double length = mt::chain_length(stages, platform);
    const auto slack = ms::one_f_one_b_star(stages, platform, 3 * length);
    ASSERT_TRUE(slack.has_value());
    const auto retimed = ms::retime(*slack, stages, platform);
    ASSERT_TRUE(retimed.has_value());
    EXPECT_LT(retimed->period_ms, slack->period_ms);
    EXPECT_NEAR(retimed->period_ms, length, 1e-9 * length);
    EXPECT_EQ(ms::concurrent_activations(*retimed, n), std::vector<int>(n, 1));
    EXPECT_TRUE(mplan::validate(mt::plan_of(stages, platform, *retimed)).empty());
  }
}

TEST(Retime, TightOneFOneBKeepsItsPeriod) {
  // Four stages f = 1, b = 2 with free transfers: 1F1B runs at period 3 with no idle time.
  std::vector<ms::Stage> stages;
  for (int s = 0; s < 4; ++s) stages.push_back(mt::hand_stage(s, s, 1, 2, 0, 10));
  const auto platform = mt::huge_memory_platform(4, 1e12);
  const ms::Pattern pattern = ms::one_f_one_b(stages, platform);
  ASSERT_DOUBLE_EQ(pattern.period_ms, 3.0);
  const auto retimed = ms::retime(pattern, stages, platform);
  ASSERT_TRUE(retimed.has_value());
  EXPECT_NEAR(retimed->period_ms, 3.0, 1e-9);
  // Retiming the same order at a larger period gives the period back.
  const auto loose =
      *ms::one_f_one_b_star_with_groups(stages, platform, {4, 3, 3, 2, 2, 1, 1}, 6.0);
  const auto tight = ms::retime(loose, stages, platform);
  ASSERT_TRUE(tight.has_value());
  EXPECT_NEAR(tight->period_ms, 3.0, 1e-9);
  EXPECT_EQ(ms::concurrent_activations(*tight, 4), (std::vector<int>{4, 3, 2, 1}));
}

TEST(Retime, InconsistentPatternsGiveNothing) {
  std::mt19937 rng(5);
  const auto stages = mt::random_stages(rng, 3, 3, 3, true);
  const auto platform = mt::huge_memory_platform(3);
  auto pattern = ms::one_f_one_b_star(stages, platform, 1e4);
  ASSERT_TRUE(pattern.has_value());
  ms::Pattern missing = *pattern;
  missing.ops.erase(std::find_if(missing.ops.begin(), missing.ops.end(),
                                 [](const ms::Op& op) { return op.kind == OpKind::B; }));
  EXPECT_FALSE(ms::retime(missing, stages, platform).has_value());
  ms::Pattern empty = *pattern;
  empty.ops.clear();
  EXPECT_FALSE(ms::retime(empty, stages, platform).has_value());
  ms::Pattern no_period = *pattern;
  no_period.period_ms = 0;
  EXPECT_FALSE(ms::retime(no_period, stages, platform).has_value());
}

TEST(Retime, SimulatedSteadyPeriodMatches) {
  const std::vector<Case> cases = pattern_cases();
  int checked = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto retimed = ms::retime(c.pattern, c.stages, c.platform);
    ASSERT_TRUE(retimed.has_value());
    const mplan::Plan plan = mt::plan_of(c.stages, c.platform, *retimed);
    mplan::SimOptions timetable;  // default number of micro-batches
    timetable.policy = mplan::StartPolicy::Timetable;
    const mplan::SimResult planned = mplan::simulate(plan, timetable);
    EXPECT_NEAR(planned.steady_period_ms, retimed->period_ms, 1e-6 * retimed->period_ms);
    EXPECT_NEAR(planned.steady_normalized_ms, retimed->normalized_period_ms(),
                1e-6 * retimed->period_ms);
    // ASAP keeps every op's order, so no op starts later than planned; its measured rate is at
    // least the planned one once the warm-up is over (see AsapSteadyPeriodWithDefaultMicroBatches).
    mplan::SimOptions asap;
    asap.policy = mplan::StartPolicy::Asap;
    asap.micro_batches = 40 * retimed->k;
    timetable.micro_batches = asap.micro_batches;
    const mplan::SimResult eager = mplan::simulate(plan, asap);
    const mplan::SimResult planned_long = mplan::simulate(plan, timetable);
    EXPECT_NEAR(planned_long.steady_period_ms, retimed->period_ms, 1e-6 * retimed->period_ms);
    EXPECT_LE(eager.steady_period_ms, retimed->period_ms * (1 + 1e-6));
    EXPECT_LE(eager.step_ms, planned_long.step_ms * (1 + 1e-9));
    ASSERT_EQ(eager.ops.size(), planned_long.ops.size());
    ++checked;
  }
  EXPECT_GE(checked, 150);
}

TEST(Retime, AsapSteadyPeriodWithDefaultMicroBatches) {
  // Regression: the default number of micro-batches used to end the warm-up too late here.
  // Three stages f = 1, b = 2 on three GPUs, transfers of 1.5 ms each way: five resources of
  // load 3, so 1F1B*(3) has five groups and stage 0 keeps five micro-batches in flight.
  std::vector<ms::Stage> stages;
  for (int s = 0; s < 3; ++s) stages.push_back(mt::hand_stage(s, s, 1, 2, s < 2 ? 1500 : 0));
  madpipe::Platform platform = mt::huge_memory_platform(3, 1000.0);
  const auto pattern = ms::one_f_one_b_star(stages, platform, 3.0);
  ASSERT_TRUE(pattern.has_value());
  ASSERT_EQ(ms::concurrent_activations(*pattern, 3), (std::vector<int>{5, 3, 1}));
  const mplan::Plan plan = mt::plan_of(stages, platform, *pattern);
  ASSERT_TRUE(mplan::validate(plan).empty());
  mplan::SimOptions asap;
  asap.policy = mplan::StartPolicy::Asap;
  // With 24 micro-batches the window starts after the warm-up and ASAP measures 3 ms.
  asap.micro_batches = 24;
  EXPECT_NEAR(mplan::simulate(plan, asap).steady_period_ms, 3.0, 1e-9);
  // With 12 micro-batches (4 * S, the former default) F0 of micro-batches 0..4 run back to back
  // (1 ms apart) and the window from micro-batch 3 to 9 measured (27 - 3) / 6 = 4 ms; the
  // default now covers the largest NCA.
  asap.micro_batches = 0;
  EXPECT_NEAR(mplan::simulate(plan, asap).steady_period_ms, 3.0, 1e-9);
}

TEST(Retime, ZeroDurationOpsStartingWithAnotherOpKeepTheirDependencies) {
  // Two stages on GPU 0: f0 = 0, b0 = 1, f1 = b1 = 0. Micro-batch 0 runs F0 F1 B1 at time 0 and
  // B0 in [0, 1); at T = 1 this is valid. Sorted by (start, stage, kind) GPU 0's order is
  // F0 B0 F1 B1, which forces F1 after the end of B0 while B0 depends on B1 after F1.
  const std::vector<ms::Stage> stages{mt::hand_stage(0, 0, 0, 1), mt::hand_stage(1, 0, 0, 0)};
  const auto platform = mt::huge_memory_platform(1);
  std::vector<ms::Op> chain = ms::micro_batch_chain(stages, platform);
  for (ms::Op& op : chain) op.start_ms = 0;
  const ms::Pattern pattern = ms::pattern_from_absolute_times(chain, 1.0);
  ASSERT_TRUE(mplan::validate(mt::plan_of(stages, platform, pattern)).empty());
  const auto retimed = ms::retime(pattern, stages, platform);
  ASSERT_TRUE(retimed.has_value());
  EXPECT_NEAR(retimed->period_ms, 1.0, 1e-9);
  EXPECT_TRUE(mplan::validate(mt::plan_of(stages, platform, *retimed)).empty());
}

namespace {
// Micro-batch i runs an op of shift x in period i - x: the time from `before`'s end to `next`'s
// start for one micro-batch.
double wait_ms(const ms::Op& before, const ms::Op& next, double period) {
  return next.start_ms + (before.shift - next.shift) * period - before.start_ms -
         before.duration_ms;
}

const ms::Op& op_of(const ms::Pattern& pattern, OpKind kind, int stage) {
  return *std::find_if(pattern.ops.begin(), pattern.ops.end(),
                       [&](const ms::Op& op) { return op.kind == kind && op.stage == stage; });
}

// The (before, next) dependencies of one micro-batch: the chain's and each W after its B.
std::vector<std::pair<ms::Op, ms::Op>> dependencies(const std::vector<ms::Stage>& stages,
                                                    const madpipe::Platform& platform) {
  std::vector<std::pair<ms::Op, ms::Op>> out;
  const auto chain = ms::micro_batch_chain(stages, platform);
  for (std::size_t c = 1; c < chain.size(); ++c) out.emplace_back(chain[c - 1], chain[c]);
  for (const ms::Op& w : ms::weight_ops(stages)) {
    ms::Op b = w;
    b.kind = OpKind::B;
    out.emplace_back(b, w);
  }
  return out;
}
}  // namespace

TEST(EarliestShifts, NoMicroBatchWaitsAWholePeriodAndNoStageKeepsMore) {
  // 1-periodic patterns with and without split backwards, and the same patterns where a random
  // point of the chain waits one to three whole periods more (everything before it shifted).
  std::vector<Case> cases;
  for (const Case& c : pattern_cases())
    if (c.pattern.k == 1) cases.push_back(c);
  std::mt19937 rng(77);
  for (int trial = 0; trial < 30; ++trial) {
    const int layers = 3 + trial % 6, num_stages = 2 + trial % (layers - 1);
    const bool contiguous = trial % 2 == 0;
    const int gpus = contiguous ? num_stages : 2 + trial % 3;
    const madpipe::Profile profile =
        mt::with_split_backward(mt::random_chain(rng, layers), 0.2 + 0.1 * (trial % 5));
    Case c;
    c.stages = mt::random_stages(rng, profile, num_stages, gpus, contiguous);
    c.platform = mt::huge_memory_platform(gpus);
    for (double factor : {1.3, 2.0, 4.0})
      if (auto p = ms::modulo_schedule(c.stages, c.platform,
                                       factor * mt::busiest_load(c.stages, c.platform))) {
        c.name = "split modulo trial " + std::to_string(trial) + " x" + std::to_string(factor);
        c.pattern = *p;
        cases.push_back(c);
      }
  }
  ASSERT_GE(cases.size(), 100u);
  int padded_cases = 0, split_cases = 0;
  for (const Case& original : cases) {
    const auto deps = dependencies(original.stages, original.platform);
    const int n = static_cast<int>(original.stages.size());
    if (!ms::weight_ops(original.stages).empty()) ++split_cases;
    Case padded = original;
    padded.name += " padded";
    const ms::Op& wait_before = deps[rng() % deps.size()].second;
    const int extra = 1 + static_cast<int>(rng() % 3);
    // Everything of micro-batch 0 up to wait_before's predecessor runs `extra` periods earlier.
    const auto chain = ms::micro_batch_chain(original.stages, original.platform);
    std::vector<std::pair<OpKind, int>> earlier;
    for (const ms::Op& c : chain) {
      if (c.kind == wait_before.kind && c.stage == wait_before.stage) break;
      earlier.emplace_back(c.kind, c.stage);
    }
    for (ms::Op& op : padded.pattern.ops) {
      const OpKind anchor = op.kind == OpKind::W ? OpKind::B : op.kind;
      if (std::find(earlier.begin(), earlier.end(), std::make_pair(anchor, op.stage)) !=
              earlier.end() &&
          !(op.kind == OpKind::W && wait_before.kind == OpKind::W && op.stage == wait_before.stage))
        op.shift += extra;
    }
    ms::normalize(padded.pattern);
    ms::Pattern tightest_of_original;
    for (const Case* c : std::initializer_list<const Case*>{&original, &padded}) {
      SCOPED_TRACE(c->name);
      const auto given = mplan::validate(mt::plan_of(c->stages, c->platform, c->pattern));
      ASSERT_TRUE(given.empty()) << mt::describe(given);
      const ms::Pattern tight = ms::with_earliest_shifts(c->pattern, c->stages, c->platform);
      EXPECT_EQ(tight.period_ms, c->pattern.period_ms);
      ASSERT_EQ(tight.ops.size(), c->pattern.ops.size());
      for (const ms::Op& op : tight.ops)
        EXPECT_EQ(op.start_ms, op_of(c->pattern, op.kind, op.stage).start_ms);
      const auto violations = mplan::validate(mt::plan_of(c->stages, c->platform, tight));
      EXPECT_TRUE(violations.empty()) << mt::describe(violations);
      for (const auto& [before, next] : deps) {
        const double wait = wait_ms(op_of(tight, before.kind, before.stage),
                                    op_of(tight, next.kind, next.stage), tight.period_ms);
        EXPECT_GE(wait, -1e-9 * tight.period_ms) << ms::op_token(next.kind, next.stage);
        EXPECT_LT(wait, tight.period_ms) << ms::op_token(next.kind, next.stage);
      }
      const auto kept = ms::concurrent_activations(tight, n);
      const auto before = ms::concurrent_activations(c->pattern, n);
      for (int s = 0; s < n; ++s) EXPECT_LE(kept[s], before[s]) << "stage " << s;
      if (c == &original) {
        tightest_of_original = tight;
      } else {
        // Padding is undone: the same shifts as the original's tightest.
        for (const ms::Op& op : tight.ops)
          EXPECT_EQ(op.shift, op_of(tightest_of_original, op.kind, op.stage).shift)
              << ms::op_token(op.kind, op.stage);
        if (kept != before) ++padded_cases;
      }
    }
  }
  EXPECT_GE(split_cases, 20);
  EXPECT_GE(padded_cases, 50);  // padding raised what some stage keeps, and it came back down
}

TEST(EarliestShifts, KPeriodicAndIncompletePatternsAreReturnedAsTheyAre) {
  std::mt19937 rng(5);
  const auto stages = mt::random_stages(rng, 3, 3, 3, true);
  const auto platform = mt::huge_memory_platform(3);
  const auto pattern = ms::one_f_one_b_star(stages, platform, 1e4);
  ASSERT_TRUE(pattern.has_value());
  const ms::Pattern k2 = ms::drop_every_kth_plus_one(*pattern, 2);
  EXPECT_EQ(ms::with_earliest_shifts(k2, stages, platform), k2);
  ms::Pattern missing = *pattern;
  missing.ops.erase(std::find_if(missing.ops.begin(), missing.ops.end(),
                                 [](const ms::Op& op) { return op.kind == OpKind::B; }));
  EXPECT_EQ(ms::with_earliest_shifts(missing, stages, platform), missing);
}
