#include "arena/modulo_memory.hpp"

#include "arena/address_plan.hpp"
#include "arena/tensor_graph.hpp"
#include "core/chain.hpp"
#include "core/error.hpp"
#include "core/profile.hpp"
#include "remat/remat_chain.hpp"
#include "remat/remat_sequence.hpp"
#include "schedule/memory.hpp"
#include "schedule/one_f_one_b.hpp"
#include "schedule/stage.hpp"
#include "solver/solve.hpp"
#include "support/test_support.hpp"

#include <algorithm>

#include <gtest/gtest.h>

namespace madpipe::arena {
namespace {

constexpr int kTurns = 4;

// Valid on the circle, valid when replayed over kTurns turns, between the bounds.
void expect_valid_in_every_period(const AddressPlan& plan, int timesteps) {
  EXPECT_TRUE(overlapping_live_buffers(plan).empty())
      << to_string(plan.method) << ": " << plan.note;
  EXPECT_TRUE(overlapping_live_buffers(unroll_circular_plan(plan, timesteps, kTurns)).empty())
      << to_string(plan.method) << ": " << plan.note;
  EXPECT_GE(plan.arena_bytes, plan.lower_bound_bytes);
  EXPECT_LE(plan.arena_bytes, plan.sum_bytes());
}

AddressIlpOptions ilp_options(double seconds) {
  AddressIlpOptions options;
  options.solve.time_limit_s = seconds;
  options.skip_when_greedy_optimal = false;
  return options;
}

TEST(SteadyStateBuffers, OneFOneBStageKeepsThePlannersMemoryModel) {
  const Profile profile = read_profile(testing::shipped_profile_path("gpt2_small"));
  const remat::RematChain chain = remat::stage_remat_chain(profile, 1, 4);
  const remat::SequenceReplay replay = replay_sequence(chain, store_all_sequence(chain));
  const MicroBatchTensorGraph one = micro_batch_tensor_graph(chain, {});
  for (int in_flight : {1, 2, 3}) {
    const SteadyStateBuffers steady =
        steady_state_buffers(chain, {}, one_f_one_b_stage_pattern(in_flight), 0);
    EXPECT_EQ(steady.periods, in_flight);
    EXPECT_EQ(steady.slot_sets, in_flight);
    EXPECT_EQ(steady.timesteps(), in_flight * static_cast<int>(one.graph.nodes.size()));
    EXPECT_EQ(steady.steps.front(), "recv@s" + std::to_string(in_flight - 1));
    // The newest micro-batch's forward runs while the others hold their activations.
    EXPECT_EQ(live_bytes_lower_bound(steady.buffers),
              (in_flight - 1) * replay.stored_bytes + replay.peak_bytes);
    const int wrapping =
        static_cast<int>(std::count_if(steady.buffers.begin(), steady.buffers.end(), wraps));
    EXPECT_EQ(wrapping > 0, in_flight > 1);
  }
}

TEST(SteadyStateBuffers, PlansAreValidInEveryPeriod) {
  const Profile profile = read_profile(testing::shipped_profile_path("resnet50"));
  const remat::RematChain chain = remat::stage_remat_chain(profile, 4, 9);
  const SteadyStateBuffers steady =
      steady_state_buffers(chain, {}, one_f_one_b_stage_pattern(3), 0);
  for (PlanMethod method : {PlanMethod::GreedyByStart, PlanMethod::GreedyLargestFirst})
    expect_valid_in_every_period(greedy_address_plan(steady.buffers, method), steady.timesteps());
  if (solver::built_backends().empty()) GTEST_SKIP() << "no MILP backend built";
  const AddressPlan greedy = best_greedy_address_plan(steady.buffers);
  const AddressPlan ilp = ilp_address_plan(steady.buffers, ilp_options(0.3));
  expect_valid_in_every_period(ilp, steady.timesteps());
  EXPECT_LE(ilp.arena_bytes, greedy.arena_bytes);
}

TEST(SteadyStateBuffers, StagesOfARealOneFOneBPlan) {
  const Profile profile = read_profile(testing::shipped_profile_path("gpt2_small"));
  const ChainCosts costs(profile);
  const int layers = static_cast<int>(profile.layers.size());
  const std::vector<schedule::Stage> stages =
      schedule::make_stages(costs, {0, layers / 4, layers / 2, 3 * layers / 4}, {0, 1, 2, 3});
  const schedule::Pattern pattern = one_f_one_b(stages, testing::huge_memory_platform(4));
  const std::vector<int> nca = concurrent_activations(pattern, 4);
  for (int s = 0; s < 4; ++s) {
    const schedule::Stage& stage = stages[static_cast<std::size_t>(s)];
    const remat::RematChain chain =
        remat::stage_remat_chain(profile, stage.first_layer, stage.last_layer);
    const SteadyStateBuffers steady = steady_state_buffers(chain, {}, pattern, s);
    EXPECT_LE(steady.slot_sets, nca[static_cast<std::size_t>(s)]) << "stage " << s;
    // Never more live than the window with every in-flight micro-batch's forward done first.
    const std::vector<Buffer> window =
        buffers_of(stage_tensor_graph(chain, {}, nca[static_cast<std::size_t>(s)]));
    EXPECT_LE(live_bytes_lower_bound(steady.buffers), live_bytes_lower_bound(window));
    expect_valid_in_every_period(best_greedy_address_plan(steady.buffers), steady.timesteps());
  }
}

// Two micro-batches per period (k = 2), three in flight: F of shift 2, B of 0, F of 3, B of 1.
schedule::Pattern two_periodic_pattern() {
  schedule::Pattern pattern;
  pattern.period_ms = 4;
  pattern.k = 2;
  pattern.ops = {{schedule::OpKind::F, 0, 0, {}, 0.0, 1.0, 2},
                 {schedule::OpKind::B, 0, 0, {}, 1.0, 1.0, 0},
                 {schedule::OpKind::F, 0, 0, {}, 2.0, 1.0, 3},
                 {schedule::OpKind::B, 0, 0, {}, 3.0, 1.0, 1}};
  return pattern;
}

TEST(SteadyStateBuffers, TwoPeriodicPatternAndLongerCircles) {
  const Profile profile = read_profile(testing::shipped_profile_path("resnet50"));
  const remat::RematChain chain = remat::stage_remat_chain(profile, 0, 3);
  const schedule::Pattern pattern = two_periodic_pattern();
  EXPECT_EQ(concurrent_activations(pattern, 1), std::vector<int>{3});
  const SteadyStateBuffers fewest = steady_state_buffers(chain, {}, pattern, 0);
  EXPECT_EQ(fewest.periods, 2);
  EXPECT_EQ(fewest.slot_sets, 4);
  const remat::SequenceReplay replay = replay_sequence(chain, store_all_sequence(chain));
  EXPECT_EQ(live_bytes_lower_bound(fewest.buffers), 2 * replay.stored_bytes + replay.peak_bytes);
  expect_valid_in_every_period(best_greedy_address_plan(fewest.buffers), fewest.timesteps());
  const SteadyStateBuffers longer = steady_state_buffers(chain, {}, pattern, 0, 3);
  EXPECT_EQ(longer.slot_sets, 6);
  EXPECT_EQ(live_bytes_lower_bound(longer.buffers), live_bytes_lower_bound(fewest.buffers));
  expect_valid_in_every_period(best_greedy_address_plan(longer.buffers), longer.timesteps());
  EXPECT_THROW(steady_state_buffers(chain, {}, pattern, 0, 1), Error);
  EXPECT_THROW(steady_state_buffers(chain, {}, pattern, 0, 65), Error);
}

TEST(SteadyStateBuffers, RejectsAStageWithoutItsOps) {
  const Profile profile = read_profile(testing::shipped_profile_path("gpt2_small"));
  const remat::RematChain chain = remat::stage_remat_chain(profile, 1, 2);
  EXPECT_THROW(steady_state_buffers(chain, {}, one_f_one_b_stage_pattern(2), 1), Error);
  schedule::Pattern backward_first = one_f_one_b_stage_pattern(1);
  backward_first.ops[1].start_ms = 0;
  backward_first.ops[0].start_ms = 1;
  EXPECT_THROW(steady_state_buffers(chain, {}, backward_first, 0), Error);
  EXPECT_THROW(one_f_one_b_stage_pattern(0), Error);
}

}  // namespace
}  // namespace madpipe::arena
