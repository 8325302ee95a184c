#pragma once

// The search behind make_plan(), one function per algorithm, sharing one request's time budget.
// Internal to the partition layer: callers use partition/planner.hpp.

#include "core/chain.hpp"
#include "core/platform.hpp"
#include "partition/allocation.hpp"
#include "partition/planner.hpp"
#include "partition/planning_budget.hpp"
#include "partition/stage_options.hpp"
#include "plan/plan.hpp"
#include "schedule/pattern.hpp"
#include "schedule/stage.hpp"

#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace madpipe::partition {

// A scheduled allocation.
struct Candidate {
  Allocation allocation;
  std::vector<schedule::Stage> stages;
  schedule::Pattern pattern;
  std::string method;
  std::optional<plan::SolverInfo> solver;
};

// One planning request: its time budget (deadline, phases, progress) and the notes for the user.
class PlanningContext {
 public:
  // Plans on `platform` are compared by their period with the exchange of tied weights spread
  // over `micro_batches_per_step` (0: the platform's GPUs).
  PlanningContext(PlanningBudget& budget, const Platform& platform, int micro_batches_per_step)
      : budget_(budget), platform_(platform), micro_batches_per_step_(micro_batches_per_step) {}

  // The per-micro-batch share of the step's exchange of the tied weights that lie on several of
  // the stages' GPUs; 0 when none does.
  double exchange_share_ms(const std::vector<schedule::Stage>& stages) const;
  // What plans are compared by: the normalized period plus that share.
  double period_of(const Candidate& candidate) const;

  PlanningBudget& budget() { return budget_; }
  void enter(const std::string& phase) { budget_.enter(phase); }
  void detail(const std::string& line) { budget_.detail(line); }
  // A note is kept for PlanResult::notes and shown as a detail line.
  void note(const std::string& line);
  // Whether the phase that may use `share` of the time limit (the DPs half, scheduling three
  // quarters, the local search nine tenths, the ILPs all) is out of time.
  bool expired(double share = 1.0) const { return budget_.used(share); }
  // For the DPs, the schedule search and the local search.
  std::function<void(const std::string&)> detail_sink();
  std::function<bool()> out_of_time(double share = 1.0);

  const std::vector<std::string>& notes() const { return notes_; }

  // The period of a plan that an earlier search of this request found (plan_without_and_with's
  // first run, set by EarlierBestScope; +inf when none): the stage ILPs skip what cannot beat it.
  double earlier_best_ms() const { return earlier_best_ms_; }

  // Candidate allocations given to the schedule search, and those it searched to the end (not
  // cut by the time limit): PlanResult::allocations_total and allocations_scheduled.
  void count_allocation(bool searched_fully) {
    ++allocations_total_;
    if (searched_fully) ++allocations_scheduled_;
  }
  int allocations_total() const { return allocations_total_; }
  int allocations_scheduled() const { return allocations_scheduled_; }

 private:
  friend class EarlierBestScope;
  PlanningBudget& budget_;
  Platform platform_;
  int micro_batches_per_step_ = 0;
  std::vector<std::string> notes_;
  int allocations_total_ = 0;
  int allocations_scheduled_ = 0;
  double earlier_best_ms_ = std::numeric_limits<double>::infinity();
};

// Sets a context's earlier best period for its lifetime (plan_without_and_with's second run).
class EarlierBestScope {
 public:
  EarlierBestScope(PlanningContext& context, double period_ms) : context_(context) {
    context_.earlier_best_ms_ = period_ms;
  }
  ~EarlierBestScope() { context_.earlier_best_ms_ = std::numeric_limits<double>::infinity(); }
  EarlierBestScope(const EarlierBestScope&) = delete;
  EarlierBestScope& operator=(const EarlierBestScope&) = delete;

 private:
  PlanningContext& context_;
};

// Plans with options.algorithm (not ilp), with `remat` or plainly (nullptr); nullopt when no plan
// fits.
std::optional<Candidate> plan_with_algorithm(const ChainCosts& costs, const Platform& platform,
                                             const PlannerOptions& options,
                                             PlanningContext& context, StageOptions* remat);

// Thesis ch. 6: the full ILP, warm-started from MadPipe's best 1-periodic plan (planned without
// and with `remat`, the former only when `plain_can_fit`).
std::optional<Candidate> plan_full_ilp(const ChainCosts& costs, const Platform& platform,
                                       const PlannerOptions& options, PlanningContext& context,
                                       StageOptions& remat, bool plain_can_fit);

// Plans without per-stage rematerialization/offloading (unless `plain_can_fit` is false) and,
// when `remat` allows them, with them, and keeps the better plan (the plain one at an equal
// period): the options change which allocations the DPs estimate best, so planning once without
// them makes the result never worse than plain planning. The plain search goes first unless
// `remat_first`; under a time limit the second search gets what the first leaves.
std::optional<Candidate> plan_without_and_with(
    const std::function<std::optional<Candidate>(StageOptions*)>& plan, StageOptions& remat,
    bool plain_can_fit, bool remat_first, PlanningContext& context);

// Whether memory_bound_period_ms is more than 1.5 times lower_bound_period_ms: no plan that
// keeps every activation comes near what compute allows, so rematerialization is searched first.
bool memory_binds_plain_plans(const ChainCosts& costs, const Platform& platform);

}  // namespace madpipe::partition
