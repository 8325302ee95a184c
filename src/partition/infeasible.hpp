#pragma once

#include "core/platform.hpp"
#include "core/profile.hpp"
#include "partition/planner.hpp"

#include <string>

namespace madpipe::partition {

// Why no plan fits and what would: the smallest memory per GPU for which the chosen algorithm
// finds a plan (algorithm_memory_floor(): no planning, a fraction of a second), the stage that
// needs it and how exact it is, the same with per-stage rematerialization when it is not on, and
// the largest layer when it alone outgrows a GPU (a stage cannot be smaller than one layer). One
// paragraph, starting with `reason` (PlanResult::reason).
std::string explain_infeasible(const std::string& reason, const Profile& profile,
                               const Platform& platform, const PlannerOptions& options);

}  // namespace madpipe::partition
