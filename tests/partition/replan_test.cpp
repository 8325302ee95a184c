// Re-planning from measured stage times: ratios, the corrected profile, and the decision to switch.

#include "partition/replan.hpp"

#include "core/error.hpp"
#include "plan/validate.hpp"
#include "support/test_support.hpp"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

namespace mp = madpipe::partition;
namespace mt = madpipe::testing;

namespace {

// What a run of `plan` measures when the model's real layer times are `truth`.
std::vector<mp::MeasuredStage> measure(const madpipe::plan::Plan& plan,
                                       const madpipe::Profile& truth) {
  std::vector<mp::MeasuredStage> measured;
  for (const auto& stage : plan.stages) {
    mp::MeasuredStage m;
    for (int l = stage.first_layer; l <= stage.last_layer; ++l) {
      m.forward_ms += truth.layers[l].forward_ms;
      m.backward_ms += truth.layers[l].backward_ms;
    }
    m.forwards = m.backwards = 8;
    measured.push_back(m);
  }
  return measured;
}

mp::PlannerOptions contiguous() {
  mp::PlannerOptions options;
  options.algorithm = mp::Algorithm::Contiguous;
  return options;
}

// Four equal layers, but the profile says the last one is 20 times slower.
struct Skewed {
  madpipe::Profile truth = mt::make_chain({1, 1, 1, 1}, {2, 2, 2, 2});
  madpipe::Profile believed = mt::make_chain({1, 1, 1, 20}, {2, 2, 2, 40});
  madpipe::Platform platform = mt::huge_memory_platform(2);
};

}  // namespace

TEST(Replan, RatiosAreMeasuredOverPlannedPerStage) {
  Skewed s;
  const auto plan = mp::make_plan(s.believed, s.platform, contiguous()).plan;
  ASSERT_EQ(plan.stages.size(), 2u);
  ASSERT_EQ(plan.stages[1].first_layer, 3);  // the "slow" layer alone
  const auto ratios = mp::stage_ratios(plan, measure(plan, s.truth));
  EXPECT_DOUBLE_EQ(ratios[0].forward, 1.0);
  EXPECT_DOUBLE_EQ(ratios[0].backward, 1.0);
  EXPECT_DOUBLE_EQ(ratios[1].forward, 1.0 / 20);
  EXPECT_DOUBLE_EQ(ratios[1].backward, 2.0 / 40);
}

TEST(Replan, CorrectedProfileRecoversTheTruthWhenStagesAreSingleLayersOrUniform) {
  Skewed s;
  const auto plan = mp::make_plan(s.believed, s.platform, contiguous()).plan;
  const madpipe::Profile corrected =
      mp::corrected_profile(s.believed, plan, measure(plan, s.truth));
  for (std::size_t l = 0; l < s.truth.layers.size(); ++l) {
    EXPECT_DOUBLE_EQ(corrected.layers[l].forward_ms, s.truth.layers[l].forward_ms) << l;
    EXPECT_DOUBLE_EQ(corrected.layers[l].backward_ms, s.truth.layers[l].backward_ms) << l;
  }
  EXPECT_EQ(corrected.layers[3].weight_bytes, s.believed.layers[3].weight_bytes);
}

TEST(Replan, UnmeasuredStagesKeepThePlannedTimes) {
  Skewed s;
  const auto plan = mp::make_plan(s.believed, s.platform, contiguous()).plan;
  auto measured = measure(plan, s.truth);
  measured[1].forwards = measured[1].backwards = 0;
  const madpipe::Profile corrected = mp::corrected_profile(s.believed, plan, measured);
  EXPECT_DOUBLE_EQ(corrected.layers[3].forward_ms, 20);
}

TEST(Replan, SwitchesToABalancedPlanWhenTheProfileWasWrong) {
  Skewed s;
  const auto plan = mp::make_plan(s.believed, s.platform, contiguous()).plan;
  const auto outcome =
      mp::replan_from_measurements(s.believed, plan, measure(plan, s.truth), contiguous(), 0.05);
  EXPECT_TRUE(outcome.switch_plan) << outcome.reason;
  EXPECT_DOUBLE_EQ(outcome.current_period_ms, 9.0);  // three layers of 1 + 2 on rank 0
  EXPECT_DOUBLE_EQ(outcome.new_period_ms, 6.0);      // two and two
  ASSERT_EQ(outcome.plan.stages.size(), 2u);
  EXPECT_EQ(outcome.plan.stages[1].first_layer, 2);
  EXPECT_TRUE(madpipe::plan::validate(outcome.plan).empty());
  EXPECT_NE(outcome.reason.find("switching to the new plan"), std::string::npos) << outcome.reason;
}

TEST(Replan, KeepsThePlanWhenEveryStageIsEquallySlower) {
  const madpipe::Profile profile = mt::make_chain({1, 1, 1, 1}, {2, 2, 2, 2});
  const madpipe::Platform platform = mt::huge_memory_platform(2);
  const auto plan = mp::make_plan(profile, platform, contiguous()).plan;
  auto measured = measure(plan, profile);
  for (auto& m : measured) {
    m.forward_ms *= 2;
    m.backward_ms *= 2;
  }
  const auto outcome = mp::replan_from_measurements(profile, plan, measured, contiguous(), 0.05);
  EXPECT_FALSE(outcome.switch_plan) << outcome.reason;
  EXPECT_DOUBLE_EQ(outcome.current_period_ms, 12.0);
  EXPECT_EQ(outcome.plan.stages, plan.stages);
  EXPECT_NE(outcome.reason.find("keeping the running plan (a switch needs a gain of 5%)"),
            std::string::npos)
      << outcome.reason;
}

TEST(Replan, AGainBelowTheThresholdKeepsThePlan) {
  Skewed s;
  const auto plan = mp::make_plan(s.believed, s.platform, contiguous()).plan;
  // 9 ms against 6 ms is a gain of a third: not enough when half is asked for.
  const auto outcome =
      mp::replan_from_measurements(s.believed, plan, measure(plan, s.truth), contiguous(), 0.5);
  EXPECT_FALSE(outcome.switch_plan) << outcome.reason;
}

TEST(Replan, MeasurementsMustMatchThePlan) {
  Skewed s;
  const auto plan = mp::make_plan(s.believed, s.platform, contiguous()).plan;
  try {
    mp::stage_ratios(plan, {mp::MeasuredStage{}});
    FAIL() << "expected an error";
  } catch (const madpipe::Error& e) {
    EXPECT_NE(std::string(e.what()).find("1 stages measured but the plan has 2"), std::string::npos)
        << e.what();
  }
}

TEST(Replan, FormatShowsPlannedMeasuredAndRatio) {
  Skewed s;
  const auto plan = mp::make_plan(s.believed, s.platform, contiguous()).plan;
  const std::string table = mp::format_measurements(plan, measure(plan, s.truth));
  EXPECT_NE(table.find("x0.05"), std::string::npos) << table;
  EXPECT_NE(table.find("20.000"), std::string::npos) << table;
}
