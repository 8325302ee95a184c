// Modulo list scheduling of any allocation, including several stages per GPU.

#include "schedule/modulo.hpp"

#include "core/chain.hpp"
#include "plan/plan.hpp"
#include "plan/validate.hpp"
#include "schedule/memory.hpp"
#include "schedule/pattern.hpp"
#include "schedule/stage.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;
namespace mt = madpipe::testing;
using ms::OpKind;

namespace {

struct RandomAllocation {
  madpipe::Profile profile;
  std::vector<ms::Stage> stages;
  madpipe::Platform platform;
};

// A random chain cut at random places, each stage on a random GPU (several stages per GPU
// allowed, neighbours too).
RandomAllocation random_allocation(std::mt19937& rng) {
  RandomAllocation a;
  const int layers = 3 + static_cast<int>(rng() % 10);
  const int gpus = 2 + static_cast<int>(rng() % 3);
  a.profile = mt::random_chain(rng, layers);
  a.platform = mt::huge_memory_platform(gpus);
  const int num_stages = 2 + static_cast<int>(rng() % (layers - 1));
  a.stages = mt::random_stages(rng, a.profile, num_stages, gpus, false);
  return a;
}

}  // namespace

TEST(ModuloSchedule, RandomNonContiguousAllocationsAreValid) {
  std::mt19937 rng(1234);
  int patterns = 0, shared_gpu = 0, tight = 0;
  for (int trial = 0; trial < 80; ++trial) {
    const RandomAllocation a = random_allocation(rng);
    if (!ms::is_contiguous_allocation(a.stages)) ++shared_gpu;
    const double busiest = mt::busiest_load(a.stages, a.platform);
    const double length = mt::chain_length(a.stages, a.platform);
    for (double T : {busiest * 1.0000001, busiest * 1.05, busiest * 1.25, busiest * 1.6,
                     busiest * 2.5, length}) {
      const auto pattern = ms::modulo_schedule(a.stages, a.platform, T);
      if (T == length) {
        // Micro-batch 0 alone takes the whole period: nothing can collide.
        ASSERT_TRUE(pattern.has_value()) << "trial " << trial;
        EXPECT_EQ(ms::concurrent_activations(*pattern, static_cast<int>(a.stages.size())),
                  std::vector<int>(a.stages.size(), 1));
      }
      if (!pattern) continue;
      ++patterns;
      if (T < 1.3 * busiest) ++tight;
      EXPECT_EQ(pattern->k, 1);
      EXPECT_DOUBLE_EQ(pattern->period_ms, T);
      const auto violations =
          mplan::validate(mt::plan_of(a.stages, a.platform, *pattern), a.profile);
      EXPECT_TRUE(violations.empty()) << "trial " << trial << " T " << T << "\n"
                                      << mt::describe(violations);
    }
  }
  EXPECT_GE(shared_gpu, 40);  // most allocations put several stages on one GPU
  EXPECT_GE(patterns, 200);
  EXPECT_GE(tight, 30);  // and the greedy often succeeds close to the busiest load
}

TEST(ModuloSchedule, NoPatternBelowTheBusiestLoad) {
  std::mt19937 rng(77);
  for (int trial = 0; trial < 40; ++trial) {
    const RandomAllocation a = random_allocation(rng);
    const double busiest = mt::busiest_load(a.stages, a.platform);
    EXPECT_FALSE(ms::modulo_schedule(a.stages, a.platform, 0.99 * busiest).has_value())
        << "trial " << trial;
  }
  const RandomAllocation a = random_allocation(rng);
  EXPECT_FALSE(ms::modulo_schedule(a.stages, a.platform, 0.0).has_value());
  EXPECT_FALSE(ms::modulo_schedule(a.stages, a.platform, -1.0).has_value());
}

TEST(ModuloSchedule, PacksTheThesisNonContiguousExampleWithoutIdleTime) {
  // Layers of cost 1, 2, 1 (thesis ch. 5.3.1): layers 0 and 2 on GPU 0, layer 1 on GPU 1, free
  // transfers. Period 2 leaves no idle time on either GPU.
  const madpipe::Profile profile = mt::make_chain({0.5, 1, 0.5}, {0.5, 1, 0.5}, {}, {}, 0);
  const auto stages = ms::make_stages(madpipe::ChainCosts(profile), {0, 1, 2}, {0, 1, 0});
  const auto platform = mt::huge_memory_platform(2, 1e12);
  const auto pattern = ms::modulo_schedule(stages, platform, 2.0);
  ASSERT_TRUE(pattern.has_value());
  const auto violations = mplan::validate(mt::plan_of(stages, platform, *pattern), profile);
  EXPECT_TRUE(violations.empty()) << mt::describe(violations);
  // F0 F1 F2 B2 B1 B0 plus four zero-length transfers.
  EXPECT_EQ(pattern->ops.size(), 10u);
}

TEST(ModuloSchedule, AllStagesOnOneGpu) {
  std::mt19937 rng(8);
  const madpipe::Profile profile = mt::random_chain(rng, 6);
  const auto stages = ms::make_stages(madpipe::ChainCosts(profile), {0, 2, 3, 5}, {0, 0, 0, 0});
  madpipe::Platform platform = mt::huge_memory_platform(1);
  const double length = mt::chain_length(stages, platform);
  ASSERT_NEAR(length, mt::busiest_load(stages, platform), 1e-9 * length);  // no transfers
  const auto pattern = ms::modulo_schedule(stages, platform, length);
  ASSERT_TRUE(pattern.has_value());
  EXPECT_EQ(pattern->ops.size(), 8u);
  for (const ms::Op& op : pattern->ops) EXPECT_FALSE(ms::is_transfer(op.kind));
  EXPECT_TRUE(mplan::validate(mt::plan_of(stages, platform, *pattern), profile).empty());
  EXPECT_FALSE(ms::modulo_schedule(stages, platform, 0.999 * length).has_value());
}

TEST(ModuloSchedule, StagesOnTheSameGpuAsTheirNeighbourNeedNoTransfer) {
  std::mt19937 rng(9);
  const madpipe::Profile profile = mt::random_chain(rng, 4);
  // Stages 0 and 1 on GPU 1, stage 2 on GPU 0, stage 3 on GPU 1: links [0,1] used 4 times.
  const auto stages = ms::make_stages(madpipe::ChainCosts(profile), {0, 1, 2, 3}, {1, 1, 0, 1});
  const auto platform = mt::huge_memory_platform(2);
  const auto pattern = ms::modulo_schedule(stages, platform, mt::chain_length(stages, platform));
  ASSERT_TRUE(pattern.has_value());
  int transfers = 0;
  for (const ms::Op& op : pattern->ops) {
    if (!ms::is_transfer(op.kind)) continue;
    ++transfers;
    EXPECT_NE(op.stage, 0);
    EXPECT_EQ(op.link.a, 0);
    EXPECT_EQ(op.link.b, 1);
  }
  EXPECT_EQ(transfers, 4);
  EXPECT_TRUE(mplan::validate(mt::plan_of(stages, platform, *pattern), profile).empty());
}

TEST(ModuloSchedule, ZeroDurationOpsAreNotPlacedInsideBusyIntervals) {
  // Layer 0 (f = 2, b = 0) on GPU 1, layer 1 (f = 1, b = 0) on GPU 0, zero-byte activations.
  // At T = 2: F0 [0, 2), F1 [2, 3), B1 at 3, B0 at 3 = 1 (mod 2), inside F0 of the next period.
  const madpipe::Profile profile = mt::make_chain({2, 1}, {0, 0}, {}, {0, 0}, 0);
  const auto stages = ms::make_stages(madpipe::ChainCosts(profile), {0, 1}, {1, 0});
  const auto platform = mt::huge_memory_platform(2, 1000.0);
  for (double T : {2.0, 2.5, 3.0}) {
    const auto pattern = ms::modulo_schedule(stages, platform, T);
    if (!pattern) continue;  // giving up is allowed, an invalid pattern is not
    const auto violations = mplan::validate(mt::plan_of(stages, platform, *pattern), profile);
    EXPECT_TRUE(violations.empty()) << "T " << T << "\n" << mt::describe(violations);
  }
  // A period of 2 is possible: B0 right at the end of F0.
  EXPECT_TRUE(ms::modulo_schedule(stages, platform, 2.0).has_value());
}
