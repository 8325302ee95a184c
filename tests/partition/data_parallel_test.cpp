// Data parallelism over pipelines: the split of G GPUs into D replicas of a P-GPU pipeline, the
// step model (m micro-batches with a flush, then overlapped ring all-reduces) and the plan's
// "replicas" field.

#include "partition/data_parallel.hpp"

#include "core/chain.hpp"
#include "core/error.hpp"
#include "core/platform.hpp"
#include "core/profile.hpp"
#include "partition/planner.hpp"
#include "plan/plan.hpp"
#include "plan/validate.hpp"
#include "schedule/one_f_one_b.hpp"
#include "schedule/stage.hpp"
#include "support/test_support.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace mp = madpipe::partition;
namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;
namespace mt = madpipe::testing;

namespace {

// Four layers of F 1 ms and B 2 ms with `weight_bytes` each and no activations to send.
madpipe::Profile four_layers(std::int64_t weight_bytes) {
  return mt::make_chain({1, 1, 1, 1}, {2, 2, 2, 2},
                        {weight_bytes, weight_bytes, weight_bytes, weight_bytes});
}

mp::DataParallelOptions options_for(int global_batch) {
  mp::DataParallelOptions options;
  options.global_batch = global_batch;
  options.all_reduce_latency_ms = 0;
  options.planner.scheduler = mp::Scheduler::Heuristic;
  return options;
}

const mp::DataParallelChoice& choice_with(const mp::DataParallelResult& result, int replicas) {
  for (const mp::DataParallelChoice& choice : result.choices)
    if (choice.replicas == replicas) return choice;
  throw std::runtime_error("no choice with D = " + std::to_string(replicas));
}

madpipe::Platform nodes(int gpus, int per_node) {
  madpipe::Platform platform = mt::make_platform(gpus, mt::kHugeMemory, 100, 3);
  platform.gpus_per_node = per_node;
  platform.inter_node_bandwidth_bytes_per_ms = 10;
  return platform;
}

}  // namespace

TEST(RingAllReduce, IsTwiceTheShareOfEachRankPlusOneLatencyPerMessage) {
  // 2 (D - 1) / D * bytes / bandwidth + 2 (D - 1) * latency, D = 4: 1.5 * 100 + 6 * 0.5.
  EXPECT_DOUBLE_EQ(mp::ring_all_reduce_ms(1000, 4, 10, 0.5), 153.0);
  EXPECT_DOUBLE_EQ(mp::ring_all_reduce_ms(1000, 2, 10, 0), 100.0);
  EXPECT_DOUBLE_EQ(mp::ring_all_reduce_ms(1000, 1, 10, 0.5), 0.0);
}

TEST(AllReduceBandwidth, IsInterNodeWhenTheReplicasOfAPositionSpanNodes) {
  // 8 GPUs in nodes of 4. P = 4: position 0 on ranks 0 and 4, two nodes.
  EXPECT_DOUBLE_EQ(mp::all_reduce_bandwidth(nodes(8, 4), 4, 0), 10);
  // P = 2: ranks 0, 2, 4, 6, still two nodes.
  EXPECT_DOUBLE_EQ(mp::all_reduce_bandwidth(nodes(8, 4), 2, 1), 10);
  // 4 GPUs in one node of 4: every replica in it.
  EXPECT_DOUBLE_EQ(mp::all_reduce_bandwidth(nodes(4, 4), 2, 1), 100);
  EXPECT_DOUBLE_EQ(mp::all_reduce_bandwidth(nodes(4, 0), 1, 0), 100);
}

TEST(ReplicaPlatform, FollowsTheRankLayout) {
  bool aligned = false;
  // A 4-GPU pipeline inside a node of 8: one node.
  madpipe::Platform inside = mp::replica_platform(nodes(16, 8), 4, &aligned);
  EXPECT_TRUE(aligned);
  EXPECT_EQ(inside.gpus, 4);
  EXPECT_EQ(madpipe::num_nodes(inside), 1);
  EXPECT_DOUBLE_EQ(inside.bandwidth_bytes_per_ms, 100);
  // A 16-GPU pipeline on two whole nodes of 8.
  madpipe::Platform whole = mp::replica_platform(nodes(32, 8), 16, &aligned);
  EXPECT_TRUE(aligned);
  EXPECT_EQ(whole.gpus, 16);
  EXPECT_EQ(whole.gpus_per_node, 8);
  EXPECT_DOUBLE_EQ(madpipe::inter_node_bandwidth(whole), 10);
  // 12-GPU pipelines on nodes of 8 straddle them differently: every link at the slowest.
  madpipe::Platform straddling = mp::replica_platform(nodes(24, 8), 12, &aligned);
  EXPECT_FALSE(aligned);
  EXPECT_EQ(straddling.gpus, 12);
  EXPECT_TRUE(madpipe::has_uniform_links(straddling));
  EXPECT_DOUBLE_EQ(straddling.bandwidth_bytes_per_ms, 10);
}

// Two stages of F 1 ms, B 2 ms in 1F1B, 4 micro-batches: the run takes (m + P - 1) * 3 = 15 ms,
// stage 1's last backward ends at 13 ms and stage 0's at 15 ms. Over 2 replicas at 1000 B/ms,
// stage 0's 1000 bytes all-reduce in 1 ms, stage 1's 5000 bytes in 5 ms: GPU 1 ends at 18 ms, 3 ms
// after the flush.
TEST(EstimateStep, OverlapsEachStagesAllReduceWithTheRestOfTheFlush) {
  const madpipe::Profile profile = mt::make_chain({1, 1}, {2, 2}, {1000, 5000});
  const madpipe::Platform all = mt::make_platform(4, mt::kHugeMemory, 1000, 3);
  mp::DataParallelChoice choice;
  choice.replicas = 2;
  choice.pipeline_gpus = 2;
  choice.micro_batches = 4;
  choice.plan.platform = mp::replica_platform(all, 2);
  choice.plan.stages = ms::make_stages(madpipe::ChainCosts(profile), {0, 1}, {0, 1});
  choice.plan.pattern = ms::one_f_one_b(choice.plan.stages, choice.plan.platform);
  mplan::fill_predicted(choice.plan, 3);
  mp::estimate_step(choice, all, 8, 0);
  EXPECT_DOUBLE_EQ(choice.period_ms, 3);
  EXPECT_DOUBLE_EQ(choice.pipeline_ms, 15);
  EXPECT_DOUBLE_EQ(choice.fill_drain_ms, 3);
  EXPECT_DOUBLE_EQ(choice.bubble(), 0.2);
  EXPECT_DOUBLE_EQ(choice.all_reduce_ms, 5);
  EXPECT_DOUBLE_EQ(choice.all_reduce_exposed_ms, 3);
  EXPECT_DOUBLE_EQ(choice.step_ms, 18);
  EXPECT_DOUBLE_EQ(choice.samples_per_s, 8 * 1000.0 / 18);
  // With a latency per message, each all-reduce sends 2 (D - 1) = 2 more: 3 + 2 * 0.25.
  mp::estimate_step(choice, all, 8, 0.25);
  EXPECT_DOUBLE_EQ(choice.all_reduce_exposed_ms, 3.5);
}

TEST(EstimateStep, OneStageOnAGpuOverlapsNothing) {
  // P = 1: the stage's last backward ends the flush; its all-reduce is all exposed.
  const madpipe::Profile profile = mt::make_chain({1}, {2}, {6000});
  const madpipe::Platform all = mt::make_platform(3, mt::kHugeMemory, 1000, 3);
  mp::DataParallelChoice choice;
  choice.replicas = 3;
  choice.pipeline_gpus = 1;
  choice.micro_batches = 5;
  choice.plan.platform = mp::replica_platform(all, 1);
  choice.plan.stages = ms::make_stages(madpipe::ChainCosts(profile), {0}, {0});
  choice.plan.pattern = ms::one_f_one_b(choice.plan.stages, choice.plan.platform);
  mplan::fill_predicted(choice.plan, 3);
  mp::estimate_step(choice, all, 15, 0);
  EXPECT_DOUBLE_EQ(choice.pipeline_ms, 15);
  EXPECT_DOUBLE_EQ(choice.fill_drain_ms, 0);
  EXPECT_DOUBLE_EQ(choice.all_reduce_ms, 4 / 3.0 * 6);  // 2 * 2 / 3 * 6000 B / 1000 B/ms
  EXPECT_DOUBLE_EQ(choice.all_reduce_exposed_ms, choice.all_reduce_ms);
  EXPECT_DOUBLE_EQ(choice.step_ms, 15 + 8);
}

TEST(PlanDataParallel, ComputeBoundWithTinyWeightsChoosesAllReplicas) {
  // No weights: D = 4 replicas of one GPU run 4 micro-batches of 12 ms each with nothing to
  // all-reduce, 48 ms; any pipeline adds fill and drain.
  const madpipe::Profile profile = four_layers(0);
  const mp::DataParallelResult result = mp::plan_data_parallel(
      profile, mt::make_platform(4, mt::kHugeMemory, 1000, 3), options_for(16));
  ASSERT_TRUE(result.feasible());
  const mp::DataParallelChoice& chosen = result.choices.front();
  EXPECT_EQ(chosen.replicas, 4);
  EXPECT_EQ(chosen.pipeline_gpus, 1);
  EXPECT_EQ(chosen.micro_batches, 4);
  EXPECT_DOUBLE_EQ(chosen.step_ms, 48);
  EXPECT_DOUBLE_EQ(chosen.all_reduce_exposed_ms, 0);
  EXPECT_DOUBLE_EQ(chosen.samples_per_s, 16 * 1000.0 / 48);
  EXPECT_GT(choice_with(result, 1).step_ms, 48);
}

TEST(PlanDataParallel, AllReduceBoundChoosesTheLongestPipeline) {
  // 100 kB per layer at 1000 B/ms: D = 4 all-reduces 400 kB in 1.5 * 400 = 600 ms, far more than
  // the 4-GPU pipeline's fill and drain (16 micro-batches of 3 ms, about 57 ms, no all-reduce).
  const madpipe::Profile profile = four_layers(100'000);
  const mp::DataParallelResult result = mp::plan_data_parallel(
      profile, mt::make_platform(4, mt::kHugeMemory, 1000, 3), options_for(16));
  ASSERT_TRUE(result.feasible());
  const mp::DataParallelChoice& chosen = result.choices.front();
  EXPECT_EQ(chosen.replicas, 1);
  EXPECT_EQ(chosen.pipeline_gpus, 4);
  EXPECT_EQ(chosen.micro_batches, 16);
  EXPECT_DOUBLE_EQ(chosen.all_reduce_ms, 0);
  const mp::DataParallelChoice& replicated = choice_with(result, 4);
  EXPECT_DOUBLE_EQ(replicated.pipeline_ms, 48);
  EXPECT_DOUBLE_EQ(replicated.all_reduce_ms, 600);
  EXPECT_DOUBLE_EQ(replicated.step_ms, 648);
  for (std::size_t i = 1; i < result.choices.size(); ++i)
    EXPECT_GE(result.choices[i - 1].samples_per_s, result.choices[i].samples_per_s);
}

TEST(PlanDataParallel, ChosenPlanIsValidAndCarriesItsReplicas) {
  const madpipe::Profile profile =
      mt::make_chain({1, 2, 1, 3, 1, 2}, {2, 3, 2, 4, 2, 3}, {5000, 100, 8000, 100, 3000, 100},
                     {200, 100, 300, 100, 200, 4}, 100);
  madpipe::Platform platform = nodes(8, 4);
  platform.bandwidth_bytes_per_ms = 1000;
  const mp::DataParallelResult result = mp::plan_data_parallel(profile, platform, options_for(32));
  ASSERT_TRUE(result.feasible());
  for (const mp::DataParallelChoice& choice : result.choices) {
    if (!choice.feasible) continue;
    EXPECT_EQ(choice.plan.replicas, choice.replicas);
    EXPECT_EQ(choice.plan.platform.gpus, choice.pipeline_gpus);
    EXPECT_EQ(choice.replicas * choice.pipeline_gpus, 8);
    EXPECT_EQ(choice.replicas * choice.micro_batches, 32);
    EXPECT_DOUBLE_EQ(choice.step_ms, choice.pipeline_ms + choice.all_reduce_exposed_ms);
    EXPECT_GE(choice.fill_drain_ms, 0);
    const std::vector<mplan::Violation> violations = mplan::validate(choice.plan, profile);
    EXPECT_TRUE(violations.empty()) << "D = " << choice.replicas << ": "
                                    << (violations.empty() ? "" : violations.front().problem);
  }
}

TEST(PlanDataParallel, RejectsWithReasons) {
  // Batch 2, global batch 8, 8 GPUs: D = 8 needs 16 samples; P = 8 exceeds the 4 layers.
  madpipe::Profile profile = four_layers(1000);
  profile.batch = 2;
  const mp::DataParallelResult result = mp::plan_data_parallel(
      profile, mt::make_platform(8, mt::kHugeMemory, 1000, 3), options_for(8));
  ASSERT_EQ(result.choices.size(), 4u);  // D = 8, 4, 2, 1
  const mp::DataParallelChoice& eight = choice_with(result, 8);
  EXPECT_FALSE(eight.feasible);
  EXPECT_EQ(eight.micro_batches, 0);
  EXPECT_EQ(eight.reason, "the global batch does not split: 8 is not a multiple of D x batch = 16");
  const mp::DataParallelChoice& one = choice_with(result, 1);
  EXPECT_FALSE(one.feasible);
  EXPECT_EQ(one.micro_batches, 4);
  EXPECT_EQ(one.reason, "P = 8 GPUs exceed the 4 layers");
  EXPECT_EQ(choice_with(result, 4).micro_batches, 1);
  EXPECT_EQ(choice_with(result, 2).micro_batches, 2);
  // Rejected choices come last, feasible ones first.
  EXPECT_TRUE(result.choices[0].feasible);
  EXPECT_TRUE(result.choices[1].feasible);
  EXPECT_FALSE(result.choices[2].feasible);
  EXPECT_FALSE(result.choices[3].feasible);
  // m = 1 < P = 2 is kept, with a warning.
  EXPECT_EQ(choice_with(result, 4).warning, "m = 1 < P = 2: mostly fill and drain");
  EXPECT_EQ(choice_with(result, 2).warning, "m = 2 < P = 4: mostly fill and drain");
}

TEST(PlanDataParallel, RejectsAReplicaThatDoesNotFit) {
  // 3 copies of 4 x 100 MB do not fit in 1 GB on one GPU; on two GPUs they do.
  const madpipe::Profile profile = four_layers(100'000'000);
  const mp::DataParallelResult result =
      mp::plan_data_parallel(profile, mt::make_platform(2, 1'000'000'000, 1e6, 3), options_for(4));
  const mp::DataParallelChoice& alone = choice_with(result, 2);
  EXPECT_FALSE(alone.feasible);
  EXPECT_NE(alone.reason.find("no madpipe plan fits"), std::string::npos) << alone.reason;
  ASSERT_TRUE(result.feasible());
  EXPECT_EQ(result.choices.front().replicas, 1);
}

TEST(PlanDataParallel, GPipeRunsTheReplicasMicroBatchesInOneStep) {
  mp::DataParallelOptions options = options_for(16);
  options.planner.algorithm = mp::Algorithm::GPipe;
  const mp::DataParallelResult result = mp::plan_data_parallel(
      four_layers(1000), mt::make_platform(4, mt::kHugeMemory, 1000, 3), options);
  const mp::DataParallelChoice& two = choice_with(result, 2);
  ASSERT_TRUE(two.feasible);
  EXPECT_EQ(two.plan.algorithm, "gpipe");
  EXPECT_EQ(two.plan.pattern.k, two.micro_batches);
}

TEST(PlanDataParallel, ReportsProgressPerChoiceAndChecksItsInputs) {
  mp::DataParallelOptions options = options_for(12);
  std::vector<std::string> lines;
  options.planner.progress = [&](const std::string& line) { lines.push_back(line); };
  const madpipe::Profile profile = four_layers(1000);
  const madpipe::Platform platform = mt::make_platform(6, mt::kHugeMemory, 1000, 3);
  mp::plan_data_parallel(profile, platform, options);
  ASSERT_EQ(lines.size(), 4u);  // D = 6, 3, 2, 1
  EXPECT_EQ(lines.front().rfind("[1/4] D=6 x P=1, m=2: ", 0), 0u) << lines.front();
  EXPECT_EQ(lines.back(), "[4/4] D=1 x P=6, m=12: rejected: P = 6 GPUs exceed the 4 layers");

  madpipe::Profile batch_of_two = profile;
  batch_of_two.batch = 2;
  EXPECT_THROW(mp::plan_data_parallel(batch_of_two, platform, options_for(7)), madpipe::Error);
  EXPECT_THROW(mp::plan_data_parallel(profile, platform, options_for(0)), madpipe::Error);
}

TEST(PlanReplicas, RoundTripsAndDefaultsToOne) {
  const madpipe::Profile profile = four_layers(1000);
  mp::PlannerOptions planner;
  planner.scheduler = mp::Scheduler::Heuristic;
  const mp::PlanResult planned =
      mp::make_plan(profile, mt::make_platform(2, mt::kHugeMemory, 1000, 3), planner);
  ASSERT_TRUE(planned.feasible);
  nlohmann::json j = mplan::plan_to_json(planned.plan);
  EXPECT_FALSE(j.contains("replicas"));  // one pipeline: the form of older plans
  EXPECT_EQ(mplan::plan_from_json(j).replicas, 1);

  mplan::Plan replicated = planned.plan;
  replicated.replicas = 16;
  j = mplan::plan_to_json(replicated);
  EXPECT_EQ(j.at("replicas"), 16);
  EXPECT_EQ(mplan::plan_from_json(j).replicas, 16);

  j["replicas"] = 0;
  try {
    mplan::plan_from_json(j, "plan.json");
    FAIL() << "replicas = 0 accepted";
  } catch (const madpipe::Error& e) {
    EXPECT_STREQ(e.what(), "plan.json: /replicas: must be an integer >= 1, got 0");
  }
  j["replicas"] = 2'000'000'000;
  EXPECT_THROW(mplan::plan_from_json(j), madpipe::Error);
  j["replicas"] = "two";
  EXPECT_THROW(mplan::plan_from_json(j), madpipe::Error);
}
