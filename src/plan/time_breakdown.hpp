#pragma once

#include "core/profile.hpp"
#include "plan/plan.hpp"

#include <vector>

namespace madpipe::plan {

// The breakdown (plan.hpp) of `plan` over its predicted period_ms (its stages' layers timed by
// `profile`). All zero for a plan without a period.
TimeBreakdown time_breakdown(const Plan& plan, const Profile& profile);

}  // namespace madpipe::plan
