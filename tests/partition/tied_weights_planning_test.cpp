// Tied weights in plans: a GPU holding both layers holds the weight once, GPUs holding one each
// hold a copy and exchange its gradients once per step (in the period), and the planner places
// the head on the embedding's GPU where that is faster.

#include "core/chain.hpp"
#include "core/profile.hpp"
#include "partition/planner.hpp"
#include "partition/tied_placement.hpp"
#include "plan/plan.hpp"
#include "plan/validate.hpp"
#include "schedule/memory.hpp"
#include "schedule/shared_weights.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace mp = madpipe::partition;
namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;
namespace mt = madpipe::testing;

namespace {

// 1000 B/ms between the GPUs, memory to spare, 3 weight copies.
madpipe::Platform platform(int gpus) { return mt::make_platform(gpus, mt::kHugeMemory, 1000, 3); }

std::string problems(const mplan::Plan& plan, const madpipe::Profile& profile) {
  return mt::describe(mplan::validate(plan, profile));
}

}  // namespace

TEST(TiedWeightPlans, ApartEachGpuHoldsACopyAndTheExchangeIsInThePeriod) {
  const madpipe::Profile profile = mt::tied_chain();
  const mplan::Plan plan = mt::chain_plan(profile, {0, 2}, {0, 1}, platform(2), 0);
  EXPECT_EQ(problems(plan, profile), "");
  const std::vector<ms::GpuMemory> memory =
      ms::evaluate_memory(plan.stages, plan.pattern, plan.platform);
  EXPECT_EQ(memory[0].weights, 3 * (1000 + 50));
  EXPECT_EQ(memory[1].weights, 3 * (50 + 700));
  // A ring of two GPUs: 2 (n - 1) / n * 600 bytes at 1000 B/ms, and two message latencies.
  const double exchange = 600.0 / 1000 + 2 * ms::kCollectiveStepLatencyMs;
  EXPECT_DOUBLE_EQ(ms::tied_exchange_ms(plan.stages, plan.platform), exchange);
  EXPECT_DOUBLE_EQ(plan.predicted.tied_exchange_ms, exchange);
  EXPECT_EQ(plan.predicted.micro_batches_per_step, 2);  // default: the number of GPUs
  EXPECT_DOUBLE_EQ(plan.predicted.period_ms,
                   plan.pattern.period_ms / plan.pattern.k + exchange / 2);
  // Written and read back alike; a plan that leaves the exchange out, or a stage that forgets
  // its tied weight, is refused.
  EXPECT_EQ(mplan::plan_from_json(mplan::plan_to_json(plan)).predicted.tied_exchange_ms, exchange);
  mplan::Plan without_exchange = plan;
  without_exchange.predicted.tied_exchange_ms = 0;
  EXPECT_NE(problems(without_exchange, profile).find("/predicted/tied_exchange_ms"),
            std::string::npos);
  mplan::Plan forgotten = plan;
  forgotten.stages[1].shared_weights.clear();
  EXPECT_NE(problems(forgotten, profile).find("/stages/1/shared_weights"), std::string::npos);
  // Without a profile too, a tied weight larger than its stage's weights is refused (it would
  // make a GPU's memory smaller than what it holds).
  mplan::Plan forged = plan;
  forged.stages[1].shared_weights[0].bytes = forged.stages[1].weight_bytes + 1;
  EXPECT_NE(mt::describe(mplan::validate(forged)).find("/stages/1/shared_weights/0/bytes"),
            std::string::npos);
}

TEST(TiedWeightPlans, TogetherTheGpuHoldsTheWeightOnceAndExchangesNothing) {
  const madpipe::Profile profile = mt::tied_chain();
  // Layer 0 and layer 3 on GPU 0, layers 1 and 2 on GPU 1.
  const mplan::Plan plan = mt::chain_plan(profile, {0, 1, 3}, {0, 1, 0}, platform(2), 0);
  EXPECT_EQ(problems(plan, profile), "");
  const std::vector<ms::GpuMemory> memory =
      ms::evaluate_memory(plan.stages, plan.pattern, plan.platform);
  EXPECT_EQ(memory[0].weights, 3 * (1000 + 700 - 600));
  EXPECT_EQ(ms::static_memory(plan.stages, 0, plan.platform).weights, 3 * (1000 + 700 - 600));
  EXPECT_EQ(memory[1].weights, 3 * (50 + 50));
  EXPECT_EQ(plan.predicted.tied_exchange_ms, 0);
  EXPECT_DOUBLE_EQ(plan.predicted.period_ms, plan.pattern.period_ms / plan.pattern.k);
  // One stage holding both: its weight_bytes count the weight once.
  const mplan::Plan one = mt::chain_plan(profile, {0}, {0}, platform(1), 0);
  EXPECT_EQ(one.stages[0].weight_bytes, 1800 - 600);
  EXPECT_EQ(problems(one, profile), "");
}

namespace {

// An embedding (0.2 ms), four blocks and a head (3 ms each) that shares the embedding's 1 MB.
madpipe::Profile embedding_blocks_head() {
  madpipe::Profile profile =
      mt::make_chain({0.1, 1, 1, 1, 1, 1}, {0.1, 2, 2, 2, 2, 2},
                     {1'000'000, 10, 10, 10, 10, 1'000'000}, {10, 10, 10, 10, 10, 4}, 8);
  profile.tied_weights.push_back(madpipe::TiedWeight{{0, 5}, 1'000'000});
  return profile;
}

}  // namespace

TEST(TiedWeightPlans, CoPlacedCandidatesRunTheHeadOnTheEmbeddingsGpu) {
  const madpipe::ChainCosts costs(embedding_blocks_head());
  const std::vector<mp::Allocation> allocations =
      mp::tied_together_allocations(costs, platform(3), mp::Discretization{});
  ASSERT_FALSE(allocations.empty());
  for (const mp::Allocation& allocation : allocations) {
    EXPECT_EQ(allocation.first_layers.back(), 5);  // the head (and loss) as a stage of its own
    EXPECT_EQ(allocation.gpus.back(), allocation.gpus.front());
  }
  // The DP split the blocks knowing that GPU 0 also runs the head: the best candidate gives it
  // one block at most (3.2 + 3 ms against 2 blocks, 6 ms, on each other GPU).
  const mp::Allocation& best = allocations.front();
  ASSERT_EQ(best.first_layers.size(), 4u);
  EXPECT_LE(best.first_layers[1], 2);
  EXPECT_EQ(best.gpus, (std::vector<int>{best.gpus[0], best.gpus[1], best.gpus[2], best.gpus[0]}));
  // Without tied weights: none.
  EXPECT_TRUE(mp::tied_together_allocations(madpipe::ChainCosts(mt::make_chain({1, 1, 1})),
                                            platform(3), mp::Discretization{})
                  .empty());
}

TEST(TiedWeightPlans, TheHeadGoesToTheEmbeddingsGpuWhereTheExchangeWouldCostMore) {
  // Embedding and head share 1 MB; over 10 kB/ms, the exchange would take 100 ms a step.
  const madpipe::Profile profile = embedding_blocks_head();
  const madpipe::Platform slow = mt::make_platform(3, mt::kHugeMemory, 1e4, 3);
  mp::PlannerOptions options;
  options.scheduler = mp::Scheduler::Heuristic;
  const mp::PlanResult result = mp::make_plan(profile, slow, options);
  ASSERT_TRUE(result.feasible) << result.reason;
  EXPECT_EQ(problems(result.plan, profile), "");
  const std::vector<ms::Stage>& stages = result.plan.stages;
  EXPECT_EQ(stages.front().gpu, stages.back().gpu) << "the head's stage is not on GPU of the "
                                                      "embedding's";
  EXPECT_EQ(result.plan.predicted.tied_exchange_ms, 0);
  // 15.2 ms of work on 3 GPUs: near the bound, far from the 33 ms a step's exchange alone
  // would add to each micro-batch if the two were apart.
  EXPECT_LT(result.plan.predicted.period_ms, 7.0);

  // Spread over a million micro-batches the exchange costs nothing: the planner may keep the
  // two apart then, and whichever it keeps, the period counts the exchange.
  options.micro_batches_per_step = 1'000'000;
  const mp::PlanResult spread = mp::make_plan(profile, slow, options);
  ASSERT_TRUE(spread.feasible) << spread.reason;
  EXPECT_EQ(problems(spread.plan, profile), "");
  EXPECT_LE(spread.plan.predicted.period_ms, result.plan.predicted.period_ms * (1 + 1e-9));
}
