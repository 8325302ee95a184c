#include "schedule/period_bound.hpp"

#include "core/platform.hpp"
#include "schedule/memory.hpp"
#include "schedule/search.hpp"
#include "schedule/stage.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace ms = madpipe::schedule;
namespace mt = madpipe::testing;

namespace {

// Two stages of F = 1 and B = 2 ms keeping 10 bytes per micro-batch, nothing else in memory:
// stage 0's round trip is 6 ms, stage 1's 3 ms.
std::vector<ms::Stage> two_stages() {
  return {mt::hand_stage(0, 0, 1.0, 2.0, 0, 10), mt::hand_stage(1, 1, 1.0, 2.0, 0, 10)};
}

TEST(MemoryPeriodBound, IsTheRoundTripTimesTheStoredBytesOverTheRoom) {
  const auto stages = two_stages();
  // 20 bytes: GPU 0 needs 10 x 6 / 20 = 3 ms, GPU 1 10 x 3 / 20 = 1.5 ms.
  EXPECT_NEAR(ms::memory_period_bound_ms(stages, mt::make_platform(2, 20, 1e9, 1)), 3.0, 1e-5);
  // 15 bytes: 4 ms; the search finds 6 (one micro-batch in flight on stage 0 at a time).
  const madpipe::Platform tight = mt::make_platform(2, 15, 1e9, 1);
  EXPECT_NEAR(ms::memory_period_bound_ms(stages, tight), 4.0, 1e-5);
  const auto found = ms::schedule_under_memory(stages, tight);
  ASSERT_TRUE(found.has_value());
  EXPECT_NEAR(found->pattern.normalized_period_ms(), 6.0, 1e-6);
  // Static memory alone beyond the limit: no period fits.
  std::vector<ms::Stage> heavy = stages;
  heavy[0].weight_bytes = 100;
  EXPECT_TRUE(std::isinf(ms::memory_period_bound_ms(heavy, tight)));
}

// Every pattern the search finds under memory has a period per micro-batch no shorter than the
// bound, which also rises above the busiest resource's load when memory binds.
TEST(MemoryPeriodBound, NoPatternThatFitsBeatsIt) {
  std::mt19937 rng(41);
  int binding = 0, checked = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const bool contiguous = trial % 2 == 0;
    const int layers = 3 + trial % 6;
    const int gpus = contiguous ? layers : 2 + trial % 3;
    const int n = contiguous ? layers : 2 + static_cast<int>(rng() % (layers - 1));
    const auto stages = mt::random_stages(rng, layers, n, gpus, contiguous);
    madpipe::Platform platform = mt::make_platform(gpus, mt::kHugeMemory, 5e7, 1);
    std::int64_t largest_static = 0, largest_stored = 0;
    for (int g = 0; g < gpus; ++g)
      largest_static = std::max(largest_static, ms::static_memory(stages, g, platform).total());
    for (const ms::Stage& stage : stages)
      largest_stored = std::max(largest_stored, stage.stored_bytes);
    // Room for 1 to 4 micro-batches of the largest stage beside the largest static memory.
    platform.memory_bytes = largest_static + (1 + trial % 4) * largest_stored;
    const double bound = ms::memory_period_bound_ms(stages, platform);
    const auto found = ms::schedule_under_memory(stages, platform);
    if (!found) continue;
    ++checked;
    EXPECT_LE(bound, found->pattern.normalized_period_ms() * (1 + 1e-9)) << "trial " << trial;
    if (bound > ms::busiest_resource_ms(stages, platform) * (1 + 1e-6)) ++binding;
  }
  EXPECT_GT(checked, 25);
  EXPECT_GT(binding, 5);
}

}  // namespace

namespace {
// An allocation whose memory bound cannot beat the period to beat is given up before any
// pattern is generated.
TEST(MemoryPeriodBound, TheSearchGivesUpAtOnceWhereItCannotBeat) {
  const auto stages = two_stages();
  const madpipe::Platform tight = mt::make_platform(2, 15, 1e9, 1);  // bound 4 ms, busiest 3 ms
  ms::ScheduleSearchStats stats;
  ms::ScheduleSearchOptions options;
  options.stats = &stats;
  options.give_up_at_ms = 3.5;  // above the busiest resource, below the memory bound
  EXPECT_FALSE(ms::schedule_under_memory(stages, tight, options).has_value());
  EXPECT_EQ(stats.patterns_generated, 0);
  options.give_up_at_ms = 7.0;  // 6 ms is found
  EXPECT_TRUE(ms::schedule_under_memory(stages, tight, options).has_value());
  EXPECT_GT(stats.patterns_generated, 0);
}
}  // namespace
