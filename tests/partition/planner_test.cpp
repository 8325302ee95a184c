// make_plan and friends: the thesis' small examples (ch. 5.3), every algorithm on the shipped
// profiles, infeasible memories, determinism, and input errors.

#include "partition/planner.hpp"

#include "core/chain.hpp"
#include "core/error.hpp"
#include "core/profile.hpp"
#include "plan/plan.hpp"
#include "plan/validate.hpp"
#include "schedule/memory.hpp"
#include "schedule/stage.hpp"
#include "support/planner_support.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <cctype>
#include <cstdint>
#include <map>
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

constexpr std::int64_t kGB = 1'000'000'000;

// 12e6 B/ms = 12 GB/s.
madpipe::Platform platform_of(int gpus, std::int64_t memory, double bandwidth = 12e6,
                              int weight_copies = 3) {
  return mt::make_platform(gpus, memory, bandwidth, weight_copies);
}

mp::PlannerOptions options_for(mp::Algorithm algorithm) {
  mp::PlannerOptions options;
  options.algorithm = algorithm;
  options.milp.time_limit_s = 2;  // ILP scheduling of the large allocations stops early
  return options;
}

std::string plan_json(const mplan::Plan& plan) {
  std::ostringstream out;
  mplan::write_plan(plan, out);
  return out.str();
}

// Thesis ch. 5.3.1: three layers of cost u_F + u_B = 1, 2, 1.
madpipe::Profile thesis_chain(const std::vector<std::int64_t>& weights = {}) {
  return mt::make_chain({0.5, 1, 0.5}, {0.5, 1, 0.5}, weights, {0, 0, 0}, 0);
}

// GPU of each layer in a plan.
std::vector<int> layer_gpus(const mplan::Plan& plan) {
  std::vector<int> gpus;
  for (const ms::Stage& stage : plan.stages)
    for (int l = stage.first_layer; l <= stage.last_layer; ++l) gpus.push_back(stage.gpu);
  return gpus;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Thesis examples.

TEST(Planner, ThesisThreeLayerChainContiguousPeriodThreeMadPipeTwo) {
  const madpipe::Profile profile = thesis_chain();
  const madpipe::Platform platform = platform_of(2, kGB);
  EXPECT_DOUBLE_EQ(mp::lower_bound_period_ms(profile, platform), 2.0);

  const mp::PlanResult contiguous =
      mp::make_plan(profile, platform, options_for(mp::Algorithm::Contiguous));
  ASSERT_TRUE(contiguous.feasible) << contiguous.reason;
  EXPECT_NEAR(contiguous.plan.predicted.period_ms, 3.0, 1e-6);
  EXPECT_TRUE(ms::is_contiguous_allocation(contiguous.plan.stages));
  EXPECT_TRUE(mplan::validate(contiguous.plan, profile).empty())
      << mt::describe(mplan::validate(contiguous.plan, profile));

  const mp::PlanResult madpipe = mp::make_plan(profile, platform);
  ASSERT_TRUE(madpipe.feasible) << madpipe.reason;
  EXPECT_NEAR(madpipe.plan.predicted.period_ms, 2.0, 1e-6);
  EXPECT_NEAR(madpipe.plan.predicted.lower_bound_period_ms, 2.0, 1e-12);
  EXPECT_EQ(madpipe.plan.algorithm, "madpipe");
  EXPECT_FALSE(ms::is_contiguous_allocation(madpipe.plan.stages));
  const std::vector<int> gpus = layer_gpus(madpipe.plan);
  ASSERT_EQ(gpus.size(), 3u);
  EXPECT_EQ(gpus[0], gpus[2]);  // layers 0 and 2 share a GPU
  EXPECT_NE(gpus[0], gpus[1]);
  const auto violations = mplan::validate(madpipe.plan, profile);
  EXPECT_TRUE(violations.empty()) << mt::describe(violations);

  // The fixed-in-flight baselines are contiguous too.
  for (mp::Algorithm algorithm : {mp::Algorithm::OneFOneB, mp::Algorithm::GPipe}) {
    const mp::PlanResult result = mp::make_plan(profile, platform, options_for(algorithm));
    ASSERT_TRUE(result.feasible) << mp::to_string(algorithm);
    EXPECT_GE(result.plan.predicted.period_ms, 3.0 - 1e-6) << mp::to_string(algorithm);
    EXPECT_TRUE(mplan::validate(result.plan, profile).empty()) << mp::to_string(algorithm);
  }
}

TEST(Planner, ThesisLemma10OnlyANonContiguousAllocationFitsTheMemory) {
  // Weights 1, 2, 1 bytes, memory 2 bytes, one weight copy, no activations: any contiguous
  // allocation on two GPUs puts 3 bytes on one GPU; layers 0 and 2 together fit.
  const madpipe::Profile profile = thesis_chain({1, 2, 1});
  const madpipe::Platform platform = platform_of(2, 2, 12e6, 1);
  for (mp::Algorithm algorithm :
       {mp::Algorithm::Contiguous, mp::Algorithm::OneFOneB, mp::Algorithm::GPipe}) {
    const mp::PlanResult result = mp::make_plan(profile, platform, options_for(algorithm));
    EXPECT_FALSE(result.feasible) << mp::to_string(algorithm);
    EXPECT_FALSE(result.reason.empty()) << mp::to_string(algorithm);
  }
  const mp::PlanResult madpipe = mp::make_plan(profile, platform);
  ASSERT_TRUE(madpipe.feasible) << madpipe.reason;
  EXPECT_FALSE(ms::is_contiguous_allocation(madpipe.plan.stages));
  const std::vector<int> gpus = layer_gpus(madpipe.plan);
  ASSERT_EQ(gpus.size(), 3u);
  EXPECT_EQ(gpus[0], gpus[2]);
  EXPECT_NE(gpus[0], gpus[1]);
  EXPECT_NEAR(madpipe.plan.predicted.period_ms, 2.0, 1e-6);
  for (std::int64_t bytes : madpipe.plan.predicted.memory_bytes) EXPECT_LE(bytes, 2);
  const auto violations = mplan::validate(madpipe.plan, profile);
  EXPECT_TRUE(violations.empty()) << mt::describe(violations);
}

// ---------------------------------------------------------------------------------------------
// Shipped profiles.

TEST(Planner, EveryAlgorithmOnTheShippedProfiles) {
  int feasible = 0, infeasible = 0, strictly_better = 0;
  for (const std::string name : {"resnet50", "gpt2_small", "gpt2_xl16"}) {
    const madpipe::Profile profile = madpipe::read_profile(mt::shipped_profile_path(name));
    for (int gpus : {2, 4}) {
      for (std::int64_t memory : {6 * kGB, 16 * kGB, 80 * kGB}) {
        const madpipe::Platform platform = platform_of(gpus, memory);
        const double bound = mp::lower_bound_period_ms(profile, platform);
        std::map<mp::Algorithm, double> period;
        for (mp::Algorithm algorithm : mp::all_algorithms()) {
          if (algorithm == mp::Algorithm::Ilp) continue;  // full_ilp_test.cpp
          SCOPED_TRACE(name + " gpus " + std::to_string(gpus) + " memory " +
                       std::to_string(memory) + " " + mp::to_string(algorithm));
          const mp::PlanResult result = mp::make_plan(profile, platform, options_for(algorithm));
          if (!result.feasible) {
            ++infeasible;
            EXPECT_FALSE(result.reason.empty());
            continue;
          }
          ++feasible;
          const mplan::Plan& plan = result.plan;
          EXPECT_EQ(plan.algorithm, mp::to_string(algorithm));
          EXPECT_EQ(plan.profile, profile.name);
          EXPECT_EQ(plan.platform, platform);
          const auto violations = mplan::validate(plan, profile);
          EXPECT_TRUE(violations.empty()) << mt::describe(violations);
          // The compute bound, or the memory-aware one where it is larger and the plan keeps
          // every activation.
          const double best_bound = mp::lower_bound_for(plan, profile);
          EXPECT_GE(best_bound, bound * (1 - 1e-12));
          EXPECT_NEAR(plan.predicted.lower_bound_period_ms, best_bound, 1e-12 * best_bound);
          EXPECT_GE(plan.predicted.period_ms, best_bound * (1 - 1e-9));
          const std::vector<int> used = layer_gpus(plan);
          EXPECT_LE(static_cast<int>(std::set<int>(used.begin(), used.end()).size()), gpus);
          for (std::int64_t bytes : plan.predicted.memory_bytes) EXPECT_LE(bytes, memory);
          period[algorithm] = plan.predicted.period_ms;
        }
        // MadPipe is never worse than the contiguous baseline (and feasible whenever it is).
        if (period.count(mp::Algorithm::Contiguous)) {
          ASSERT_TRUE(period.count(mp::Algorithm::MadPipe)) << name << " " << gpus << " " << memory;
          EXPECT_LE(period[mp::Algorithm::MadPipe], period[mp::Algorithm::Contiguous] * (1 + 1e-9))
              << name << " " << gpus << " " << memory;
          if (period[mp::Algorithm::MadPipe] < period[mp::Algorithm::Contiguous] * (1 - 1e-3))
            ++strictly_better;
        }
      }
    }
  }
  EXPECT_GT(feasible, 40);
  EXPECT_GT(infeasible, 0);       // 6 GB is too small for some of them
  EXPECT_GT(strictly_better, 0);  // non-contiguous allocations pay off somewhere
}

TEST(Planner, OneFOneBAndGPipePlansKeepTheirPromisedMicroBatches) {
  const madpipe::Profile profile = madpipe::read_profile(mt::shipped_profile_path("gpt2_small"));
  const madpipe::Platform platform = platform_of(4, 80 * kGB);
  const mp::PlanResult one_f_one_b =
      mp::make_plan(profile, platform, options_for(mp::Algorithm::OneFOneB));
  ASSERT_TRUE(one_f_one_b.feasible);
  const int S = static_cast<int>(one_f_one_b.plan.stages.size());
  EXPECT_TRUE(ms::is_contiguous_allocation(one_f_one_b.plan.stages));
  EXPECT_EQ(one_f_one_b.plan.pattern.k, 1);
  const auto nca = ms::concurrent_activations(one_f_one_b.plan.pattern, S);
  for (int s = 0; s < S; ++s) EXPECT_EQ(nca[s], S - s) << "stage " << s;

  mp::PlannerOptions gpipe_options = options_for(mp::Algorithm::GPipe);
  gpipe_options.micro_batches_per_step = 6;
  const mp::PlanResult gpipe = mp::make_plan(profile, platform, gpipe_options);
  ASSERT_TRUE(gpipe.feasible);
  EXPECT_EQ(gpipe.plan.pattern.k, 6);
  const int G = static_cast<int>(gpipe.plan.stages.size());
  EXPECT_EQ(ms::concurrent_activations(gpipe.plan.pattern, G), std::vector<int>(G, 6));
  EXPECT_TRUE(mplan::validate(gpipe.plan, profile).empty());
}

// ---------------------------------------------------------------------------------------------
// Infeasible memory and the smallest feasible one.

TEST(Planner, TooLittleMemoryIsInfeasibleWithAReason) {
  const madpipe::Profile profile = madpipe::read_profile(mt::shipped_profile_path("gpt2_small"));
  const madpipe::Platform platform = platform_of(4, 1'000'000);
  for (mp::Algorithm algorithm : mt::runnable_algorithms()) {
    const mp::PlanResult result = mp::make_plan(profile, platform, options_for(algorithm));
    EXPECT_FALSE(result.feasible) << mp::to_string(algorithm);
    EXPECT_NE(result.reason.find(mp::to_string(algorithm)), std::string::npos) << result.reason;
    EXPECT_NE(result.reason.find("fit"), std::string::npos) << result.reason;
    EXPECT_GE(result.planning_seconds, 0.0);
  }
}

TEST(Planner, SmallestFeasibleMemoryIsFeasible) {
  const madpipe::Profile profile = madpipe::read_profile(mt::shipped_profile_path("gpt2_small"));
  const madpipe::Platform platform = platform_of(4, 1'000'000);
  for (mp::Algorithm algorithm : mt::runnable_algorithms()) {
    SCOPED_TRACE(mp::to_string(algorithm));
    mp::PlannerOptions options = options_for(algorithm);
    options.discretization = {41, 21, 6, 6};
    const std::int64_t memory = mp::smallest_feasible_memory(profile, platform, options);
    ASSERT_GT(memory, 1'000'000);
    madpipe::Platform enough = platform;
    enough.memory_bytes = memory;
    const mp::PlanResult result = mp::make_plan(profile, enough, options);
    ASSERT_TRUE(result.feasible) << result.reason;
    EXPECT_TRUE(mplan::validate(result.plan, profile).empty());
    if (algorithm == mp::Algorithm::OneFOneB || algorithm == mp::Algorithm::GPipe) {
      // Fixed in-flight counts make feasibility monotone in the memory: 1% less does not fit.
      madpipe::Platform less = platform;
      less.memory_bytes = memory - memory / 100 - 1;
      EXPECT_FALSE(mp::make_plan(profile, less, options).feasible);
    }
  }
}

TEST(Planner, SmallestFeasibleMemoryWithDefaultDiscretization) {
  const madpipe::Profile profile = madpipe::read_profile(mt::shipped_profile_path("gpt2_small"));
  const madpipe::Platform platform = platform_of(2, 1'000'000);
  const std::int64_t memory = mp::smallest_feasible_memory(profile, platform);
  ASSERT_GT(memory, 1'000'000);
  madpipe::Platform enough = platform;
  enough.memory_bytes = memory;
  const mp::PlanResult result = mp::make_plan(profile, enough);
  EXPECT_TRUE(result.feasible) << result.reason;
}

// ---------------------------------------------------------------------------------------------
// Determinism and inputs.

TEST(Planner, TwoRunsWriteByteIdenticalPlans) {
  const madpipe::Profile profile = madpipe::read_profile(mt::shipped_profile_path("resnet50"));
  for (mp::Algorithm algorithm : mp::all_algorithms()) {
    // A MILP solver stopped by its time limit keeps what it found by then: not reproducible.
    if (algorithm == mp::Algorithm::Ilp) continue;
    const madpipe::Platform platform = platform_of(4, 16 * kGB);
    const mp::PlanResult first = mp::make_plan(profile, platform, options_for(algorithm));
    const mp::PlanResult second = mp::make_plan(profile, platform, options_for(algorithm));
    ASSERT_EQ(first.feasible, second.feasible) << mp::to_string(algorithm);
    if (!first.feasible) continue;
    const std::string a = plan_json(first.plan), b = plan_json(second.plan);
    EXPECT_FALSE(a.empty());
    EXPECT_EQ(a, b) << mp::to_string(algorithm);
  }
}

TEST(Planner, InvalidPlatformThrows) {
  const madpipe::Profile profile = thesis_chain();
  madpipe::Platform no_gpus = platform_of(0, kGB);
  EXPECT_THROW(mp::make_plan(profile, no_gpus), madpipe::Error);
  madpipe::Platform no_memory = platform_of(2, 0);
  EXPECT_THROW(mp::make_plan(profile, no_memory), madpipe::Error);
  madpipe::Platform negative_memory = platform_of(2, -5);
  EXPECT_THROW(mp::make_plan(profile, negative_memory), madpipe::Error);
  madpipe::Platform no_bandwidth = platform_of(2, kGB, 0.0);
  EXPECT_THROW(mp::make_plan(profile, no_bandwidth), madpipe::Error);
  madpipe::Platform no_copies = platform_of(2, kGB, 12e6, 0);
  EXPECT_THROW(mp::make_plan(profile, no_copies), madpipe::Error);
  EXPECT_THROW(mp::smallest_feasible_memory(profile, no_gpus), madpipe::Error);
  try {
    mp::make_plan(profile, no_gpus);
    FAIL() << "expected an error";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.kind(), madpipe::ErrorKind::InvalidInput);
    EXPECT_NE(std::string(e.what()).find("gpus"), std::string::npos) << e.what();
  }
  madpipe::Profile empty = profile;
  empty.layers.clear();
  EXPECT_THROW(mp::make_plan(empty, platform_of(2, kGB)), madpipe::Error);
}

TEST(Planner, AlgorithmNames) {
  EXPECT_EQ(mp::algorithm_from_string("madpipe"), mp::Algorithm::MadPipe);
  EXPECT_EQ(mp::algorithm_from_string("MadPipe"), mp::Algorithm::MadPipe);
  EXPECT_EQ(mp::algorithm_from_string("CONTIGUOUS"), mp::Algorithm::Contiguous);
  EXPECT_EQ(mp::algorithm_from_string("1F1B"), mp::Algorithm::OneFOneB);
  EXPECT_EQ(mp::algorithm_from_string("GPipe"), mp::Algorithm::GPipe);
  ASSERT_GE(mp::all_algorithms().size(), 4u);
  std::set<std::string> names;
  for (mp::Algorithm algorithm : mp::all_algorithms()) {
    const std::string name = mp::to_string(algorithm);
    names.insert(name);
    EXPECT_EQ(mp::algorithm_from_string(name), algorithm);
    std::string upper = name;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(mp::algorithm_from_string(upper), algorithm);
  }
  EXPECT_EQ(names.size(), mp::all_algorithms().size());  // distinct names
  for (const char* name : {"madpipe", "contiguous", "1f1b", "gpipe"})
    EXPECT_EQ(names.count(name), 1u);
  try {
    mp::algorithm_from_string("round-robin");
    FAIL() << "expected an error";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.kind(), madpipe::ErrorKind::InvalidInput);
    const std::string what = e.what();
    EXPECT_NE(what.find("round-robin"), std::string::npos) << what;
    for (const std::string& name : names) EXPECT_NE(what.find(name), std::string::npos) << what;
  }
  EXPECT_THROW(mp::algorithm_from_string(""), madpipe::Error);
  EXPECT_THROW(mp::algorithm_from_string("madpipe "), madpipe::Error);
}

TEST(Planner, LowerBound) {
  // max(sum U / P, max layer): 4/2 = 2 vs 2; 4/1 = 4; 4/8 = 0.5 vs 2.
  const madpipe::Profile profile = thesis_chain();
  EXPECT_DOUBLE_EQ(mp::lower_bound_period_ms(profile, platform_of(1, kGB)), 4.0);
  EXPECT_DOUBLE_EQ(mp::lower_bound_period_ms(profile, platform_of(2, kGB)), 2.0);
  EXPECT_DOUBLE_EQ(mp::lower_bound_period_ms(profile, platform_of(8, kGB)), 2.0);
  const madpipe::Profile flat = mt::make_chain({1, 1, 1, 1}, {2, 2, 2, 2});
  EXPECT_DOUBLE_EQ(mp::lower_bound_period_ms(flat, platform_of(2, kGB)), 6.0);
}

// Layers are indivisible: five layers of 3 ms on 4 GPUs leave some GPU two (6 ms, where the sum
// alone says 3.75); nine leave some GPU three (9 ms, not 6.75). The planner reaches it.
TEST(Planner, TheBoundCountsThatLayersAreIndivisible) {
  const std::vector<double> forward(9, 1.0), backward(9, 2.0);
  const madpipe::Profile five = mt::make_chain({1, 1, 1, 1, 1}, {2, 2, 2, 2, 2});
  EXPECT_DOUBLE_EQ(mp::lower_bound_period_ms(five, platform_of(4, kGB)), 6.0);
  const madpipe::Profile nine = mt::make_chain(forward, backward);
  EXPECT_DOUBLE_EQ(mp::lower_bound_period_ms(nine, platform_of(4, kGB)), 9.0);
  EXPECT_DOUBLE_EQ(mp::lower_bound_period_ms(nine, platform_of(9, kGB)), 3.0);
  const mp::PlanResult result = mp::make_plan(nine, platform_of(4, kGB));
  ASSERT_TRUE(result.feasible) << result.reason;
  EXPECT_NEAR(result.plan.predicted.period_ms, 9.0, 1e-6);
  EXPECT_NEAR(result.plan.predicted.lower_bound_period_ms, 9.0, 1e-9);
}

TEST(Planner, SingleGpuRunsTheWholeChainSequentially) {
  const madpipe::Profile profile =
      mt::make_chain({1, 2, 3}, {2, 3, 4}, {10, 20, 30}, {100, 200, 300}, 50);
  const madpipe::Platform platform = platform_of(1, kGB);
  for (mp::Algorithm algorithm : mt::runnable_algorithms()) {
    const mp::PlanResult result = mp::make_plan(profile, platform, options_for(algorithm));
    ASSERT_TRUE(result.feasible) << mp::to_string(algorithm);
    EXPECT_NEAR(result.plan.predicted.period_ms, 15.0, 1e-6) << mp::to_string(algorithm);
    for (const ms::Stage& stage : result.plan.stages) EXPECT_EQ(stage.gpu, 0);
    EXPECT_TRUE(mplan::validate(result.plan, profile).empty()) << mp::to_string(algorithm);
  }
}

// ---------------------------------------------------------------------------------------------
// Zero-cost layers and zero-byte activations are allowed by the profile format.

TEST(Planner, GPipePlanWithAZeroCostLastOpIsValid) {
  const madpipe::Profile profile = mt::make_chain({1}, {0}, {1}, {0}, 0);
  const mp::PlanResult result =
      mp::make_plan(profile, platform_of(1, kGB), options_for(mp::Algorithm::GPipe));
  ASSERT_TRUE(result.feasible);
  const auto violations = mplan::validate(result.plan, profile);
  EXPECT_TRUE(violations.empty()) << mt::describe(violations);
}

TEST(Planner, MadPipePlanWithZeroCostLayersIsValid) {
  const madpipe::Profile profile =
      mt::make_chain({0, 2, 0, 2}, {1, 3, 0, 1}, {1, 1, 1, 1}, {0, 2000, 0, 1000}, 500);
  const mp::PlanResult result = mp::make_plan(profile, platform_of(2, kGB, 1000.0));
  ASSERT_TRUE(result.feasible);
  const auto violations = mplan::validate(result.plan, profile);
  EXPECT_TRUE(violations.empty()) << mt::describe(violations);
}

// Eleven equal layers on eleven GPUs: loads that sum with rounding. The plan's time breakdown
// has no negative share and the plan reads back.
TEST(Planner, APlansTimeBreakdownAddsUpAndReadsBack) {
  const std::vector<double> forward(11, 0.1), backward(11, 0.2);
  const madpipe::Profile profile = mt::make_chain(forward, backward);
  const mp::PlanResult result = mp::make_plan(profile, platform_of(11, kGB));
  ASSERT_TRUE(result.feasible) << result.reason;
  ASSERT_TRUE(result.plan.predicted.time.has_value());
  const mplan::TimeBreakdown& time = *result.plan.predicted.time;
  for (double share :
       {time.useful, time.recomputation, time.imbalance, time.tied_exchange, time.waiting})
    EXPECT_GE(share, 0.0);
  EXPECT_NEAR(time.useful + time.recomputation + time.imbalance + time.tied_exchange + time.waiting,
              1.0, 1e-9);
  const mplan::Plan read = mplan::plan_from_json(mplan::plan_to_json(result.plan));
  ASSERT_TRUE(read.predicted.time.has_value());
  EXPECT_EQ(read.predicted.time->busy, time.busy);
}

// Little's law: three layers of 1 ms forward and 2 ms backward, each storing 1 MB (and its 1 kB
// input), on GPUs of 2.1 MB. A micro-batch holds layer 0's activations for at least 9 ms and a GPU
// keeps at most two of them, so no plan that keeps every activation has a period below 4.5 ms,
// although the compute alone allows 3 ms on three GPUs.
TEST(Planner, TheMemoryAwareBoundCountsWhatMemoryKeepsInFlight) {
  madpipe::Profile profile;
  profile.name = "three";
  profile.device = "test";
  profile.batch = 1;
  profile.input_bytes = 1000;
  for (int l = 0; l < 3; ++l) {
    madpipe::Layer layer;
    layer.name = "layer" + std::to_string(l);
    layer.forward_ms = 1;
    layer.backward_ms = 2;
    layer.weight_bytes = 0;
    layer.saved_bytes = 1000 * 1000;
    layer.output_bytes = 1;
    profile.layers.push_back(layer);
  }
  const madpipe::Platform platform = mt::make_platform(3, 2100 * 1000, 1e9, 1);
  const madpipe::ChainCosts costs(profile);
  EXPECT_NEAR(mp::lower_bound_period_ms(costs, platform), 3.0, 1e-9);
  EXPECT_NEAR(mp::memory_bound_period_ms(costs, platform), 4.5, 1e-9);
  const mp::PlanResult result = mp::make_plan(profile, platform);
  ASSERT_TRUE(result.feasible) << result.reason;
  EXPECT_NEAR(result.plan.predicted.lower_bound_period_ms, 4.5, 1e-9);
  EXPECT_GE(result.plan.predicted.period_ms, 4.5 * (1 - 1e-9));
  EXPECT_TRUE(mplan::validate(result.plan, profile).empty());
}

// Little's law over all GPUs together: four layers of 1 ms forward and 2 ms backward, each with
// 1 MB of weights and storing 1 MB, on two GPUs of 4.2 MB. Each layer alone would keep three
// micro-batches (4 ms for layer 0), but the weights leave 8.4 - 4 MB for all of them, and layer
// l's are held at least 12 - 3 l ms: no plan beats (1.001 x 12 + 1.000001 x 18) / 4.4 ms.
TEST(Planner, TheMemoryAwareBoundCountsTheMemoryOfAllGpusTogether) {
  madpipe::Profile profile;
  profile.name = "four";
  profile.device = "test";
  profile.batch = 1;
  profile.input_bytes = 1000;
  for (int l = 0; l < 4; ++l) {
    madpipe::Layer layer;
    layer.name = "layer" + std::to_string(l);
    layer.forward_ms = 1;
    layer.backward_ms = 2;
    layer.weight_bytes = 1000 * 1000;
    layer.saved_bytes = 1000 * 1000;
    layer.output_bytes = 1;
    profile.layers.push_back(layer);
  }
  const madpipe::Platform platform = mt::make_platform(2, 4200 * 1000, 1e9, 1);
  const madpipe::ChainCosts costs(profile);
  const double held = 1001000.0 * 12 + 1000001.0 * (9 + 6 + 3);
  const double bound = held / (2 * 4.2e6 - 4e6);
  EXPECT_NEAR(mp::lower_bound_period_ms(costs, platform), 6.0, 1e-9);
  EXPECT_NEAR(mp::memory_bound_period_ms(costs, platform), bound, 1e-6);
  const mp::PlanResult result = mp::make_plan(profile, platform);
  ASSERT_TRUE(result.feasible) << result.reason;
  EXPECT_NEAR(result.plan.predicted.lower_bound_period_ms, bound, 1e-6);
  EXPECT_GE(result.plan.predicted.period_ms, bound);
  EXPECT_TRUE(mplan::validate(result.plan, profile).empty());
}
