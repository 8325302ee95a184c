#include "plan/time_breakdown.hpp"

#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

namespace mplan = madpipe::plan;
namespace mt = madpipe::testing;

namespace {
// Layer 0 (1 + 2 ms) on GPU 0, layer 1 (2 + 4 ms) on GPU 1, one micro-batch every 8 ms.
mplan::Plan two_stage_plan() {
  const madpipe::Profile profile = mt::make_chain({1, 2}, {2, 4});
  return mt::chain_plan(profile, {0, 1}, {0, 1}, mt::small_platform(2), 8.0);
}
}  // namespace

TEST(TimeBreakdown, SplitsThePeriodOfEveryGpu) {
  const madpipe::Profile profile = mt::make_chain({1, 2}, {2, 4});
  const mplan::TimeBreakdown time = mplan::time_breakdown(two_stage_plan(), profile);
  EXPECT_DOUBLE_EQ(time.useful, 9.0 / 16);  // 3 + 6 ms of the 2 x 8
  EXPECT_DOUBLE_EQ(time.recomputation, 0.0);
  EXPECT_DOUBLE_EQ(time.imbalance, 3.0 / 16);  // GPU 0 lacks 3 ms of GPU 1's 6
  EXPECT_DOUBLE_EQ(time.waiting, 4.0 / 16);    // GPU 1 idles 2 ms of 8, as does GPU 0
  ASSERT_EQ(time.busy.size(), 2u);
  EXPECT_DOUBLE_EQ(time.busy[0], 3.0 / 8);
  EXPECT_DOUBLE_EQ(time.busy[1], 6.0 / 8);
}

TEST(TimeBreakdown, CountsWhatAStageRecomputes) {
  const madpipe::Profile profile = mt::make_chain({1, 2}, {2, 4});
  mplan::Plan plan = two_stage_plan();
  plan.stages[1].backward_ms += 1;  // its backward runs its forward again
  const mplan::TimeBreakdown time = mplan::time_breakdown(plan, profile);
  EXPECT_DOUBLE_EQ(time.useful, 9.0 / 16);
  EXPECT_DOUBLE_EQ(time.recomputation, 1.0 / 16);
  EXPECT_DOUBLE_EQ(time.imbalance, 4.0 / 16);
  EXPECT_DOUBLE_EQ(time.waiting, 2.0 / 16);
  EXPECT_DOUBLE_EQ(time.useful + time.recomputation + time.imbalance + time.waiting, 1.0);
}

TEST(TimeBreakdown, KPeriodicPlansUseTheNormalizedPeriod) {
  const madpipe::Profile profile = mt::make_chain({1, 2}, {2, 4});
  const mplan::Plan plan = mt::repeated(two_stage_plan(), 2);
  const mplan::TimeBreakdown time = mplan::time_breakdown(plan, profile);
  EXPECT_DOUBLE_EQ(time.useful, 9.0 / 16);
  EXPECT_DOUBLE_EQ(time.waiting, 4.0 / 16);
}
