// The full ILP of thesis ch. 6 (allocation + 1-periodic pattern): on tiny chains it agrees with an
// exhaustive search over allocations (each scheduled optimally), its plans are valid, and it is
// never worse than MadPipe's best 1-periodic plan, which warm-starts it.

#include "partition/full_ilp.hpp"

#include "core/chain.hpp"
#include "core/error.hpp"
#include "partition/planner.hpp"
#include "plan/simulate.hpp"
#include "plan/validate.hpp"
#include "schedule/ilp_schedule.hpp"
#include "schedule/memory.hpp"
#include "schedule/pattern_ilp.hpp"
#include "schedule/search.hpp"
#include "solver/solve.hpp"
#include "support/planner_support.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace mp = madpipe::partition;
namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;
namespace mt = madpipe::testing;
namespace msv = madpipe::solver;

namespace {

bool have_backend() { return !msv::built_backends().empty(); }

msv::SolveOptions exact() {
  msv::SolveOptions solve;
  solve.time_limit_s = 120;
  solve.relative_gap = 1e-7;
  return solve;
}

// Every way to put `layers` layers on at most `gpus` GPUs, up to renaming the GPUs.
void for_each_allocation(int layers, int gpus,
                         const std::function<void(const std::vector<int>&)>& visit) {
  std::vector<int> gpu(static_cast<std::size_t>(layers), 0);
  std::function<void(int, int)> next = [&](int layer, int used) {
    if (layer == layers) return visit(gpu);
    for (int g = 0; g <= std::min(used, gpus - 1); ++g) {
      gpu[static_cast<std::size_t>(layer)] = g;
      next(layer + 1, std::max(used, g + 1));
    }
  };
  next(0, 0);
}

// Best 1-periodic period over all allocations of one-layer stages, each scheduled by the ILP to
// optimality; nullopt when nothing fits.
std::optional<double> exhaustive_period(const madpipe::ChainCosts& costs,
                                        const madpipe::Platform& platform) {
  std::optional<double> best;
  for_each_allocation(costs.num_layers(), platform.gpus, [&](const std::vector<int>& gpus) {
    std::vector<ms::Stage> stages;
    for (int l = 0; l < costs.num_layers(); ++l)
      stages.push_back(ms::make_stage(costs, l, l, l, gpus[static_cast<std::size_t>(l)]));
    ms::IlpScheduleOptions options;
    options.backend = msv::built_backends().front();
    options.solve = exact();
    const ms::IlpScheduleResult result = ms::ilp_schedule(stages, platform, options);
    ASSERT_NE(result.solve.status, msv::Status::Timeout);
    ASSERT_NE(result.solve.status, msv::Status::Feasible);
    if (result.pattern && (!best || result.pattern->period_ms < *best))
      best = result.pattern->period_ms;
  });
  return best;
}

struct Tiny {
  madpipe::Profile profile;
  madpipe::Platform platform;
};

// Random 3- and 4-layer chains on 2 or 3 GPUs; memory from ample down to about what one layer
// per GPU needs, so that it binds in some. With `split`, every layer splits its backward.
std::vector<Tiny> tiny_instances(bool split = false) {
  std::mt19937 rng(2024);
  std::vector<Tiny> out;
  for (int i = 0; i < 6; ++i) {
    Tiny tiny;
    const int layers = 3 + i % 2;
    tiny.profile = mt::random_chain(rng, layers);
    if (split) tiny.profile = mt::with_split_backward(tiny.profile, 0.4);
    const int gpus = 2 + (i / 2) % 2;
    tiny.platform = mt::huge_memory_platform(gpus);
    const madpipe::ChainCosts costs(tiny.profile);
    const std::int64_t everything =
        3 * costs.weight_bytes(0, layers - 1) + 3 * costs.stored_bytes(0, layers - 1);
    tiny.platform.memory_bytes = i < 2 ? tiny.platform.memory_bytes : everything * (6 - i / 2) / 6;
    out.push_back(tiny);
  }
  return out;
}

// The full ILP's period on each instance equals the best over every allocation of the stage ILP's;
// its plans are valid.
void expect_exhaustive_optimum(const std::vector<Tiny>& instances) {
  int fitting = 0;
  for (const Tiny& tiny : instances) {
    const madpipe::ChainCosts costs(tiny.profile);
    SCOPED_TRACE(std::to_string(costs.num_layers()) + " layers on " +
                 std::to_string(tiny.platform.gpus) + " GPUs");
    const std::optional<double> exhaustive = exhaustive_period(costs, tiny.platform);
    mp::FullIlpOptions options;
    options.backend = msv::built_backends().front();
    options.solve = exact();
    const mp::FullIlpResult ilp = mp::full_ilp(costs, tiny.platform, options);
    ASSERT_TRUE(ilp.solve.status == msv::Status::Optimal ||
                ilp.solve.status == msv::Status::Infeasible)
        << msv::to_string(ilp.solve.status);
    ASSERT_EQ(ilp.plan.has_value(), exhaustive.has_value());
    if (!exhaustive) continue;
    ++fitting;
    EXPECT_NEAR(ilp.plan->pattern.period_ms, *exhaustive, 1e-6 * *exhaustive);
    mplan::Plan plan = mt::plan_of(ilp.plan->stages, tiny.platform, ilp.plan->pattern);
    EXPECT_TRUE(mplan::validate(plan, tiny.profile).empty())
        << mt::describe(mplan::validate(plan, tiny.profile));
    EXPECT_EQ(mt::has_weight_ops(plan), costs.has_split_backward());
  }
  EXPECT_GE(fitting, 3);
}

// The allocation of `stages` with the costs of `costs` (e.g. with split backwards), scheduled by
// the heuristic at k = 1; nullopt when nothing fits.
std::optional<mp::ScheduledStages> rescheduled_one_periodic(const madpipe::ChainCosts& costs,
                                                            const std::vector<ms::Stage>& stages,
                                                            const madpipe::Platform& platform) {
  std::vector<int> first_layers, gpus;
  for (const ms::Stage& stage : stages) {
    first_layers.push_back(stage.first_layer);
    gpus.push_back(stage.gpu);
  }
  mp::ScheduledStages out;
  out.stages = ms::make_stages(costs, first_layers, gpus);
  ms::ScheduleSearchOptions search;
  search.max_k = 1;
  const auto scheduled = ms::schedule_under_memory(out.stages, platform, search);
  if (!scheduled) return std::nullopt;
  out.pattern = scheduled->pattern;
  return out;
}

}  // namespace

TEST(FullIlp, EqualsAnExhaustiveSearchOverAllocationsOnTinyChains) {
  if (!have_backend()) GTEST_SKIP() << "no MILP backend built";
  expect_exhaustive_optimum(tiny_instances());
}

// With split backwards the program has W nodes for every layer, with their memory (kept bytes
// from B to W) counted on the GPU the program gives the layer.
TEST(FullIlp, EqualsAnExhaustiveSearchWithSplitBackwards) {
  if (!have_backend()) GTEST_SKIP() << "no MILP backend built";
  expect_exhaustive_optimum(tiny_instances(true));
}

// Also with split backwards, where both run once with whole backwards and once with the split
// (--split-backward auto) and keep the shorter period.
TEST(FullIlp, PlanIsValidAndNoWorseThanMadPipesOnePeriodicPlan) {
  if (!have_backend()) GTEST_SKIP() << "no MILP backend built";
  std::mt19937 rng(99);
  for (int i = 0; i < 6; ++i) {
    const bool split = i >= 3;
    const madpipe::Profile chain = mt::random_chain(rng, 5);
    const madpipe::Profile profile = split ? mt::with_split_backward(chain, 0.4) : chain;
    SCOPED_TRACE(split ? "split backwards" : "whole backwards");
    madpipe::Platform platform = mt::huge_memory_platform(3);
    const madpipe::ChainCosts costs(profile);
    platform.memory_bytes = 3 * costs.weight_bytes(0, 4) + 2 * costs.stored_bytes(0, 4);
    mp::PlannerOptions options;
    options.algorithm = mp::Algorithm::MadPipe;
    options.max_k = 1;
    const mp::PlanResult madpipe = mp::make_plan(profile, platform, options);
    options.algorithm = mp::Algorithm::Ilp;
    options.milp.time_limit_s = 3;
    const mp::PlanResult ilp = mp::make_plan(profile, platform, options);
    ASSERT_EQ(ilp.feasible, madpipe.feasible);
    if (!ilp.feasible) continue;
    EXPECT_EQ(ilp.plan.algorithm, "ilp");
    EXPECT_EQ(ilp.plan.pattern.k, 1);
    EXPECT_TRUE(mplan::validate(ilp.plan, profile).empty())
        << mt::describe(mplan::validate(ilp.plan, profile));
    ASSERT_TRUE(ilp.plan.solver.has_value());
    EXPECT_FALSE(ilp.plan.solver->backend.empty());
    EXPECT_LE(ilp.plan.predicted.period_ms, madpipe.plan.predicted.period_ms * (1 + 1e-9));
    EXPECT_GE(ilp.plan.predicted.period_ms, ilp.plan.predicted.lower_bound_period_ms * (1 - 1e-9));
    if (split) {
      EXPECT_TRUE(std::any_of(ilp.notes.begin(), ilp.notes.end(), [](const std::string& note) {
        return note.find("split backward (B and W)") != std::string::npos;
      }));
    }
    // The simulator replays the plan at its period, within its predicted memory.
    const mplan::SimResult sim = mplan::simulate(ilp.plan);
    EXPECT_NEAR(sim.steady_period_ms, ilp.plan.pattern.period_ms,
                1e-6 * ilp.plan.pattern.period_ms);
    for (int g = 0; g < platform.gpus; ++g)
      EXPECT_LE(sim.peak_memory_bytes[g], ilp.plan.predicted.memory_bytes[g]) << "gpu " << g;
  }
}

// Also with split backwards: the same allocation with every layer's backward split (its W keeps
// half of what B kept), scheduled by the heuristic; a stage's W becomes its layers' W ops.
TEST(FullIlp, ExpandingStagesToLayersKeepsThePatternValidAndMemoryNoLarger) {
  const madpipe::Profile whole = madpipe::read_profile(mt::shipped_profile_path("resnet50"));
  const madpipe::Platform platform = mt::make_platform(3, 8'000'000'000, 12e6, 3);
  mp::PlannerOptions options;
  options.max_k = 1;
  options.scheduler = mp::Scheduler::Heuristic;
  const mp::PlanResult result = mp::make_plan(whole, platform, options);
  ASSERT_TRUE(result.feasible);
  for (const bool split : {false, true}) {
    SCOPED_TRACE(split ? "split backwards" : "whole backwards");
    const madpipe::Profile profile = split ? mt::with_split_backward(whole, 0.4) : whole;
    const madpipe::ChainCosts costs(profile);
    const std::optional<mp::ScheduledStages> rescheduled =
        rescheduled_one_periodic(costs, result.plan.stages, platform);
    ASSERT_TRUE(rescheduled);
    const mp::ScheduledStages& stages = *rescheduled;
    const mp::ScheduledStages layers = mp::expand_to_layers(costs, stages);
    EXPECT_EQ(static_cast<int>(layers.stages.size()), costs.num_layers());
    const mplan::Plan expanded = mt::plan_of(layers.stages, platform, layers.pattern);
    EXPECT_TRUE(mplan::validate(expanded, profile).empty())
        << mt::describe(mplan::validate(expanded, profile));
    EXPECT_EQ(mt::has_weight_ops(expanded), split);
    EXPECT_NEAR(layers.pattern.period_ms, stages.pattern.period_ms,
                1e-9 * stages.pattern.period_ms);
    const auto before = ms::totals(ms::evaluate_memory(stages.stages, stages.pattern, platform));
    const auto after = ms::totals(ms::evaluate_memory(layers.stages, layers.pattern, platform));
    for (std::size_t g = 0; g < before.size(); ++g) EXPECT_LE(after[g], before[g]);
    // Merging the layers back gives valid plans with no more stages than layers, same period.
    const mp::ScheduledStages merged = mp::merge_stages(costs, platform, layers);
    EXPECT_LT(merged.stages.size(), layers.stages.size());
    const mplan::Plan merged_plan = mt::plan_of(merged.stages, platform, merged.pattern);
    EXPECT_TRUE(mplan::validate(merged_plan, profile).empty())
        << mt::describe(mplan::validate(merged_plan, profile));
    EXPECT_EQ(mt::has_weight_ops(merged_plan), split);
    EXPECT_LE(merged.pattern.period_ms, layers.pattern.period_ms * (1 + 1e-9));
  }
}

TEST(FullIlp, UnknownBackendIsAnErrorNamingTheBuiltOnes) {
  const madpipe::Profile profile = mt::two_layer_profile();
  mp::PlannerOptions options;
  options.algorithm = mp::Algorithm::Ilp;
  options.milp.backend = "cplex";
  try {
    mp::make_plan(profile, mt::huge_memory_platform(2), options);
    FAIL() << "expected an error";
  } catch (const madpipe::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cplex"), std::string::npos) << e.what();
  }
}

TEST(Scheduler, Names) {
  EXPECT_EQ(mp::scheduler_from_string("ILP"), mp::Scheduler::Ilp);
  EXPECT_EQ(mp::scheduler_from_string("heuristic"), mp::Scheduler::Heuristic);
  EXPECT_EQ(mp::scheduler_from_string("auto"), mp::Scheduler::Auto);
  for (mp::Scheduler s : {mp::Scheduler::Auto, mp::Scheduler::Ilp, mp::Scheduler::Heuristic})
    EXPECT_EQ(mp::scheduler_from_string(mp::to_string(s)), s);
  EXPECT_THROW(mp::scheduler_from_string("greedy"), madpipe::Error);
}

TEST(Scheduler, IlpSchedulerNeverLosesToTheHeuristicOne) {
  if (!have_backend()) GTEST_SKIP() << "no MILP backend built";
  for (const std::string name : {"resnet50", "gpt2_small"}) {
    const madpipe::Profile profile = madpipe::read_profile(mt::shipped_profile_path(name));
    for (int gpus : {2, 4}) {
      const madpipe::Platform platform = mt::make_platform(gpus, 8'000'000'000, 12e6, 3);
      mp::PlannerOptions options;
      options.scheduler = mp::Scheduler::Heuristic;
      const mp::PlanResult heuristic = mp::make_plan(profile, platform, options);
      options.scheduler = mp::Scheduler::Ilp;
      options.milp.time_limit_s = 20;
      const mp::PlanResult ilp = mp::make_plan(profile, platform, options);
      ASSERT_TRUE(ilp.feasible || !heuristic.feasible) << name << " " << gpus;
      if (!ilp.feasible) continue;
      EXPECT_TRUE(mplan::validate(ilp.plan, profile).empty())
          << mt::describe(mplan::validate(ilp.plan, profile));
      if (heuristic.feasible) {
        EXPECT_LE(ilp.plan.predicted.period_ms, heuristic.plan.predicted.period_ms * (1 + 1e-9))
            << name << " " << gpus;
      }
    }
  }
}

// MadPipe's 1-periodic plans, expanded to layers, satisfy every row of the full ILP: the warm
// start is a real start. Slow links (transfers about as long as the period) and neighbouring
// layers on one GPU (transfers that do not happen) are where big-M constants are tightest.
// With split backwards too (the plans' allocations rescheduled with every layer split), where
// each layer's kept bytes count on its GPU only.
TEST(FullIlp, MadPipePlansAreFeasiblePointsOfTheProgram) {
  madpipe::Profile whole = madpipe::read_profile(mt::shipped_profile_path("resnet50"));
  whole.layers.resize(12);
  int checked = 0;
  for (const bool split : {false, true}) {
    const madpipe::Profile profile = split ? mt::with_split_backward(whole, 0.4) : whole;
    const madpipe::ChainCosts costs(profile);
    for (double gib : {8.0, 12.0, 24.0}) {
      SCOPED_TRACE(std::to_string(gib) + " GiB, " + (split ? "split" : "whole") + " backwards");
      const madpipe::Platform platform =
          mt::make_platform(4, static_cast<std::int64_t>(gib * (1LL << 30)), 12e6, 3);
      mp::PlannerOptions options;
      options.max_k = 1;
      options.scheduler = mp::Scheduler::Heuristic;
      const mp::PlanResult plan = mp::make_plan(whole, platform, options);
      ASSERT_TRUE(plan.feasible);
      const std::optional<mp::ScheduledStages> stages =
          split ? rescheduled_one_periodic(costs, plan.plan.stages, platform)
                : mp::ScheduledStages{plan.plan.stages, plan.plan.pattern};
      ASSERT_TRUE(stages);
      const mp::ScheduledStages layers = mp::expand_to_layers(costs, *stages);
      ms::PatternIlp ilp({layers.stages, false, stages->pattern.period_ms * (1 + 1e-6)}, platform);
      ASSERT_TRUE(ilp.set_start(layers.stages, layers.pattern));
      EXPECT_EQ(mt::violated_rows(ilp.model(), mt::hint_values(ilp.model())),
                std::vector<std::string>{});
      ++checked;
    }
  }
  EXPECT_EQ(checked, 6);
}
