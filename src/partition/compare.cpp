#include "partition/compare.hpp"

#include "core/chain.hpp"
#include "partition/plan_or_explain.hpp"
#include "partition/planner.hpp"

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

// The order the algorithms plan in under a shared time limit: those of fixed placements first
// (they rarely use their share), the searches last (the time others leave goes to them).
std::vector<std::size_t> planning_order(const std::vector<Algorithm>& algorithms) {
  auto searches = [](Algorithm a) {
    return a == Algorithm::MadPipe      ? 2
           : a == Algorithm::Ilp        ? 3
           : a == Algorithm::Contiguous ? 1
                                        : 0;
  };
  std::vector<std::size_t> order(algorithms.size());
  for (std::size_t a = 0; a < order.size(); ++a) order[a] = a;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    return searches(algorithms[x]) < searches(algorithms[y]);
  });
  return order;
}

}  // namespace

Comparison madpipe::partition::compare_algorithms(const Profile& profile, const Platform& platform,
                                                  const PlannerOptions& options,
                                                  const std::vector<Algorithm>& algorithms,
                                                  const ComparisonSettings& settings) {
  Comparison comparison;
  comparison.lower_bound_ms = lower_bound_period_ms(profile, platform);
  comparison.memory_bound_ms = memory_bound_period_ms(ChainCosts(profile), platform);
  double seconds_left = options.time_limit_s;
  comparison.rows.resize(algorithms.size());
  const std::vector<std::size_t> order = planning_order(algorithms);
  for (std::size_t planned = 0; planned < order.size(); ++planned) {
    const std::size_t a = order[planned];
    PlannerOptions mine = options;
    mine.algorithm = algorithms[a];
    if (settings.progress_of) mine.progress = settings.progress_of(algorithms[a]);
    // A shared limit is split evenly over the algorithms still to plan: what one leaves goes to
    // those after it.
    const double seconds = settings.shared_time_limit
                               ? seconds_left / static_cast<double>(order.size() - planned)
                               : options.time_limit_s;
    comparison.rows[a] = plan_row(profile, platform, mine, seconds, settings.remat_apart);
    seconds_left -= comparison.rows[a].planning_seconds;
    if (settings.on_row) settings.on_row(comparison.rows[a]);
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
    // Against the best bound known for this plan (memory-aware where it keeps every activation).
    row.ratio_to_lower_bound =
        period / std::max(comparison.lower_bound_ms, row.plan.plan.predicted.lower_bound_period_ms);
  }
  return comparison;
}
