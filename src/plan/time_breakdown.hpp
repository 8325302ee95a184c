#pragma once

#include "core/profile.hpp"
#include "plan/plan.hpp"

#include <vector>

namespace madpipe::plan {

// Where the GPUs' time goes in one period of a plan, as fractions of P x period (they add up to
// 1). `useful` is the profile's compute of the layers; `recomputation` what rematerialization
// adds to it; `imbalance` what the other GPUs lack of the busiest one's compute; `waiting` what
// the busiest GPU itself idles: transfers and dependencies it waits for.
struct TimeBreakdown {
  double useful = 0;
  double recomputation = 0;
  double imbalance = 0;
  double waiting = 0;
  std::vector<double> busy;  // per GPU: its compute (recomputation included) / period
};

// The breakdown of `plan` (its stages' layers timed by `profile`). All zero for a plan without a
// period.
TimeBreakdown time_breakdown(const Plan& plan, const Profile& profile);

}  // namespace madpipe::plan
