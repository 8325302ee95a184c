// Properties of the planner on random chains: every feasible plan of every algorithm is valid,
// runs at its planned period in simulation and fits in memory; MadPipe-DP's allocations are
// well formed.

#include "core/chain.hpp"
#include "core/profile.hpp"
#include "partition/allocation.hpp"
#include "partition/madpipe_dp.hpp"
#include "partition/planner.hpp"
#include "plan/plan.hpp"
#include "plan/simulate.hpp"
#include "plan/validate.hpp"
#include "schedule/memory.hpp"
#include "schedule/stage.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace mp = madpipe::partition;
namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;
namespace mt = madpipe::testing;

namespace {

mp::Discretization small_discretization() {
  mp::Discretization d;
  d.time_steps = 21;
  d.delay_steps = 11;
  d.memory_steps = 6;
  d.iterations = 6;
  d.extra_targets = 2;
  return d;
}

// 12e6 B/ms (12 GB/s): the 1-100 MB activations of random_chain take 0.08-8 ms to send, like
// the 0.5-15 ms of compute per layer; 1.2e6 B/ms makes most links the bottleneck.
madpipe::Platform platform_of(int gpus, std::int64_t memory, double bandwidth = 12e6) {
  return mt::make_platform(gpus, memory, bandwidth, 3);
}

// Memory of the whole model on one GPU with one micro-batch in flight.
std::int64_t whole_model_bytes(const madpipe::Profile& profile) {
  const madpipe::ChainCosts costs(profile);
  const int last = costs.num_layers() - 1;
  return 3 * costs.weight_bytes(0, last) + costs.stored_bytes(0, last);
}

struct RandomCase {
  madpipe::Profile profile;
  int gpus = 0;
  double bandwidth = 12e6;
};

std::vector<RandomCase> random_cases(int count, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<RandomCase> cases;
  for (int i = 0; i < count; ++i) {
    RandomCase c;
    c.profile = mt::random_chain(rng, 4 + static_cast<int>(rng() % 9));
    c.gpus = 2 + static_cast<int>(rng() % 3);
    c.bandwidth = i % 3 == 2 ? 1.2e6 : 12e6;
    cases.push_back(c);
  }
  return cases;
}

// Checks an allocation's shape: boundaries ascending from 0 inside the chain, one GPU per stage
// in range; returns the number of stages on each GPU.
std::map<int, int> check_allocation(const mp::Allocation& allocation, int layers, int gpus) {
  std::map<int, int> stages_on;
  EXPECT_FALSE(allocation.first_layers.empty());
  if (allocation.first_layers.empty()) return stages_on;
  EXPECT_EQ(allocation.first_layers.front(), 0);
  for (std::size_t s = 0; s + 1 < allocation.first_layers.size(); ++s)
    EXPECT_LT(allocation.first_layers[s], allocation.first_layers[s + 1]);
  EXPECT_LT(allocation.first_layers.back(), layers);
  EXPECT_EQ(allocation.gpus.size(), allocation.first_layers.size());
  for (int g : allocation.gpus) {
    EXPECT_GE(g, 0);
    EXPECT_LT(g, gpus);
    ++stages_on[g];
  }
  return stages_on;
}

}  // namespace

TEST(PlannerProperties, FeasiblePlansAreValidRunAtTheirPeriodAndFit) {
  const std::vector<RandomCase> cases = random_cases(30, 20240601);
  std::map<std::string, int> feasible, infeasible;
  int madpipe_strictly_better = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const RandomCase& c = cases[i];
    const std::int64_t whole = whole_model_bytes(c.profile);
    for (double fraction : {0.12, 0.25, 0.45, 0.8, 1.5}) {
      const madpipe::Platform platform = platform_of(
          c.gpus, static_cast<std::int64_t>(fraction * static_cast<double>(whole)), c.bandwidth);
      const double bound = mp::lower_bound_period_ms(c.profile, platform);
      std::map<mp::Algorithm, double> period;
      for (mp::Algorithm algorithm : mp::all_algorithms()) {
        if (algorithm == mp::Algorithm::Ilp) continue;  // full_ilp_test.cpp
        const std::string name = mp::to_string(algorithm);
        SCOPED_TRACE("case " + std::to_string(i) + " (" + std::to_string(c.profile.layers.size()) +
                     " layers, " + std::to_string(c.gpus) + " gpus) memory x" +
                     std::to_string(fraction) + " " + name);
        mp::PlannerOptions options;
        options.algorithm = algorithm;
        options.discretization = small_discretization();
        options.refine_evaluations = 40;
        options.milp.time_limit_s = 0.5;  // MadPipe's ILP scheduler: a short budget per plan
        const mp::PlanResult result = mp::make_plan(c.profile, platform, options);
        if (!result.feasible) {
          ++infeasible[name];
          EXPECT_FALSE(result.reason.empty());
          continue;
        }
        ++feasible[name];
        const mplan::Plan& plan = result.plan;
        const auto violations = mplan::validate(plan, c.profile);
        EXPECT_TRUE(violations.empty()) << mt::describe(violations);
        EXPECT_GE(plan.predicted.period_ms, bound * (1 - 1e-9));
        ASSERT_EQ(static_cast<int>(plan.predicted.memory_bytes.size()), c.gpus);

        const mplan::SimResult sim = mplan::simulate(plan);
        EXPECT_NEAR(sim.steady_period_ms, plan.pattern.period_ms, 1e-6 * plan.pattern.period_ms);
        EXPECT_NEAR(sim.steady_normalized_ms, plan.predicted.period_ms,
                    1e-6 * plan.predicted.period_ms);
        ASSERT_EQ(static_cast<int>(sim.peak_memory_bytes.size()), c.gpus);
        for (int g = 0; g < c.gpus; ++g) {
          EXPECT_LE(sim.peak_memory_bytes[g], platform.memory_bytes) << "gpu " << g;
          EXPECT_LE(sim.peak_memory_bytes[g], plan.predicted.memory_bytes[g]) << "gpu " << g;
        }
        if (algorithm == mp::Algorithm::Contiguous || algorithm == mp::Algorithm::OneFOneB ||
            algorithm == mp::Algorithm::GPipe) {
          EXPECT_TRUE(ms::is_contiguous_allocation(plan.stages));
        }
        period[algorithm] = plan.predicted.period_ms;
      }
      // MadPipe is never worse than the contiguous baseline, and feasible whenever it is.
      if (period.count(mp::Algorithm::Contiguous)) {
        ASSERT_TRUE(period.count(mp::Algorithm::MadPipe)) << "case " << i << " x" << fraction;
        EXPECT_LE(period[mp::Algorithm::MadPipe], period[mp::Algorithm::Contiguous] * (1 + 1e-9))
            << "case " << i << " x" << fraction;
        if (period[mp::Algorithm::MadPipe] < period[mp::Algorithm::Contiguous] * (1 - 1e-3))
          ++madpipe_strictly_better;
      }
    }
  }
  // The memory range goes from mostly infeasible to always feasible.
  for (mp::Algorithm algorithm : mp::all_algorithms()) {
    if (algorithm == mp::Algorithm::Ilp) continue;
    const std::string name = mp::to_string(algorithm);
    EXPECT_GE(feasible[name], 40) << name;
    EXPECT_GE(infeasible[name], 5) << name;
  }
  EXPECT_GE(madpipe_strictly_better, 5);
}

TEST(PlannerProperties, MadPipeDpAllocationsCoverTheChain) {
  const std::vector<RandomCase> cases = random_cases(30, 777);
  const mp::Discretization d = small_discretization();
  int allocations = 0, non_contiguous = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const RandomCase& c = cases[i];
    SCOPED_TRACE("case " + std::to_string(i));
    const madpipe::ChainCosts costs(c.profile);
    const int L = costs.num_layers();
    const std::int64_t whole = whole_model_bytes(c.profile);
    for (double fraction : {0.3, 0.7, 1.5}) {
      const madpipe::Platform platform = platform_of(
          c.gpus, static_cast<std::int64_t>(fraction * static_cast<double>(whole)), c.bandwidth);
      for (bool allow_special : {true, false}) {
        const auto found = mp::madpipe_allocations(costs, platform, d, allow_special);
        for (const mp::Allocation& allocation : found) {
          ++allocations;
          const std::map<int, int> stages_on = check_allocation(allocation, L, c.gpus);
          int shared = 0;
          for (const auto& [gpu, count] : stages_on) shared += count > 1 ? 1 : 0;
          if (allow_special) {
            EXPECT_LE(shared, 1);  // only the special GPU holds several stages
            if (shared == 1) ++non_contiguous;
          } else {
            EXPECT_EQ(shared, 0);
          }
          // The stages cover the chain in order.
          const auto stages = mp::stages_of(costs, allocation);
          ASSERT_FALSE(stages.empty());
          EXPECT_EQ(stages.front().first_layer, 0);
          EXPECT_EQ(stages.back().last_layer, L - 1);
          for (std::size_t s = 0; s + 1 < stages.size(); ++s)
            EXPECT_EQ(stages[s].last_layer + 1, stages[s + 1].first_layer);
          EXPECT_GT(allocation.estimated_period_ms, 0.0);
        }
      }
    }
  }
  EXPECT_GE(allocations, 100);
  EXPECT_GE(non_contiguous, 5);
}

TEST(PlannerProperties, MadPipeDpPeriodAccountsForEveryLoad) {
  // The DP's period covers the load of every normal GPU and every cut link exactly; the special
  // GPU's load is tracked on a grid of step U / (time_steps - 1), rounded once per stage added.
  const std::vector<RandomCase> cases = random_cases(30, 4711);
  const mp::Discretization d = small_discretization();
  int solved = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const RandomCase& c = cases[i];
    SCOPED_TRACE("case " + std::to_string(i));
    const madpipe::ChainCosts costs(c.profile);
    const madpipe::Platform platform =
        platform_of(c.gpus, 2 * whole_model_bytes(c.profile), c.bandwidth);
    const double bound = std::max(costs.total_compute_ms() / c.gpus, costs.max_layer_compute_ms());
    for (bool allow_special : {true, false}) {
      for (double factor : {1.0, 1.5, 3.0}) {
        const mp::DpResult result =
            mp::madpipe_dp(costs, platform, d, allow_special, factor * bound,
                           std::numeric_limits<double>::infinity());
        if (!(result.period_ms < std::numeric_limits<double>::infinity())) continue;
        ++solved;
        const std::map<int, int> stages_on =
            check_allocation(result.allocation, costs.num_layers(), c.gpus);
        const auto stages = mp::stages_of(costs, result.allocation);
        std::map<int, double> load;
        for (const auto& stage : stages) load[stage.gpu] += stage.compute_ms();
        const double step = costs.total_compute_ms() / (d.time_steps - 1);
        for (const auto& [gpu, busy] : load) {
          const int count = stages_on.at(gpu);
          // A special GPU with a single stage looks like a normal one; allow the grid error.
          const double slack = allow_special ? count * step : 0.0;
          EXPECT_GE(result.period_ms, busy - slack - 1e-6 * busy) << "gpu " << gpu;
        }
        for (std::size_t s = 0; s + 1 < stages.size(); ++s) {
          if (stages[s].gpu != stages[s + 1].gpu) {
            EXPECT_GE(result.period_ms,
                      mp::link_ms(costs, stages[s].last_layer, platform) * (1 - 1e-6));
          }
        }
        EXPECT_EQ(result.allocation.estimated_period_ms, result.period_ms);
      }
    }
  }
  EXPECT_GE(solved, 100);
}
