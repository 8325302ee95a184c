// The least memory per GPU with which an algorithm plans a chain, found without planning: exact to
// the byte for the contiguous algorithms, a plan at it for madpipe, with and without
// rematerialization.

#include "partition/memory_floor.hpp"

#include "core/chain.hpp"
#include "core/profile.hpp"
#include "partition/planner.hpp"
#include "plan/validate.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

namespace mp = madpipe::partition;
namespace mt = madpipe::testing;

namespace {
mp::PlannerOptions heuristic(mp::Algorithm algorithm) {
  mp::PlannerOptions options;
  options.algorithm = algorithm;
  options.scheduler = mp::Scheduler::Heuristic;
  options.discretization = {41, 21, 6, 6, 2};
  options.refine_evaluations = 20;
  return options;
}

madpipe::Platform with_memory(madpipe::Platform platform, std::int64_t bytes) {
  platform.memory_bytes = bytes;
  return platform;
}
}  // namespace

// Layers of 10, 40, 10, 30 weight bytes (C = 1), nothing else: on 2 GPUs the best cut is
// {10, 40} | {10, 30} = 50 / 40 and the floor is 50, bound by layers 0..1; any allocation needs
// the largest layer (40) and half of everything (45).
TEST(MemoryFloor, HandComputedChain) {
  const madpipe::Profile profile = mt::make_chain({1, 1, 1, 1}, {1, 1, 1, 1}, {10, 40, 10, 30});
  const madpipe::ChainCosts costs(profile);
  const madpipe::Platform platform = mt::make_platform(2, 1'000, 1e6, 1);
  const mp::MemoryFloor floor = mp::memory_floor(costs, platform, [](int) { return 1; });
  ASSERT_TRUE(floor.fits);
  EXPECT_EQ(floor.bytes, 50);
  EXPECT_EQ(floor.at_least_bytes, 50);
  EXPECT_FALSE(floor.cut);
  EXPECT_EQ(floor.binding_first, 0);
  EXPECT_EQ(floor.binding_last, 1);
  EXPECT_EQ(floor.binding_in_flight, 1);
  EXPECT_FALSE(floor.binding_saves_memory);
  EXPECT_EQ(floor.any_allocation_bytes, 45);
  // One GPU holds everything.
  const mp::MemoryFloor one =
      mp::memory_floor(costs, mt::make_platform(1, 1'000, 1e6, 1), [](int) { return 1; });
  EXPECT_EQ(one.bytes, 90);
  EXPECT_EQ(one.any_allocation_bytes, 90);
}

// With 1F1B counts the stage with q stages after it keeps q micro-batches. Two layers of 100
// weight bytes whose inputs are 5 bytes: one stage keeps 200 + 10; two stages keep 100 + 5 each
// and 10 bytes of buffers, the first twice its 5 bytes under 1F1B.
TEST(MemoryFloor, InFlightCountsWeighTheActivations) {
  const madpipe::Profile profile = mt::make_chain({1, 1}, {1, 1}, {100, 100}, {5, 5}, 5);
  const madpipe::ChainCosts costs(profile);
  const madpipe::Platform platform = mt::make_platform(2, 1'000, 1e6, 1);
  const mp::MemoryFloor sequential = mp::memory_floor(costs, platform, [](int) { return 1; });
  const mp::MemoryFloor one_f_one_b = mp::memory_floor(costs, platform, [](int q) { return q; });
  EXPECT_EQ(sequential.bytes, 115);
  EXPECT_EQ(one_f_one_b.bytes, 120);
  EXPECT_EQ(one_f_one_b.binding_first, 0);
  EXPECT_EQ(one_f_one_b.binding_last, 0);
  EXPECT_EQ(one_f_one_b.binding_in_flight, 2);
}

// The contiguous algorithms plan at the floor and nothing one byte below it; madpipe plans at it.
TEST(MemoryFloor, ExactForEveryAlgorithmOnTheShippedProfiles) {
  for (const char* name : {"gpt2_small", "resnet50"}) {
    const madpipe::Profile profile = madpipe::read_profile(mt::shipped_profile_path(name));
    const madpipe::ChainCosts costs(profile);
    for (int gpus : {1, 2, 4, 8}) {
      const madpipe::Platform platform = mt::make_platform(gpus, 1, 12e6, 3);
      for (mp::Algorithm algorithm :
           {mp::Algorithm::MadPipe, mp::Algorithm::Contiguous, mp::Algorithm::PipeDream,
            mp::Algorithm::OneFOneB, mp::Algorithm::GPipe}) {
        SCOPED_TRACE(std::string(name) + " on " + std::to_string(gpus) + " GPUs, " +
                     mp::to_string(algorithm));
        const mp::PlannerOptions options = heuristic(algorithm);
        const mp::MemoryFloor floor = mp::algorithm_memory_floor(costs, platform, options);
        ASSERT_TRUE(floor.fits);
        EXPECT_LE(floor.any_allocation_bytes, floor.bytes);
        const mp::PlanResult at =
            mp::make_plan(profile, with_memory(platform, floor.bytes), options);
        ASSERT_TRUE(at.feasible) << at.reason;
        EXPECT_TRUE(madpipe::plan::validate(at.plan, profile).empty());
        if (algorithm != mp::Algorithm::MadPipe) {
          EXPECT_FALSE(
              mp::make_plan(profile, with_memory(platform, floor.bytes - 1), options).feasible);
        }
        EXPECT_EQ(mp::smallest_feasible_memory(profile, platform, options), floor.bytes);
      }
    }
  }
}

// No plan of any allocation fits below any_allocation_bytes: make_plan refuses at once.
TEST(MemoryFloor, BelowWhatAnyAllocationNeedsNothingIsPlanned) {
  const madpipe::Profile profile = madpipe::read_profile(mt::shipped_profile_path("resnet50"));
  const madpipe::ChainCosts costs(profile);
  const madpipe::Platform platform = mt::make_platform(4, 1, 12e6, 3);
  const mp::MemoryFloor floor =
      mp::algorithm_memory_floor(costs, platform, heuristic(mp::Algorithm::MadPipe));
  const mp::PlanResult result =
      mp::make_plan(profile, with_memory(platform, floor.any_allocation_bytes - 1),
                    heuristic(mp::Algorithm::MadPipe));
  EXPECT_FALSE(result.feasible);
  EXPECT_NE(result.reason.find("no madpipe plan fits"), std::string::npos) << result.reason;
}

// With rematerialization the floor drops, a contiguous plan recomputing activations exists at it,
// and the bisection's bounds meet.
TEST(MemoryFloor, RematerializationLowersTheFloorToAPlan) {
  const madpipe::Profile profile = madpipe::read_profile(mt::shipped_profile_path("resnet50"));
  const madpipe::ChainCosts costs(profile);
  const madpipe::Platform platform = mt::make_platform(4, 1, 12e6, 3);
  mp::PlannerOptions options = heuristic(mp::Algorithm::Contiguous);
  const mp::MemoryFloor plain = mp::algorithm_memory_floor(costs, platform, options);
  options.remat.remat = madpipe::partition::RematStrategy::Rotor;
  mp::StageOptions remat(profile, options.remat);
  const mp::MemoryFloor floor = mp::algorithm_memory_floor(costs, platform, options, &remat);
  ASSERT_TRUE(floor.fits);
  EXPECT_FALSE(floor.cut);
  EXPECT_LE(floor.bytes - floor.at_least_bytes, floor.bytes / 1000);
  EXPECT_LT(floor.bytes, plain.bytes);
  EXPECT_TRUE(floor.binding_saves_memory);
  const mp::PlanResult at = mp::make_plan(profile, with_memory(platform, floor.bytes), options);
  ASSERT_TRUE(at.feasible) << at.reason;
  EXPECT_TRUE(madpipe::plan::validate(at.plan, profile).empty());
}

// Out of time at once, the search still brackets the floor: a plan exists at the upper end.
TEST(MemoryFloor, CutShortItBracketsTheFloor) {
  const madpipe::Profile profile = madpipe::read_profile(mt::shipped_profile_path("resnet50"));
  const madpipe::ChainCosts costs(profile);
  const madpipe::Platform platform = mt::make_platform(4, 1, 12e6, 3);
  mp::PlannerOptions options = heuristic(mp::Algorithm::Contiguous);
  options.remat.remat = madpipe::partition::RematStrategy::Rotor;
  mp::StageOptions remat(profile, options.remat);
  const mp::MemoryFloor cut =
      mp::algorithm_memory_floor(costs, platform, options, &remat, [] { return true; });
  mp::StageOptions fresh(profile, options.remat);
  const mp::MemoryFloor exact = mp::algorithm_memory_floor(costs, platform, options, &fresh);
  EXPECT_LE(cut.at_least_bytes, exact.bytes);
  EXPECT_GE(cut.bytes, exact.bytes);
  EXPECT_LT(cut.at_least_bytes, cut.bytes);
  EXPECT_TRUE(cut.cut);
  EXPECT_TRUE(mp::make_plan(profile, with_memory(platform, cut.bytes), options).feasible);
}
