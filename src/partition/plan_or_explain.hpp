#pragma once

#include "core/platform.hpp"
#include "core/profile.hpp"
#include "partition/planner.hpp"
#include "plan/plan.hpp"

#include <functional>
#include <string>

namespace madpipe::partition {

// What plan_or_explain() does when nothing fits.
struct Explaining {
  std::string field;  // of the Error: "" (plan, the Python package), "memory" (train)
  // Called with PlanResult::reason before the search for what would fit (it takes a while).
  std::function<void(const std::string& reason)> announce;
};

// make_plan(), then: when nothing fits, throws Error{InvalidInput} whose problem is
// explain_infeasible() within what the time limit left; when plan::validate() finds a violation,
// throws check_planned()'s Error{Internal}. Returns the feasible, valid result.
PlanResult plan_or_explain(const Profile& profile, const Platform& platform,
                           const PlannerOptions& options, const Explaining& explaining = {});

// Throws Error{Internal} naming the first violation of plan::validate(plan, profile): the planner
// produced an invalid plan.
void check_planned(const plan::Plan& plan, const Profile& profile);

}  // namespace madpipe::partition
