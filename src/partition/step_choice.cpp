#include "partition/step_choice.hpp"

#include "core/units.hpp"
#include "plan/step.hpp"
#include "plan/step_ilp.hpp"
#include "solver/solve.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace madpipe::partition {

// Beyond this many ordering variables the step ILP is not solved: CBC rarely closes its gap.
constexpr int kMaxStepIlpBinaries = 20000;

// What is left of the request's time limit, in seconds (infinite without one).
static double seconds_left(const PlannerOptions& options,
                           std::chrono::steady_clock::time_point started) {
  if (!std::isfinite(options.time_limit_s)) return options.time_limit_s;
  return options.time_limit_s -
         std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

void keep_baseline_step_if_shorter(const Profile& profile, const Platform& platform,
                                   const PlannerOptions& options,
                                   std::chrono::steady_clock::time_point started,
                                   PlanResult& result) {
  for (const Algorithm algorithm :
       {Algorithm::ZbH1, Algorithm::ZbV, Algorithm::Interleaved, Algorithm::OneFOneB}) {
    if (!result.feasible || !result.plan.predicted.step) return;
    PlannerOptions baseline_options = options;
    baseline_options.algorithm = algorithm;
    baseline_options.time_limit_s = seconds_left(options, started);
    if (baseline_options.time_limit_s <= 0) return;
    baseline_options.progress = nullptr;
    PlanResult baseline = make_plan(profile, platform, baseline_options);
    if (!baseline.feasible || !baseline.plan.predicted.step) continue;
    const double ours = result.plan.predicted.step->time_ms;
    const double theirs = baseline.plan.predicted.step->time_ms;
    if (!(theirs < ours * (1 - 1e-9))) continue;
    baseline.plan.algorithm = to_string(Algorithm::MadPipe);
    result.plan = std::move(baseline.plan);
    result.notes.push_back(std::string(to_string(algorithm)) +
                           "'s partition and schedule give a shorter step, " + format_ms(theirs) +
                           ", than the best plan by period, " + format_ms(ours) + ": kept");
  }
}

void solve_the_step(const PlannerOptions& options, std::chrono::steady_clock::time_point started,
                    PlanResult& result) {
  if (!result.feasible || !result.plan.predicted.step || options.scheduler != Scheduler::Ilp)
    return;
  plan::Plan& plan = result.plan;
  const int m = plan.predicted.step->micro_batches;
  const double exchange = plan.predicted.tied_exchange_ms;
  const double step_ms = plan.predicted.step->time_ms;
  if (step_ms <= plan::step_lower_bound_ms(plan, m) * (1 + 1e-9)) return;
  const std::string what = "the step ILP";
  const int binaries = plan::step_ilp_binaries(plan, m);
  if (binaries > kMaxStepIlpBinaries) {
    result.notes.push_back(what + " is not solved: " + std::to_string(binaries) +
                           " ordering variables, more than " + std::to_string(kMaxStepIlpBinaries) +
                           " (fewer micro-batches per step)");
    return;
  }
  plan::StepIlpOptions ilp;
  ilp.backend =
      !options.milp.backend.empty() ? options.milp.backend : solver::built_backends().front();
  ilp.solve.time_limit_s = std::min(options.milp.time_limit_s, seconds_left(options, started));
  ilp.solve.relative_gap = options.milp.relative_gap;
  ilp.solve.threads = options.milp.threads;
  ilp.solve.log = options.milp.log;
  if (!(ilp.solve.time_limit_s > 0)) {
    result.notes.push_back(what + " is not solved: the time limit is spent");
    return;
  }
  ilp.memory_budget_bytes = plan.predicted.memory_bytes;
  const plan::StepIlpResult solved =
      plan::solve_step_ilp(plan, m, ilp, plan::simulate_step(plan, m));
  std::string note = what + " (" + ilp.backend + ", " +
                     std::string(solver::to_string(solved.status)) + ", " +
                     std::to_string(binaries) + " ordering variables): ";
  if (!solved.order) {
    result.notes.push_back(note + "no solution" +
                           (solved.message.empty() ? "" : " (" + solved.message + ")") +
                           "; the step stays " + format_ms(step_ms));
    return;
  }
  plan::Plan ordered = plan;
  ordered.step_order = solved.order;
  plan::predict_step(ordered, m);
  const bool shorter = ordered.step_order && ordered.predicted.step->time_ms < step_ms * (1 - 1e-9);
  if (shorter) plan = std::move(ordered);
  if (shorter)
    note += "its order gives a shorter step, " + format_ms(plan.predicted.step->time_ms) +
            ", than " + format_ms(step_ms) + ": kept";
  else if (!ordered.step_order)
    note += "its order, a step of " + format_ms(solved.step_ms + exchange) + ", would hold more " +
            "than the GPUs' memory with the runtime's messages; the step stays " +
            format_ms(step_ms);
  else
    note += "the step stays " + format_ms(step_ms);
  note +=
      "; no step of these stages within their predicted memory, each stage running its "
      "micro-batches in order, is shorter than " +
      format_ms(std::max(solved.bound_ms + exchange, plan::step_lower_bound_ms(plan, m)));
  result.notes.push_back(note);
}

}  // namespace madpipe::partition
