#pragma once

// Given the step's micro-batches, what madpipe does besides searching by period: it keeps a
// baseline's plan whose step is shorter, and with --scheduler ilp it solves the step ILP.

#include "core/platform.hpp"
#include "core/profile.hpp"
#include "partition/planner.hpp"

#include <chrono>

namespace madpipe::partition {

// The plan of each baseline (zb-h1, zb-v, interleaved, 1f1b: its partition and schedule, and its
// step as the baseline runs it) replaces `result` where its step is shorter, with a note, in what
// is left of options.time_limit_s since `started`.
void keep_baseline_step_if_shorter(const Profile& profile, const Platform& platform,
                                   const PlannerOptions& options,
                                   std::chrono::steady_clock::time_point started,
                                   PlanResult& result);

// With Scheduler::Ilp: the step ILP (plan/step_ilp.hpp) over every op of the step on the plan's
// stages, within the plan's predicted memory, in what is left of the time limit (at most
// options.milp.time_limit_s). Where its order gives a shorter step that fits, the plan runs it
// (Plan::step_order). A note gives the ILP's bound, or why it was not solved; nothing is solved
// where the step already meets step_lower_bound_ms().
void solve_the_step(const PlannerOptions& options, std::chrono::steady_clock::time_point started,
                    PlanResult& result);

}  // namespace madpipe::partition
