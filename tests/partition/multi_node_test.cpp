// Planning on multi-node platforms: the DPs assume the slowest link, the schedules use each
// link's bandwidth, and the planner keeps heavy boundaries inside a node.

#include "core/chain.hpp"
#include "core/error.hpp"
#include "core/platform.hpp"
#include "core/profile.hpp"
#include "partition/allocation.hpp"
#include "partition/planner.hpp"
#include "partition/refine.hpp"
#include "plan/plan.hpp"
#include "plan/simulate.hpp"
#include "plan/validate.hpp"
#include "schedule/search.hpp"
#include "solver/solve.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace mp = madpipe::partition;
namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;
namespace mt = madpipe::testing;

namespace {

constexpr std::int64_t kGiB = std::int64_t{1} << 30;

// Four layers of F 1 ms, B 2 ms. The boundary between layers 1 and 2 carries 1 MB each way:
// 2 ms per micro-batch inside a node (1 GB/s), 20 ms between nodes (0.1 GB/s). The other
// boundaries carry 10 kB (0.2 ms between nodes).
madpipe::Profile heavy_middle_chain() {
  return mt::make_chain({1, 1, 1, 1}, {2, 2, 2, 2}, {10, 10, 10, 10},
                        {10'000, 1'000'000, 10'000, 4}, 10'000);
}

// Four GPUs in two nodes of two.
madpipe::Platform two_nodes_of_two() {
  madpipe::Platform platform = mt::make_platform(4, mt::kHugeMemory, 1e6, 3);
  platform.gpus_per_node = 2;
  platform.inter_node_bandwidth_bytes_per_ms = 1e5;
  return platform;
}

// Eight GPUs of 16 GiB in two nodes of four: 100 GB/s inside a node, 12 GB/s between nodes.
madpipe::Platform two_nodes_of_four() {
  madpipe::Platform platform = mt::make_platform(8, 16 * kGiB, 100e6, 3);
  platform.gpus_per_node = 4;
  platform.inter_node_bandwidth_bytes_per_ms = 12e6;
  return platform;
}

// The platform with every link as slow as the inter-node one.
madpipe::Platform all_slow(const madpipe::Platform& platform) {
  return madpipe::with_uniform_links(platform, madpipe::inter_node_bandwidth(platform));
}

int gpu_of_layer(const mplan::Plan& plan, int layer) {
  for (const ms::Stage& stage : plan.stages)
    if (stage.first_layer <= layer && layer <= stage.last_layer) return stage.gpu;
  return -1;
}

std::string plan_text(const mplan::Plan& plan) {
  std::ostringstream out;
  mplan::write_plan(plan, out);
  return out.str();
}

mp::PlannerOptions heuristic_options(mp::Algorithm algorithm = mp::Algorithm::MadPipe) {
  mp::PlannerOptions options;
  options.algorithm = algorithm;
  options.scheduler = mp::Scheduler::Heuristic;
  return options;
}

// Valid, and the simulator measures the predicted period.
void expect_sound(const mplan::Plan& plan, const madpipe::Profile& profile) {
  const auto violations = mplan::validate(plan, profile);
  EXPECT_TRUE(violations.empty()) << mt::describe(violations);
  const mplan::SimResult sim = mplan::simulate(plan);
  EXPECT_NEAR(sim.steady_normalized_ms, plan.predicted.period_ms, 1e-6 * plan.predicted.period_ms);
}

}  // namespace

TEST(MultiNode, LowerBoundUsesTheFastestLink) {
  const madpipe::Profile profile = heavy_middle_chain();
  // A cut at the heavy boundary costs 2 ms on a fast link: the bound is the busiest layer, 3 ms.
  EXPECT_DOUBLE_EQ(mp::lower_bound_period_ms(profile, two_nodes_of_two()), 3.0);
  // With only slow links the heavy boundary costs 20 ms > U_1 + U_2 = 6 ms.
  EXPECT_DOUBLE_EQ(mp::lower_bound_period_ms(profile, all_slow(two_nodes_of_two())), 6.0);
}

TEST(MultiNode, DynamicProgramsTimeCutsOverTheSlowestLink) {
  const madpipe::ChainCosts costs(heavy_middle_chain());
  EXPECT_DOUBLE_EQ(mp::link_ms(costs, 1, two_nodes_of_two()), 20.0);
  EXPECT_DOUBLE_EQ(mp::fastest_link_ms(costs, 1, two_nodes_of_two()), 2.0);
}

TEST(MultiNode, PlaceOnNodesKeepsTheHeavyBoundaryInsideANode) {
  const madpipe::ChainCosts costs(heavy_middle_chain());
  mp::Allocation one_per_gpu;
  one_per_gpu.first_layers = {0, 1, 2, 3};
  one_per_gpu.gpus = {0, 1, 2, 3};  // the heavy boundary links GPU 1 (node 0) and GPU 2 (node 1)
  const madpipe::Platform platform = two_nodes_of_two();
  const mp::Allocation placed = mp::place_on_nodes(costs, platform, one_per_gpu);
  EXPECT_EQ(placed.first_layers, one_per_gpu.first_layers);
  ASSERT_EQ(placed.gpus.size(), 4u);
  EXPECT_EQ(std::set<int>(placed.gpus.begin(), placed.gpus.end()).size(), 4u);
  EXPECT_EQ(madpipe::node_of(platform, placed.gpus[1]), madpipe::node_of(platform, placed.gpus[2]));
  // Uniform links: nothing to gain, the allocation stays as it is.
  EXPECT_EQ(mp::place_on_nodes(costs, all_slow(platform), one_per_gpu).gpus, one_per_gpu.gpus);
  // Already inside a node: unchanged.
  mp::Allocation good = one_per_gpu;
  good.gpus = {2, 0, 1, 3};
  EXPECT_EQ(mp::place_on_nodes(costs, platform, good).gpus, good.gpus);
}

// With slow links everywhere the heavy boundary must stay on one GPU (layers 1 and 2 together,
// period 6). With fast links inside each node, the planner cuts it inside a node and reaches the
// lower bound of 3 ms.
TEST(MultiNode, PlannerKeepsAHeavyBoundaryInsideANode) {
  const madpipe::Profile profile = heavy_middle_chain();
  const madpipe::Platform platform = two_nodes_of_two();
  const mp::PlanResult slow = mp::make_plan(profile, all_slow(platform), heuristic_options());
  ASSERT_TRUE(slow.feasible) << slow.reason;
  EXPECT_NEAR(slow.plan.predicted.period_ms, 6.0, 1e-6);

  const mp::PlanResult result = mp::make_plan(profile, platform, heuristic_options());
  ASSERT_TRUE(result.feasible) << result.reason;
  const mplan::Plan& plan = result.plan;
  EXPECT_EQ(plan.platform, platform);
  expect_sound(plan, profile);
  EXPECT_NEAR(plan.predicted.period_ms, 3.0, 1e-6);
  EXPECT_LT(plan.predicted.period_ms, slow.plan.predicted.period_ms * 0.9);
  const int g1 = gpu_of_layer(plan, 1), g2 = gpu_of_layer(plan, 2);
  EXPECT_NE(g1, g2);
  EXPECT_EQ(madpipe::node_of(platform, g1), madpipe::node_of(platform, g2));
}

// The local search compares allocations with the real links: from the heavy boundary across the
// nodes (period 20, the inter-node link's load), exchanging GPUs of two nodes brings it inside one.
TEST(MultiNode, RefineMovesTheHeavyBoundaryInsideANode) {
  const madpipe::Profile profile = heavy_middle_chain();
  const madpipe::ChainCosts costs(profile);
  const madpipe::Platform platform = two_nodes_of_two();
  mp::Allocation start;
  start.first_layers = {0, 1, 2, 3};
  start.gpus = {0, 1, 2, 3};
  const auto scheduled = ms::schedule_under_memory(mp::stages_of(costs, start), platform);
  ASSERT_TRUE(scheduled.has_value());
  EXPECT_NEAR(scheduled->pattern.normalized_period_ms(), 20.0, 1e-6);
  const mp::ScheduledAllocation refined =
      mp::refine_allocation(costs, platform, {start, *scheduled}, mp::RefineOptions{}, {});
  EXPECT_NEAR(refined.scheduled.pattern.normalized_period_ms(), 3.0, 1e-6);
  const auto& gpus = refined.allocation.gpus;
  ASSERT_EQ(gpus.size(), 4u);
  EXPECT_EQ(madpipe::node_of(platform, gpus[1]), madpipe::node_of(platform, gpus[2]));
}

TEST(MultiNode, EveryAlgorithmEmitsValidPlansOnGpt2) {
  const madpipe::Profile profile = madpipe::read_profile(mt::shipped_profile_path("gpt2_small"));
  madpipe::Platform platform = two_nodes_of_four();
  platform.memory_bytes = 40 * kGiB;  // GPipe keeps 8 micro-batches in flight
  const double bound = mp::lower_bound_period_ms(profile, platform);
  for (mp::Algorithm algorithm : mp::all_algorithms()) {
    if (algorithm == mp::Algorithm::Ilp) continue;  // below, on a small chain
    SCOPED_TRACE(mp::to_string(algorithm));
    const mp::PlanResult result = mp::make_plan(profile, platform, heuristic_options(algorithm));
    if (algorithm == mp::Algorithm::Interleaved || algorithm == mp::Algorithm::ZbV) {
      // Two chunks per GPU: 16 layers for 8 GPUs, gpt2_small has 15.
      EXPECT_FALSE(result.feasible);
      EXPECT_NE(result.reason.find("needs at least 16 layers, the chain has 15"), std::string::npos)
          << result.reason;
      continue;
    }
    ASSERT_TRUE(result.feasible) << result.reason;
    EXPECT_EQ(result.plan.platform, platform);
    expect_sound(result.plan, profile);
    EXPECT_GE(result.plan.predicted.period_ms, bound * (1 - 1e-9));
    // Round trip through the plan format keeps the platform.
    EXPECT_EQ(mplan::plan_from_json(nlohmann::json::parse(plan_text(result.plan))).platform,
              platform);
  }
}

// GPT-2's lm_head output (the logits) is large: on 12 GB/s links everywhere, keeping lm_head and
// the loss on one GPU bounds the period; with 100 GB/s inside a node they can be split there.
TEST(MultiNode, MadPipeOnGpt2BeatsTheAllSlowLinksPlan) {
  const madpipe::Profile profile = madpipe::read_profile(mt::shipped_profile_path("gpt2_small"));
  const madpipe::Platform platform = two_nodes_of_four();
  const mp::PlanResult slow = mp::make_plan(profile, all_slow(platform), heuristic_options());
  const mp::PlanResult fast = mp::make_plan(profile, platform, heuristic_options());
  ASSERT_TRUE(slow.feasible && fast.feasible);
  expect_sound(fast.plan, profile);
  EXPECT_LT(fast.plan.predicted.period_ms, slow.plan.predicted.period_ms * 0.9);
}

// A platform whose inter-node bandwidth equals the intra-node one plans exactly as one node.
TEST(MultiNode, EqualBandwidthsPlanAsOneNode) {
  const madpipe::Profile profile = madpipe::read_profile(mt::shipped_profile_path("gpt2_small"));
  madpipe::Platform one_node = mt::make_platform(4, 16 * kGiB, 12e6, 3);
  madpipe::Platform same = one_node;
  same.gpus_per_node = 2;
  same.inter_node_bandwidth_bytes_per_ms = 12e6;
  madpipe::Platform ignored = one_node;  // no nodes: the inter-node bandwidth is not used
  ignored.inter_node_bandwidth_bytes_per_ms = 1e6;
  mp::PlannerOptions options = heuristic_options();
  const mp::PlanResult reference = mp::make_plan(profile, one_node, options);
  ASSERT_TRUE(reference.feasible);
  for (const madpipe::Platform& platform : {same, ignored}) {
    const mp::PlanResult result = mp::make_plan(profile, platform, options);
    ASSERT_TRUE(result.feasible);
    mplan::Plan plan = result.plan;
    plan.platform = one_node;
    EXPECT_EQ(plan_text(plan), plan_text(reference.plan));
  }
}

TEST(MultiNode, InvalidNodeFieldsThrow) {
  const madpipe::Profile profile = heavy_middle_chain();
  madpipe::Platform platform = two_nodes_of_two();
  platform.gpus_per_node = -1;
  try {
    mp::make_plan(profile, platform);
    FAIL() << "expected an error";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.kind(), madpipe::ErrorKind::InvalidInput);
    EXPECT_EQ(e.field(), "gpus_per_node");  // the Platform member (core/platform.hpp)
    EXPECT_EQ(e.problem(), "must be >= 0, got -1");
  }
  platform = two_nodes_of_two();
  platform.inter_node_bandwidth_bytes_per_ms = -1;
  EXPECT_THROW(mp::make_plan(profile, platform), madpipe::Error);
}

TEST(MultiNode, FullIlpPlansAreValid) {
  if (madpipe::solver::built_backends().empty()) GTEST_SKIP() << "no MILP solver built";
  const madpipe::Profile profile = heavy_middle_chain();
  mp::PlannerOptions options;
  options.algorithm = mp::Algorithm::Ilp;
  options.milp.time_limit_s = 20;
  const mp::PlanResult result = mp::make_plan(profile, two_nodes_of_two(), options);
  ASSERT_TRUE(result.feasible) << result.reason;
  expect_sound(result.plan, profile);
  EXPECT_NEAR(result.plan.predicted.period_ms, 3.0, 1e-6);
}

// Random chains on platforms with full and partial nodes: every plan is valid and simulates at
// its predicted period.
TEST(MultiNode, RandomChainsOnRandomNodes) {
  std::mt19937 rng(20240611);
  int planned = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const madpipe::Profile profile = mt::random_chain(rng, 6 + trial % 5);
    madpipe::Platform platform = mt::huge_memory_platform(3 + trial % 6, 5e7);
    platform.gpus_per_node = 1 + trial % 4;
    platform.inter_node_bandwidth_bytes_per_ms = trial % 3 == 0 ? 5e6 : 1e7;
    for (mp::Algorithm algorithm : {mp::Algorithm::MadPipe, mp::Algorithm::Contiguous,
                                    mp::Algorithm::PipeDream, mp::Algorithm::OneFOneB}) {
      SCOPED_TRACE("trial " + std::to_string(trial) + " " + mp::to_string(algorithm));
      const mp::PlanResult result = mp::make_plan(profile, platform, heuristic_options(algorithm));
      ASSERT_TRUE(result.feasible) << result.reason;
      expect_sound(result.plan, profile);
      EXPECT_GE(result.plan.predicted.period_ms,
                mp::lower_bound_period_ms(profile, platform) * (1 - 1e-9));
      ++planned;
    }
    if (trial % 4 != 0 || madpipe::solver::built_backends().empty()) continue;
    // The stage-level ILP schedules with each link's time too.
    mp::PlannerOptions with_ilp;
    with_ilp.scheduler = mp::Scheduler::Ilp;
    with_ilp.milp.time_limit_s = 2;
    const mp::PlanResult result = mp::make_plan(profile, platform, with_ilp);
    ASSERT_TRUE(result.feasible) << result.reason;
    expect_sound(result.plan, profile);
  }
  EXPECT_EQ(planned, 48);
}
