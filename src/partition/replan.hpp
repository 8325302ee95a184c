#pragma once

#include "core/profile.hpp"
#include "partition/planner.hpp"
#include "plan/plan.hpp"

#include <limits>
#include <string>
#include <vector>

namespace madpipe::partition {

// What a training run measured for one stage of its plan: the mean compute time of its forwards
// and of its backwards (operation sequences included), without waiting for transfers.
struct MeasuredStage {
  double forward_ms = 0;
  double backward_ms = 0;
  int forwards = 0;  // forwards measured; 0: nothing measured, the plan's times are kept
  int backwards = 0;
};

// Measured over planned time of each stage, forward and backward separately; 1 where either is
// unknown or zero.
struct StageRatio {
  double forward = 1;
  double backward = 1;
};
std::vector<StageRatio> stage_ratios(const plan::Plan& plan,
                                     const std::vector<MeasuredStage>& measured);

// `profile` (the one the plan was made from) with the times of every layer of stage s scaled by
// the ratios of s: the profile the measurements say the model has.
Profile corrected_profile(const Profile& profile, const plan::Plan& plan,
                          const std::vector<MeasuredStage>& measured);

struct ReplanOutcome {
  bool switch_plan = false;
  // The running allocation rescheduled on the measured stage times; infinity if no pattern of
  // it fits any more.
  double current_period_ms = std::numeric_limits<double>::infinity();
  // The best plan for the corrected profile; infinity when none fits.
  double new_period_ms = std::numeric_limits<double>::infinity();
  plan::Plan plan;     // the plan to continue with: the new one, or `current` unchanged
  std::string reason;  // one line: what was compared and what was decided
};

// Plans the corrected profile again and keeps the new plan when its predicted period is at least
// `min_gain` (a fraction) below the running allocation's on the measured times.
ReplanOutcome replan_from_measurements(const Profile& profile, const plan::Plan& current,
                                       const std::vector<MeasuredStage>& measured,
                                       const PlannerOptions& options, double min_gain);

// A table of each stage's planned and measured times and their ratio, for progress output.
std::string format_measurements(const plan::Plan& plan, const std::vector<MeasuredStage>& measured);

}  // namespace madpipe::partition
