#pragma once

#include "core/platform.hpp"
#include "core/profile.hpp"
#include "partition/planner.hpp"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace madpipe::partition {

// One algorithm's outcome. Every feasible plan passed plan::validate() (check_planned()).
struct ComparisonRow {
  Algorithm algorithm = Algorithm::MadPipe;
  PlanResult plan;                  // without rematerialization when remat_apart
  std::optional<PlanResult> remat;  // with it, when asked and remat_apart
  double planning_seconds = 0;      // of both plans
  bool cut_by_time_limit = false;   // of either plan
  // Of `plan`'s period, when feasible: to the shortest period of the comparison and to
  // lower_bound_period_ms().
  std::optional<double> ratio_to_best;
  std::optional<double> ratio_to_lower_bound;
};

// How compare_algorithms() shares out its work.
struct ComparisonSettings {
  // True (`madpipe compare`): options.time_limit_s bounds the whole comparison. The algorithms
  // of fixed placements plan first, then contiguous, madpipe and ilp; each gets an even share of
  // what is left, so the time one does not use goes to the searches after it. False (the Python
  // package): each algorithm gets all of it, in the order asked.
  bool shared_time_limit = true;
  // True (`madpipe compare`): with rematerialization or offloading asked, each algorithm plans
  // first without them, then with them; the ratios are those of the plans without. False: one
  // plan per algorithm, with the options as they are.
  bool remat_apart = true;
  // The progress callback of an algorithm's planning; none: silent.
  std::function<std::function<void(const std::string&)>(Algorithm)> progress_of;
  // Called after each algorithm, in the order they plan (see shared_time_limit).
  std::function<void(const ComparisonRow&)> on_row;
};

struct Comparison {
  double lower_bound_ms = 0;  // lower_bound_period_ms(profile, platform)
  // memory_bound_period_ms: plans that keep every activation are no faster.
  double memory_bound_ms = 0;
  std::optional<double> best_period_ms;
  std::vector<ComparisonRow> rows;  // one per algorithm, in the order asked
};

// Plans `profile` on `platform` with each algorithm (options.algorithm is ignored), as
// `madpipe compare` does.
Comparison compare_algorithms(const Profile& profile, const Platform& platform,
                              const PlannerOptions& options,
                              const std::vector<Algorithm>& algorithms,
                              const ComparisonSettings& settings = {});

}  // namespace madpipe::partition
