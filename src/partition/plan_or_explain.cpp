#include "partition/plan_or_explain.hpp"

#include "core/error.hpp"
#include "core/exit_codes.hpp"
#include "partition/infeasible.hpp"
#include "plan/validate.hpp"

#include <algorithm>
#include <vector>

madpipe::partition::PlanResult madpipe::partition::plan_or_explain(const Profile& profile,
                                                                   const Platform& platform,
                                                                   const PlannerOptions& options,
                                                                   const Explaining& explaining) {
  PlanResult result = make_plan(profile, platform, options);
  if (!result.feasible) {
    if (explaining.announce) explaining.announce(result.reason);
    PlannerOptions left = options;
    left.time_limit_s = std::max(0.0, options.time_limit_s - result.planning_seconds);
    throw NoPlanFits(explaining.field, explain_infeasible(result.reason, profile, platform, left));
  }
  check_planned(result.plan, profile);
  return result;
}

void madpipe::partition::check_planned(const plan::Plan& plan, const Profile& profile) {
  const std::vector<plan::Violation> violations = plan::validate(plan, profile);
  if (violations.empty()) return;
  const plan::Violation& first = violations.front();
  throw Error(ErrorKind::Internal, "", first.field,
              first.problem + " (the planner produced an invalid plan, " +
                  std::to_string(violations.size()) + " violation(s); please report it)");
}
