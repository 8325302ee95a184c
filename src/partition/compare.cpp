#include "partition/compare.hpp"

#include "partition/plan_or_explain.hpp"

#include <algorithm>

namespace {

using namespace madpipe::partition;

PlanResult checked_plan(const madpipe::Profile& profile, const madpipe::Platform& platform,
                        const PlannerOptions& options) {
  PlanResult result = make_plan(profile, platform, options);
  if (result.feasible) check_planned(result.plan, profile);
  return result;
}

// With `seconds` for the row, shared by its plans.
ComparisonRow plan_row(const madpipe::Profile& profile, const madpipe::Platform& platform,
                       PlannerOptions options, double seconds, bool remat_apart) {
  options.time_limit_s = std::max(1e-3, seconds);
  options.milp.time_limit_s = std::min(options.milp.time_limit_s, options.time_limit_s);
  ComparisonRow row;
  row.algorithm = options.algorithm;
  const RematSettings asked = options.remat;
  if (remat_apart) {
    options.remat.remat = RematStrategy::None;
    options.remat.offload = OffloadStrategy::None;
  }
  row.plan = checked_plan(profile, platform, options);
  row.planning_seconds = row.plan.planning_seconds;
  row.cut_by_time_limit = row.plan.cut_by_time_limit;
  if (remat_apart &&
      (asked.remat != RematStrategy::None || asked.offload != OffloadStrategy::None)) {
    options.remat = asked;
    options.time_limit_s = std::max(1e-3, options.time_limit_s - row.planning_seconds);
    row.remat = checked_plan(profile, platform, options);
    row.planning_seconds += row.remat->planning_seconds;
    row.cut_by_time_limit = row.cut_by_time_limit || row.remat->cut_by_time_limit;
  }
  return row;
}

}  // namespace

Comparison madpipe::partition::compare_algorithms(const Profile& profile, const Platform& platform,
                                                  const PlannerOptions& options,
                                                  const std::vector<Algorithm>& algorithms,
                                                  const ComparisonSettings& settings) {
  Comparison comparison;
  comparison.lower_bound_ms = lower_bound_period_ms(profile, platform);
  double seconds_left = options.time_limit_s;
  for (Algorithm algorithm : algorithms) {
    PlannerOptions mine = options;
    mine.algorithm = algorithm;
    if (settings.progress_of) mine.progress = settings.progress_of(algorithm);
    const double seconds = settings.shared_time_limit ? seconds_left : options.time_limit_s;
    comparison.rows.push_back(plan_row(profile, platform, mine, seconds, settings.remat_apart));
    seconds_left -= comparison.rows.back().planning_seconds;
    if (settings.on_row) settings.on_row(comparison.rows.back());
  }
  for (const ComparisonRow& row : comparison.rows)
    if (row.plan.feasible)
      comparison.best_period_ms =
          std::min(comparison.best_period_ms.value_or(row.plan.plan.predicted.period_ms),
                   row.plan.plan.predicted.period_ms);
  for (ComparisonRow& row : comparison.rows) {
    if (!row.plan.feasible) continue;
    const double period = row.plan.plan.predicted.period_ms;
    row.ratio_to_best = period / *comparison.best_period_ms;
    row.ratio_to_lower_bound = period / comparison.lower_bound_ms;
  }
  return comparison;
}
