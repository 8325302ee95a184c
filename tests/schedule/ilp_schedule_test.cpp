// The pattern ILP on a fixed partition (thesis ch. 7.2): known patterns are feasible points of the
// program, and what the solver returns is a valid pattern no slower than the heuristics'.

#include "schedule/ilp_schedule.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "schedule/memory.hpp"
#include "schedule/pattern_ilp.hpp"
#include "schedule/search.hpp"
#include "schedule/validate.hpp"
#include "solver/solve.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

namespace ms = madpipe::schedule;
namespace mt = madpipe::testing;
namespace msv = madpipe::solver;

namespace {

bool have_backend() { return !msv::built_backends().empty(); }

// Names of the rows and bounds `values` violates (tolerance relative to the row's scale).
std::vector<std::string> violated(const msv::Model& model, const std::vector<double>& values) {
  std::vector<std::string> out;
  for (int v = 0; v < model.num_vars(); ++v) {
    const double x = values[static_cast<std::size_t>(v)];
    if (x < model.var_lb(v) - 1e-6 || x > model.var_ub(v) + 1e-6)
      out.push_back("bound of " + model.var_name(v));
    if (model.var_integer(v) && std::abs(x - std::round(x)) > 1e-9)
      out.push_back("integrality of " + model.var_name(v));
  }
  for (int r = 0; r < model.num_rows(); ++r) {
    double sum = 0, scale = 1;
    for (const msv::Term& t : model.row_terms(r)) {
      sum += t.coeff * values[static_cast<std::size_t>(t.var)];
      scale = std::max(scale, std::abs(t.coeff * values[static_cast<std::size_t>(t.var)]));
    }
    if (sum < model.row_lb(r) - 1e-7 * scale || sum > model.row_ub(r) + 1e-7 * scale)
      out.push_back(model.row_name(r));
  }
  return out;
}

std::vector<double> hints_of(const msv::Model& model) {
  std::vector<double> values(static_cast<std::size_t>(model.num_vars()), 0.0);
  for (const auto& [var, value] : model.hints()) values[static_cast<std::size_t>(var.index)] = value;
  return values;
}

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
// more than what the heuristic's pattern needs (so that memory binds).
std::vector<Instance> instances(int count, unsigned seed) {
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
    instance.platform = mt::huge_memory_platform(gpus);
    auto pattern = heuristic_one_periodic(instance.stages, instance.platform);
    if (!pattern) continue;
    const auto totals = ms::totals(ms::evaluate_memory(instance.stages, *pattern, instance.platform));
    instance.platform.memory_bytes = *std::max_element(totals.begin(), totals.end()) * 21 / 20;
    out.push_back(instance);
  }
  return out;
}

}  // namespace

TEST(PatternIlp, KnownPatternsAreFeasiblePointsOfTheProgram) {
  for (const Instance& instance : instances(12, 7)) {
    const auto pattern = heuristic_one_periodic(instance.stages, instance.platform);
    ASSERT_TRUE(pattern);
    ms::PatternIlp::Spec spec{instance.stages, true, pattern->period_ms * 1.5};
    ms::PatternIlp ilp(spec, instance.platform);
    ASSERT_TRUE(ilp.set_start(instance.stages, *pattern));
    EXPECT_EQ(violated(ilp.model(), hints_of(ilp.model())), std::vector<std::string>{});
    // The same pattern read back from its own variables has the same period.
    const ms::PatternIlp::Decoded decoded = ilp.decode(hints_of(ilp.model()));
    EXPECT_LE(decoded.pattern.period_ms, pattern->period_ms * (1 + 1e-9));
    EXPECT_TRUE(ms::validate(mt::plan_of(decoded.stages, instance.platform, decoded.pattern)).empty());
  }
}

TEST(PatternIlp, FreeAllocationAcceptsKnownPatternsToo) {
  for (const Instance& instance : instances(8, 11)) {
    const auto pattern = heuristic_one_periodic(instance.stages, instance.platform);
    ASSERT_TRUE(pattern);
    ms::PatternIlp::Spec spec{instance.stages, false, pattern->period_ms * 1.5};
    ms::PatternIlp ilp(spec, instance.platform);
    ASSERT_TRUE(ilp.set_start(instance.stages, *pattern));
    EXPECT_EQ(violated(ilp.model(), hints_of(ilp.model())), std::vector<std::string>{});
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
    ms::IlpScheduleOptions options;
    options.backend = msv::built_backends().front();
    options.warm_start = heuristic;
    const ms::IlpScheduleResult result = ms::ilp_schedule(instance.stages, instance.platform, options);
    ASSERT_TRUE(result.pattern) << msv::to_string(result.solve.status) << " " << result.solve.message;
    EXPECT_TRUE(result.warm_started);
    const auto violations =
        ms::validate(mt::plan_of(instance.stages, instance.platform, *result.pattern), instance.profile);
    EXPECT_TRUE(violations.empty()) << violations.front().field << ": " << violations.front().problem;
    EXPECT_EQ(result.pattern->k, 1);
    EXPECT_LE(result.pattern->period_ms, heuristic->period_ms * (1 + 1e-6));
    EXPECT_GE(result.pattern->period_ms, ms::busiest_resource_ms(instance.stages, instance.platform) * (1 - 1e-6));
    if (result.pattern->period_ms < heuristic->period_ms * (1 - 1e-6)) ++improved;
  }
  RecordProperty("improved", improved);
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
