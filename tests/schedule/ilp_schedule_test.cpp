// The pattern ILP on a fixed partition (thesis ch. 7.2): known patterns are feasible points of the
// program, and what the solver returns is a valid pattern no slower than the heuristics'.

#include "schedule/ilp_schedule.hpp"

#include "core/error.hpp"
#include "plan/validate.hpp"
#include "schedule/memory.hpp"
#include "schedule/pattern_ilp.hpp"
#include "schedule/retime.hpp"
#include "schedule/search.hpp"
#include "solver/solve.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;
namespace mt = madpipe::testing;
namespace msv = madpipe::solver;

namespace {

bool have_backend() { return !msv::built_backends().empty(); }

// The best 1-periodic pattern of the heuristic scheduler.
std::optional<ms::Pattern> heuristic_one_periodic(const std::vector<ms::Stage>& stages,
                                                  const madpipe::Platform& platform) {
  ms::ScheduleSearchOptions search;
  search.max_k = 1;
  auto scheduled = ms::schedule_under_memory(stages, platform, search);
  if (!scheduled) return std::nullopt;
  return scheduled->pattern;
}

struct Instance {
  std::vector<ms::Stage> stages;
  madpipe::Platform platform;
  madpipe::Profile profile;
};

// Random partitions of random chains on 2-3 GPUs, contiguous and not, with memory for a little
// more than what the heuristic's pattern needs (so that memory binds). With `split`, every stage
// splits its backward (40 % in W, which keeps half, as much or one and a half times the stored
// bytes: more, and the memory peaks at the end of a B; the profile stays whole: validate these
// plans without it).
std::vector<Instance> instances(int count, unsigned seed, double bandwidth_bytes_per_ms = 5e7,
                                bool split = false) {
  std::mt19937 rng(seed);
  std::vector<Instance> out;
  while (static_cast<int>(out.size()) < count) {
    const int layers = 4 + static_cast<int>(rng() % 3);
    const int gpus = 2 + static_cast<int>(rng() % 2);
    const int num_stages = std::min(layers, gpus + static_cast<int>(rng() % 2));
    Instance instance;
    instance.profile = mt::random_chain(rng, layers);
    const bool contiguous = num_stages <= gpus && rng() % 2 == 0;
    instance.stages = mt::random_stages(rng, instance.profile, num_stages, gpus, contiguous);
    if (split)
      for (ms::Stage& stage : instance.stages) {
        stage.backward_weight_ms = 0.4 * stage.backward_ms;
        stage.weight_kept_bytes = stage.stored_bytes * static_cast<std::int64_t>(1 + rng() % 3) / 2;
      }
    instance.platform = mt::huge_memory_platform(gpus, bandwidth_bytes_per_ms);
    auto pattern = heuristic_one_periodic(instance.stages, instance.platform);
    if (!pattern) continue;
    const auto totals =
        ms::totals(ms::evaluate_memory(instance.stages, *pattern, instance.platform));
    instance.platform.memory_bytes = *std::max_element(totals.begin(), totals.end()) * 21 / 20;
    out.push_back(instance);
  }
  return out;
}

// The stage-level ILP of the instance, warm-started from `heuristic`, with the first backend built.
ms::IlpScheduleResult ilp_from(const Instance& instance,
                               const std::optional<ms::Pattern>& heuristic) {
  ms::IlpScheduleOptions options;
  options.backend = msv::built_backends().front();
  options.warm_start = heuristic;
  return ms::ilp_schedule(instance.stages, instance.platform, options);
}

}  // namespace

TEST(PatternIlp, KnownPatternsAreFeasiblePointsOfTheProgram) {
  for (const Instance& instance : instances(12, 7)) {
    const auto pattern = heuristic_one_periodic(instance.stages, instance.platform);
    ASSERT_TRUE(pattern);
    ms::PatternIlp::Spec spec{instance.stages, true, pattern->period_ms * 1.5};
    ms::PatternIlp ilp(spec, instance.platform);
    ASSERT_TRUE(ilp.set_start(instance.stages, *pattern));
    EXPECT_EQ(mt::violated_rows(ilp.model(), mt::hint_values(ilp.model())),
              std::vector<std::string>{});
    // The same pattern read back from its own variables has the same period.
    const ms::PatternIlp::Decoded decoded = ilp.decode(mt::hint_values(ilp.model()));
    EXPECT_LE(decoded.pattern.period_ms, pattern->period_ms * (1 + 1e-9));
    EXPECT_TRUE(
        mplan::validate(mt::plan_of(decoded.stages, instance.platform, decoded.pattern)).empty());
  }
}

TEST(PatternIlp, FreeAllocationAcceptsKnownPatternsToo) {
  // Slow links too: transfers as long as the period, where big-M constants are tightest.
  std::vector<Instance> all = instances(8, 11);
  for (const Instance& instance : instances(8, 13, 2e6)) all.push_back(instance);
  for (const Instance& instance : all) {
    const auto pattern = heuristic_one_periodic(instance.stages, instance.platform);
    ASSERT_TRUE(pattern);
    ms::PatternIlp::Spec spec{instance.stages, false, pattern->period_ms * 1.5};
    ms::PatternIlp ilp(spec, instance.platform);
    ASSERT_TRUE(ilp.set_start(instance.stages, *pattern));
    EXPECT_EQ(mt::violated_rows(ilp.model(), mt::hint_values(ilp.model())),
              std::vector<std::string>{});
  }
}

TEST(PatternIlp, RejectsPatternsItCannotExpress) {
  const auto stages = mt::chain_stages({1, 1}, {2, 2});
  const madpipe::Platform platform = mt::huge_memory_platform(2);
  ms::Pattern pattern = ms::one_f_one_b(stages, platform);
  ms::PatternIlp ilp({stages, true, 100}, platform);
  pattern.k = 2;
  EXPECT_FALSE(ilp.set_start(stages, pattern));
  EXPECT_TRUE(ilp.model().hints().empty());
}

TEST(IlpSchedule, ReturnsValidPatternsNoSlowerThanTheHeuristic) {
  if (!have_backend()) GTEST_SKIP() << "no MILP backend built";
  int improved = 0;
  for (const Instance& instance : instances(10, 3)) {
    const auto heuristic = heuristic_one_periodic(instance.stages, instance.platform);
    const ms::IlpScheduleResult result = ilp_from(instance, heuristic);
    ASSERT_TRUE(result.pattern) << msv::to_string(result.solve.status) << " "
                                << result.solve.message;
    EXPECT_TRUE(result.warm_started);
    const auto violations = mplan::validate(
        mt::plan_of(instance.stages, instance.platform, *result.pattern), instance.profile);
    EXPECT_TRUE(violations.empty())
        << violations.front().field << ": " << violations.front().problem;
    EXPECT_EQ(result.pattern->k, 1);
    // The period is the objective; no micro-batch waits a whole period between two of its ops.
    EXPECT_EQ(ms::with_earliest_shifts(*result.pattern, instance.stages, instance.platform),
              *result.pattern);
    EXPECT_LE(result.pattern->period_ms, heuristic->period_ms * (1 + 1e-6));
    EXPECT_GE(result.pattern->period_ms,
              ms::busiest_resource_ms(instance.stages, instance.platform) * (1 - 1e-6));
    if (result.pattern->period_ms < heuristic->period_ms * (1 - 1e-6)) ++improved;
  }
  RecordProperty("improved", improved);
}

TEST(IlpSchedule, WhereMemoryIsAmpleNoMicroBatchWaitsAWholePeriod) {
  if (!have_backend()) GTEST_SKIP() << "no MILP backend built";
  // The period is the objective and memory does not bind: without the earliest shifts the
  // solver's choice of whole periods to wait is arbitrary (a stage of a 4-stage plan of a 4-layer
  // chain kept 26 micro-batches in flight).
  int checked = 0;
  for (bool split : {false, true})
    for (Instance instance : instances(6, 21, 5e7, split)) {
      instance.platform.memory_bytes = std::int64_t{1} << 40;
      ms::IlpScheduleOptions options;
      options.backend = msv::built_backends().front();
      const ms::IlpScheduleResult result =
          ms::ilp_schedule(instance.stages, instance.platform, options);
      if (!result.pattern) continue;
      ++checked;
      EXPECT_EQ(ms::with_earliest_shifts(*result.pattern, instance.stages, instance.platform),
                *result.pattern);
    }
  EXPECT_GE(checked, 10);
}

TEST(IlpSchedule, ReachesTheBusiestResourceWhenMemoryIsAmple) {
  if (!have_backend()) GTEST_SKIP() << "no MILP backend built";
  // Two balanced stages on two GPUs with cheap transfers: the GPU load, 3 ms, is achievable.
  auto stages = mt::chain_stages({1, 1}, {2, 2});
  stages[0].output_bytes = 100;
  const madpipe::Platform platform = mt::huge_memory_platform(2, 1000);
  ms::IlpScheduleOptions options;
  options.backend = msv::built_backends().front();
  const ms::IlpScheduleResult result = ms::ilp_schedule(stages, platform, options);
  ASSERT_TRUE(result.pattern);
  EXPECT_EQ(result.solve.status, msv::Status::Optimal);
  EXPECT_NEAR(result.pattern->period_ms, 3.0, 1e-6);
}

TEST(IlpSchedule, InfeasibleWhenNothingFits) {
  if (!have_backend()) GTEST_SKIP() << "no MILP backend built";
  auto stages = mt::chain_stages({1, 1}, {2, 2});
  madpipe::Platform platform = mt::huge_memory_platform(2);
  platform.memory_bytes = 1;  // 3 weight copies of nothing fit, one stored byte in flight too...
  for (auto& s : stages) s.weight_bytes = 10;  // ...but not 30 bytes of weights
  ms::IlpScheduleOptions options;
  options.backend = msv::built_backends().front();
  const ms::IlpScheduleResult result = ms::ilp_schedule(stages, platform, options);
  EXPECT_FALSE(result.pattern);
  EXPECT_EQ(result.solve.status, msv::Status::Infeasible);
}

TEST(IlpSchedule, UnknownBackendIsAnError) {
  const auto stages = mt::chain_stages({1}, {2});
  ms::IlpScheduleOptions options;
  options.backend = "cplex";
  EXPECT_THROW(ms::ilp_schedule(stages, mt::huge_memory_platform(1), options), madpipe::Error);
}

int weight_ops(const ms::Pattern& pattern) {
  return static_cast<int>(std::count_if(pattern.ops.begin(), pattern.ops.end(),
                                        [](const ms::Op& op) { return op.kind == ms::OpKind::W; }));
}

// Known split patterns satisfy every row, decode to themselves and validate: with a fixed
// allocation, and with a free one (the full ILP), where a W node's GPU is its block's, chosen by
// the program, and the kept bytes count where the block is and nowhere else.
static void expect_split_patterns_are_feasible_points(const std::vector<Instance>& all,
                                                      bool fixed_allocation) {
  for (const Instance& instance : all) {
    const auto pattern = heuristic_one_periodic(instance.stages, instance.platform);
    ASSERT_TRUE(pattern);
    ASSERT_EQ(weight_ops(*pattern), static_cast<int>(instance.stages.size()));
    ms::PatternIlp ilp({instance.stages, fixed_allocation, pattern->period_ms * 1.5},
                       instance.platform);
    ASSERT_TRUE(ilp.set_start(instance.stages, *pattern));
    EXPECT_EQ(mt::violated_rows(ilp.model(), mt::hint_values(ilp.model())),
              std::vector<std::string>{});
    const ms::PatternIlp::Decoded decoded = ilp.decode(mt::hint_values(ilp.model()));
    EXPECT_LE(decoded.pattern.period_ms, pattern->period_ms * (1 + 1e-9));
    EXPECT_EQ(weight_ops(decoded.pattern), static_cast<int>(instance.stages.size()));
    const auto violations =
        mplan::validate(mt::plan_of(decoded.stages, instance.platform, decoded.pattern));
    EXPECT_TRUE(violations.empty()) << mt::describe(violations);
  }
}

TEST(PatternIlp, SplitPatternsAreFeasiblePointsOfTheProgram) {
  expect_split_patterns_are_feasible_points(instances(12, 17, 5e7, true), true);
}

TEST(PatternIlp, FreeAllocationAcceptsSplitPatterns) {
  expect_split_patterns_are_feasible_points(instances(10, 23, 5e7, true), false);
}

// The solver's patterns of split stages: W after its B, memory as evaluate_memory counts it (the
// solver's result is checked against it), no slower than the heuristic's.
TEST(IlpSchedule, SchedulesSplitBackwards) {
  if (!have_backend()) GTEST_SKIP() << "no MILP backend built";
  for (const Instance& instance : instances(6, 19, 5e7, true)) {
    const auto heuristic = heuristic_one_periodic(instance.stages, instance.platform);
    const ms::IlpScheduleResult result = ilp_from(instance, heuristic);
    ASSERT_TRUE(result.pattern) << msv::to_string(result.solve.status) << " "
                                << result.solve.message;
    EXPECT_TRUE(result.warm_started);
    EXPECT_EQ(weight_ops(*result.pattern), static_cast<int>(instance.stages.size()));
    const auto violations =
        mplan::validate(mt::plan_of(instance.stages, instance.platform, *result.pattern));
    EXPECT_TRUE(violations.empty()) << mt::describe(violations);
    EXPECT_TRUE(ms::fits_memory(instance.stages, *result.pattern, instance.platform));
    EXPECT_LE(result.pattern->period_ms, heuristic->period_ms * (1 + 1e-6));
  }
}
