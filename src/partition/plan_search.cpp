#include "partition/plan_search.hpp"

#include "core/error.hpp"
#include "core/units.hpp"
#include "partition/backward_splits.hpp"
#include "partition/contiguous_dp.hpp"
#include "partition/full_ilp.hpp"
#include "partition/loop_placements.hpp"
#include "partition/madpipe_dp.hpp"
#include "partition/refine.hpp"
#include "partition/tied_placement.hpp"
#include "schedule/gpipe.hpp"
#include "schedule/ilp_schedule.hpp"
#include "schedule/memory.hpp"
#include "schedule/one_f_one_b.hpp"
#include "schedule/period_bound.hpp"
#include "schedule/retime.hpp"
#include "schedule/search.hpp"
#include "schedule/shared_weights.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <iomanip>
#include <limits>
#include <sstream>

namespace mp = madpipe::partition;
namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;

void mp::PlanningContext::note(const std::string& line) {
  notes_.push_back(line);
  budget_.detail(line);
}

std::function<void(const std::string&)> mp::PlanningContext::detail_sink() {
  return [this](const std::string& line) { budget_.detail(line); };
}

std::function<bool()> mp::PlanningContext::out_of_time(double share) {
  return [this, share] { return budget_.used(share); };
}

// Shares of the time limit each phase may run until: what is left goes to the phases after it.
constexpr double kDpShare = 0.5;
constexpr double kScheduleShare = 0.75;
constexpr double kRefineShare = 0.9;
constexpr double kSplitChoiceShare = 0.93;
constexpr double kInfinity = std::numeric_limits<double>::infinity();
constexpr int kSplitChoiceEvaluations = 60;
// Where no plan that keeps every activation comes within this factor of the compute bound,
// per-stage rematerialization is planned first, so that a time limit cuts the plain search:
// recomputing every forward costs about a third more (a backward takes about two forwards), so
// beyond 1.5 times the bound recomputation is the likelier way to a short period.
constexpr double kRematFirstBoundRatio = 1.5;

// The backend the ILPs use, or "" when none is built and none was asked for.
static std::string milp_backend(const mp::MilpSettings& milp, bool required,
                                const std::string& what) {
  using namespace madpipe;
  if (!milp.backend.empty()) {
    solver::make_backend(milp.backend);  // before any work: an unknown name fails at once
    return milp.backend;
  }
  const std::vector<std::string> built = solver::built_backends();
  if (!built.empty()) return built.front();
  if (required)
    throw Error(ErrorKind::Unsupported, "", "solver",
                what +
                    " needs a MILP solver, and this build has none (install coinor-libcbc-dev "
                    "or libglpk-dev and rebuild)");
  return "";
}

static madpipe::solver::SolveOptions solve_options(const mp::MilpSettings& milp) {
  madpipe::solver::SolveOptions solve;
  solve.time_limit_s = milp.time_limit_s;
  solve.relative_gap = milp.relative_gap;
  solve.threads = milp.threads;
  solve.log = milp.log;
  return solve;
}

static mplan::SolverInfo solver_info(const madpipe::solver::SolveResult& result) {
  mplan::SolverInfo info;
  info.backend = result.backend;
  info.status = std::string(madpipe::solver::to_string(result.status));
  info.objective = std::isfinite(result.objective) ? result.objective : 0;
  info.bound = std::isfinite(result.bound) ? result.bound : 0;
  info.gap = std::isfinite(result.gap) ? result.gap : 0;
  info.seconds = result.seconds;
  return info;
}

static std::string describe_solve(const madpipe::solver::SolveResult& result) {
  std::ostringstream line;
  line << madpipe::solver::to_string(result.status) << " after " << std::fixed
       << std::setprecision(1) << result.seconds << " s" << std::defaultfloat;
  if (result.has_solution() || std::isfinite(result.objective)) {
    line << ", period " << madpipe::format_ms(result.objective);
    if (std::isfinite(result.gap) && result.gap > 0)
      line << ", gap " << std::fixed << std::setprecision(2) << 100 * result.gap << "%"
           << std::defaultfloat;
  }
  if (!result.message.empty()) line << " (" << result.message << ")";
  return line.str();
}

// An ILP's time limit within what is left. Under a request time limit the solver gets three
// quarters of it: CBC counts CPU seconds and runs past its limit in preprocessing.
static double ilp_seconds(double seconds, mp::PlanningContext& context) {
  return context.budget().has_limit() ? std::min(seconds, 0.75 * context.budget().seconds_left())
                                      : seconds;
}

// Under a request time limit, a solver still running at its end is stopped.
static double wall_limit(mp::PlanningContext& context) {
  return context.budget().has_limit() ? std::max(0.5, context.budget().seconds_left()) : 0;
}

double mp::PlanningContext::exchange_share_ms(const std::vector<schedule::Stage>& stages) const {
  const double exchange = schedule::tied_exchange_ms(stages, platform_);
  if (exchange <= 0) return 0;
  return exchange / (micro_batches_per_step_ > 0 ? micro_batches_per_step_ : platform_.gpus);
}

double mp::PlanningContext::period_of(const Candidate& candidate) const {
  return candidate.pattern.normalized_period_ms() + exchange_share_ms(candidate.stages);
}

static void keep_better(std::optional<mp::Candidate>& best, mp::Candidate candidate,
                        mp::PlanningContext& context) {
  if (!best || context.period_of(candidate) < context.period_of(*best) * (1 - 1e-9)) {
    context.budget().improved(context.period_of(candidate));
    best = std::move(candidate);
  }
}

// What --remat and --offload add to a stage, for progress lines and cut notes.
static std::string stage_options_name(const mp::RematSettings& settings) {
  const bool remat = settings.remat != mp::RematStrategy::None;
  const bool offload = settings.offload != mp::OffloadStrategy::None;
  if (remat && offload) return "per-stage rematerialization and offloading";
  return offload ? "per-stage offloading" : "per-stage rematerialization";
}

std::optional<mp::Candidate> mp::plan_without_and_with(
    const std::function<std::optional<Candidate>(StageOptions*)>& plan, StageOptions& remat,
    bool plain_can_fit, bool remat_first, PlanningContext& context) {
  if (!remat.enabled()) return plain_can_fit ? plan(nullptr) : std::nullopt;
  const std::string name = stage_options_name(remat.settings());
  std::vector<StageOptions*> runs{&remat};
  if (plain_can_fit) runs.insert(remat_first ? runs.end() : runs.begin(), nullptr);
  std::optional<Candidate> best;
  for (std::size_t run = 0; run < runs.size(); ++run) {
    StageOptions* options = runs[run];
    const std::string planning = std::string("planning ") + (options ? "with " : "without ") + name;
    // A second run costs, with the options, a ROTOR solve per stage chain, which no deadline
    // interrupts: with a plan and less than a tenth of the time left, it is cut.
    if (run > 0 && best && context.expired(0.9)) {
      context.budget().cut(planning);
      break;
    }
    if (run > 0)
      context.detail("planning again " + std::string(options ? "with " : "without ") + name);
    else if (!plain_can_fit)
      context.detail("no plan fits without " + name + ": planning with it");
    else if (options)
      context.detail("memory binds plans that keep every activation: " + planning + " first");
    EarlierBestScope earlier(context, best ? context.period_of(*best) : kInfinity);
    std::optional<Candidate> found = plan(options);
    if (options)
      context.detail("rematerialization options computed for " +
                     std::to_string(remat.ranges_computed()) + " distinct stage chains");
    if (!found) continue;
    // At an equal period the plan that recomputes and offloads nothing is kept.
    const double period = context.period_of(*found);
    const bool better = !best || (options ? period < context.period_of(*best) * (1 - 1e-9)
                                          : period <= context.period_of(*best) * (1 + 1e-9));
    if (!better) continue;
    context.budget().improved(period);
    best = std::move(found);
  }
  return best;
}

bool mp::memory_binds_plain_plans(const ChainCosts& costs, const Platform& platform) {
  return memory_bound_period_ms(costs, platform) >
         kRematFirstBoundRatio * lower_bound_period_ms(costs, platform);
}

static void add_unique(std::vector<mp::Allocation>& all, const mp::Allocation& allocation) {
  if (std::find(all.begin(), all.end(), allocation) == all.end()) all.push_back(allocation);
}

// On a multi-node platform the DPs number GPUs without looking at nodes: each allocation is
// also tried placed on the nodes by place_on_nodes() (first, when that moves GPUs).
static std::vector<mp::Allocation> with_node_placements(
    const madpipe::ChainCosts& costs, const madpipe::Platform& platform,
    const std::vector<mp::Allocation>& allocations) {
  if (madpipe::has_uniform_links(platform)) return allocations;
  std::vector<mp::Allocation> out;
  for (const mp::Allocation& allocation : allocations) {
    add_unique(out, mp::place_on_nodes(costs, platform, allocation));
    add_unique(out, allocation);
  }
  return out;
}

// The allocations, those whose period can be shortest first (by the bound of their busiest
// resource and of their memory, schedule::memory_period_bound_ms; stable): where the time limit
// stops scheduling, it stops at the least promising. Where memory binds, deep pipelines differ
// most in how their stages share it (a V shape pairs the stage that keeps the most micro-batches
// in flight with the one that keeps the fewest).
static std::vector<mp::Allocation> ordered_by_bound(const madpipe::ChainCosts& costs,
                                                    const madpipe::Platform& platform,
                                                    std::vector<mp::Allocation> allocations) {
  std::vector<std::pair<double, std::size_t>> bounds;
  for (std::size_t i = 0; i < allocations.size(); ++i) {
    const std::vector<ms::Stage> stages = mp::stages_of(costs, allocations[i]);
    bounds.emplace_back(std::max(ms::busiest_resource_ms(stages, platform),
                                 ms::memory_period_bound_ms(stages, platform)),
                        i);
  }
  std::stable_sort(bounds.begin(), bounds.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<mp::Allocation> ordered;
  for (const auto& [bound, i] : bounds) ordered.push_back(std::move(allocations[i]));
  return ordered;
}

// Schedules each allocation (and its placement on the nodes of a multi-node platform) with the
// given pattern families and keeps the shortest period. Once out of time, it stops as soon as
// it has a plan (or a `fallback`), and until then tries each allocation at its longest period
// only. Patterns slower than the fallback are not kept; one as fast is.
static std::optional<mp::Candidate> schedule_allocations(
    const madpipe::ChainCosts& costs, const madpipe::Platform& platform,
    const std::vector<mp::Allocation>& dp_allocations, const ms::ScheduleSearchOptions& search,
    mp::PlanningContext& context, const mp::Candidate* fallback = nullptr) {
  using namespace madpipe;
  context.enter("schedule");
  const std::vector<mp::Allocation> allocations =
      ordered_by_bound(costs, platform, with_node_placements(costs, platform, dp_allocations));
  std::optional<mp::Candidate> best;
  const int total = static_cast<int>(allocations.size());
  for (int index = 0; index < total; ++index) {
    if ((best || fallback) && context.expired(kScheduleShare)) {
      context.budget().cut("scheduling, after " + std::to_string(index) + " of " +
                           std::to_string(total) + " candidate allocations");
      for (; index < total; ++index) context.count_allocation(false);
      break;
    }
    context.budget().step(std::to_string(index + 1) + "/" + std::to_string(total) + " allocations");
    const mp::Allocation& allocation = allocations[static_cast<std::size_t>(index)];
    std::vector<ms::Stage> stages = mp::stages_of(costs, allocation);
    ms::ScheduleSearchOptions bounded = search;
    // The pattern must beat the best plan with this allocation's share of a tied exchange.
    const double exchange_share = context.exchange_share_ms(stages);
    if (best)
      bounded.give_up_at_ms = context.period_of(*best) - exchange_share;
    else if (fallback)  // the fallback's period may be tied
      bounded.give_up_at_ms = context.period_of(*fallback) * (1 + 1e-9) - exchange_share;
    // Out of time without a plan, the search tries each allocation at its longest period only.
    bounded.out_of_time = context.out_of_time(kScheduleShare);
    std::optional<ms::ScheduledPattern> scheduled =
        ms::schedule_under_memory(stages, platform, bounded);
    context.count_allocation(!context.expired(kScheduleShare));
    std::ostringstream line;
    line << "scheduled allocation " << index + 1 << "/" << total << " (" << stages.size()
         << " stages): "
         << (scheduled ? format_ms(scheduled->pattern.normalized_period_ms()) + " via " +
                             scheduled->method
                       : std::string("no better plan (or none that fits)"));
    context.detail(line.str());
    if (scheduled)
      keep_better(best,
                  mp::Candidate{allocation, std::move(stages), scheduled->pattern,
                                scheduled->method, std::nullopt},
                  context);
  }
  return best;
}

// Algorithm 8's allocations; says when the time limit cut it.
static mp::DpCandidates run_dp(const madpipe::ChainCosts& costs, const madpipe::Platform& platform,
                               const mp::PlannerOptions& options, bool special,
                               double upper_bound_ms, mp::StageOptions* remat,
                               mp::PlanningContext& context, const std::string& what) {
  mp::DpCandidates found =
      mp::dp_candidates(costs, platform, options.discretization, special, context.detail_sink(),
                        upper_bound_ms, remat, context.out_of_time(kDpShare));
  if (found.cut)
    context.budget().cut(what + " (fewer target periods, fewer candidate allocations)");
  return found;
}

// The DPs time every cut over the slowest link, so on a multi-node platform they do not cut
// where only a fast (intra-node) link carries the boundary in time, nor see that the GPUs of one
// node may do better than all of them. More candidates for them: the DPs' allocations with every
// link at the fastest bandwidth, and on the GPUs of the first node alone; placed on the nodes,
// they are scheduled with the real links like the others. None on a platform whose links are all
// alike.
static std::vector<mp::Allocation> node_aware_allocations(const madpipe::ChainCosts& costs,
                                                          const madpipe::Platform& platform,
                                                          const mp::PlannerOptions& options,
                                                          std::initializer_list<bool> special_gpu,
                                                          mp::StageOptions* remat,
                                                          mp::PlanningContext& context) {
  using namespace madpipe;
  std::vector<mp::Allocation> out;
  if (has_uniform_links(platform)) return out;
  const Platform fast = with_uniform_links(platform, fastest_link_bandwidth(platform));
  Platform one_node = with_uniform_links(platform, platform.bandwidth_bytes_per_ms);
  one_node.gpus = platform.gpus_per_node;
  const std::pair<const Platform*, std::string> variants[] = {
      {&fast, "with every link at the fastest bandwidth"},
      {&one_node, "on the " + std::to_string(one_node.gpus) + " GPUs of one node"}};
  for (const auto& [variant, what] : variants) {
    if (context.expired(kDpShare)) {
      context.budget().cut("the DPs on node-aware platforms");
      break;
    }
    context.detail("planning again " + what);
    for (bool special : special_gpu)
      for (const mp::Allocation& allocation :
           run_dp(costs, *variant, options, special, std::numeric_limits<double>::infinity(), remat,
                  context, "the DPs " + what)
               .allocations)
        add_unique(out, allocation);
  }
  return out;
}

// The fastest contiguous partition whose stages fit with one micro-batch in flight: the patterns
// of long periods run it, so it is a plan wherever any contiguous plan is (down to the memory
// floor), where the DPs' allocations, estimated at shorter periods, may all be too large.
static std::optional<mp::Allocation> sequential_allocation(const madpipe::ChainCosts& costs,
                                                           const madpipe::Platform& platform,
                                                           mp::StageOptions* remat) {
  return mp::fixed_in_flight_partition(
      costs, platform, [](int) { return 1; }, remat);
}

static std::optional<mp::Allocation> pipedream_allocation(const madpipe::ChainCosts& costs,
                                                          const madpipe::Platform& platform,
                                                          mp::StageOptions* remat) {
  return mp::fixed_in_flight_partition(
      costs, platform, [](int stages_after) { return stages_after; }, remat);
}

static std::optional<mp::Candidate> plan_contiguous(const madpipe::ChainCosts& costs,
                                                    const madpipe::Platform& platform,
                                                    const mp::PlannerOptions& options,
                                                    mp::PlanningContext& context,
                                                    mp::StageOptions* remat) {
  using namespace madpipe;
  context.enter("contiguous-dp");
  std::vector<mp::Allocation> allocations =
      run_dp(costs, platform, options, false, std::numeric_limits<double>::infinity(), remat,
             context, "the contiguous DP")
          .allocations;
  context.enter("baselines");
  for (const mp::Allocation& allocation :
       node_aware_allocations(costs, platform, options, {false}, remat, context))
    add_unique(allocations, allocation);
  if (auto sequential = sequential_allocation(costs, platform, remat))
    add_unique(allocations, *sequential);
  ms::ScheduleSearchOptions search;
  search.families = {ms::PatternFamily::OneFOneBStar};
  search.max_k = options.max_k;
  return schedule_allocations(costs, platform, allocations, search, context);
}

// The stage-level ILP of thesis ch. 7.2 on the given allocations; keeps its pattern where it
// beats `best`. An allocation whose lower bound (the busiest GPU or link, and what its memory
// allows) already meets the heuristic's period, or an earlier search's best, is skipped: no
// pattern of it is faster. Says what happened when the solver gives up or proves nothing better
// exists.
static void schedule_with_ilp(const madpipe::ChainCosts& costs, const madpipe::Platform& platform,
                              const std::vector<mp::Allocation>& allocations,
                              const mp::PlannerOptions& options, const std::string& backend,
                              std::optional<mp::Candidate>& best, mp::PlanningContext& context) {
  using namespace madpipe;
  const double lower_bound = mp::lower_bound_period_ms(costs, platform);
  // One time budget for all of them: options.milp.time_limit_s, within the request's.
  const double ilp_budget_s = std::min(options.milp.time_limit_s, context.budget().seconds_left());
  const double started_s = context.budget().elapsed_s();
  int solved = 0;
  for (const mp::Allocation& allocation : allocations) {
    if (best && context.period_of(*best) <= lower_bound * (1 + 1e-9)) return;
    // The best plan's allocation keeps the stages it has (some may run their backward whole),
    // so that its pattern is the warm start; stages that recompute or offload are not the ILP's.
    const bool keep_best_stages =
        best && best->allocation == allocation &&
        std::all_of(best->stages.begin(), best->stages.end(),
                    [](const ms::Stage& s) { return !s.uses_sequence(); });
    std::vector<ms::Stage> stages =
        keep_best_stages ? best->stages : mp::stages_of(costs, allocation);
    const double allocation_bound =
        std::max(lower_bound, ms::busiest_resource_ms(stages, platform));
    // A pattern of this allocation must beat the best plan with its own share of a tied exchange.
    const double exchange_share = context.exchange_share_ms(stages);
    const std::string what = "ilp scheduler on " + std::to_string(stages.size()) + " stages: ";
    const double bar =
        std::min(best ? context.period_of(*best) : kInfinity, context.earlier_best_ms());
    const double fitting_bound =
        std::max(allocation_bound, ms::memory_period_bound_ms(stages, platform));
    if (bar <= (fitting_bound + exchange_share) * (1 + 1e-9)) {
      context.detail(what + "skipped, no pattern of this allocation beats " + format_ms(bar));
      continue;
    }
    const double seconds_left =
        ilp_seconds(ilp_budget_s - (context.budget().elapsed_s() - started_s), context);
    if (seconds_left < 0.1) {
      if (context.expired())
        context.budget().cut("the stage ILPs");
      else
        context.note(
            "ilp scheduler: time limit reached before all candidate allocations were tried");
      return;
    }
    ms::IlpScheduleOptions ilp;
    ilp.backend = backend;
    ilp.solve = solve_options(options.milp);
    ilp.solve.time_limit_s = seconds_left;
    ilp.solve.wall_limit_s = wall_limit(context);
    if (!options.milp.mps_prefix.empty())
      ilp.mps_path = options.milp.mps_prefix + "-schedule-" + std::to_string(++solved) + ".mps";
    ilp.period_lower_bound_ms = allocation_bound;
    if (best) ilp.period_upper_bound_ms = context.period_of(*best) - exchange_share;
    if (best && best->allocation == allocation && best->pattern.k == 1) {
      ilp.warm_start = best->pattern;
    } else {
      ms::ScheduleSearchOptions one_periodic;
      one_periodic.max_k = 1;
      one_periodic.out_of_time = context.out_of_time();
      if (auto scheduled = ms::schedule_under_memory(stages, platform, one_periodic))
        ilp.warm_start = scheduled->pattern;
    }
    context.budget().step(what.substr(0, what.size() - 2));
    const ms::IlpScheduleResult result = ms::ilp_schedule(stages, platform, ilp);
    if (result.pattern && (!best || result.pattern->period_ms + exchange_share <
                                        context.period_of(*best) * (1 - 1e-9))) {
      context.detail(what + describe_solve(result.solve) +
                     (best ? ", heuristic had " + format_ms(best->pattern.normalized_period_ms())
                           : std::string(", the heuristic found none that fits")));
      if (result.solve.status == solver::Status::Feasible &&
          result.solve.gap > options.milp.relative_gap)
        context.note(what + "the time limit stopped the solver (" + describe_solve(result.solve) +
                     "): a longer --time-limit may find a shorter period, and the plan depends on "
                     "the machine's speed");
      keep_better(best,
                  mp::Candidate{allocation, std::move(stages), *result.pattern,
                                "ilp (" + std::string(solver::to_string(result.solve.status)) + ")",
                                solver_info(result.solve)},
                  context);
      continue;
    }
    switch (result.solve.status) {
      case solver::Status::Infeasible:
        context.detail(what +
                       (best ? "no 1-periodic pattern beats " +
                                   format_ms(best->pattern.normalized_period_ms()) + " (proven)"
                             : std::string("no 1-periodic pattern fits in memory (proven)")));
        break;
      case solver::Status::Timeout:
      case solver::Status::Error:
        context.note(what + describe_solve(result.solve) + "; keeping the heuristic schedule");
        break;
      default:
        context.detail(what + describe_solve(result.solve) + ", no improvement");
        break;
    }
  }
}

// The options of a local search from the best plan: it scores its moves with a quicker schedule
// search (fewer pattern families, k <= 3) until `share` of the time limit has elapsed.
static mp::RefineOptions local_search_options(const madpipe::ChainCosts& costs,
                                              const madpipe::Platform& platform,
                                              const mp::PlannerOptions& options,
                                              mp::PlanningContext& context, double share,
                                              int max_evaluations) {
  mp::RefineOptions search;
  search.max_evaluations = max_evaluations;
  search.search.families = {ms::PatternFamily::OneFOneBStar, ms::PatternFamily::GuidedModulo};
  search.search.max_k = options.max_k > 0 ? std::min(options.max_k, 3) : 3;
  search.out_of_time = context.out_of_time(share);
  search.search.out_of_time = search.out_of_time;
  search.lower_bound_ms = mp::lower_bound_period_ms(costs, platform);
  return search;
}

// Keeps what a local search found, scheduled again with the full search where that is shorter.
static void keep_searched(const madpipe::Platform& platform, mp::Allocation allocation,
                          std::vector<ms::Stage> stages, ms::ScheduledPattern scheduled,
                          ms::ScheduleSearchOptions full, double share,
                          std::optional<mp::Candidate>& best, mp::PlanningContext& context) {
  context.enter("schedule");
  full.out_of_time = context.out_of_time(share);
  if (auto rescheduled = ms::schedule_under_memory(stages, platform, full))
    if (rescheduled->pattern.normalized_period_ms() < scheduled.pattern.normalized_period_ms())
      scheduled = *rescheduled;
  keep_better(best,
              mp::Candidate{std::move(allocation), std::move(stages), scheduled.pattern,
                            scheduled.method, std::nullopt},
              context);
}

// The local search over allocations from the best plan.
static void refine_best(const madpipe::ChainCosts& costs, const madpipe::Platform& platform,
                        const mp::PlannerOptions& options, const ms::ScheduleSearchOptions& search,
                        std::optional<mp::Candidate>& best, mp::PlanningContext& context) {
  context.enter("refine");
  const mp::ScheduledAllocation refined =
      mp::refine_allocation(costs, platform, {best->allocation, {best->pattern, best->method}},
                            local_search_options(costs, platform, options, context, kRefineShare,
                                                 options.refine_evaluations),
                            context.detail_sink());
  if (refined.cut) context.budget().cut("the local search");
  if (refined.allocation == best->allocation) return;
  keep_searched(platform, refined.allocation, mp::stages_of(costs, refined.allocation),
                refined.scheduled, search, kRefineShare, best, context);
}

// Which stages of the best plan split their backward (the others run it whole): the split fills
// idle time, but holds memory until W.
static void choose_splits_of_best(const madpipe::ChainCosts& costs,
                                  const madpipe::Platform& platform,
                                  const mp::PlannerOptions& options,
                                  const ms::ScheduleSearchOptions& search,
                                  std::optional<mp::Candidate>& best,
                                  mp::PlanningContext& context) {
  context.enter("backward-splits");
  const mp::SplitChoice chosen =
      mp::choose_backward_splits(costs, platform, {best->stages, {best->pattern, best->method}},
                                 local_search_options(costs, platform, options, context,
                                                      kSplitChoiceShare, kSplitChoiceEvaluations),
                                 context.detail_sink());
  if (chosen.cut) context.budget().cut("the choice of split backwards");
  if (chosen.stages == best->stages) return;
  keep_searched(platform, best->allocation, chosen.stages, chosen.scheduled, search,
                kSplitChoiceShare, best, context);
}

static std::optional<mp::Candidate> plan_fixed_in_flight(const madpipe::ChainCosts& costs,
                                                         const madpipe::Platform& platform,
                                                         const mp::PlannerOptions& options,
                                                         mp::PlanningContext& context,
                                                         mp::StageOptions* remat);

static std::optional<mp::Candidate> plan_madpipe(const madpipe::ChainCosts& costs,
                                                 const madpipe::Platform& platform,
                                                 const mp::PlannerOptions& options,
                                                 mp::PlanningContext& context,
                                                 mp::StageOptions* remat) {
  using namespace madpipe;
  const std::string backend =
      options.scheduler == mp::Scheduler::Heuristic
          ? ""
          : milp_backend(options.milp, options.scheduler == mp::Scheduler::Ilp, "--scheduler ilp");
  // The contiguous DP's allocations compete (MadPipe is never worse than the baseline it could
  // have returned) and its best estimate bounds MadPipe-DP.
  context.enter("contiguous-dp");
  const mp::DpCandidates contiguous =
      run_dp(costs, platform, options, false, std::numeric_limits<double>::infinity(), remat,
             context, "the contiguous DP");
  context.enter("madpipe-dp");
  std::vector<mp::Allocation> allocations =
      run_dp(costs, platform, options, true, contiguous.best_period_ms, remat, context,
             "MadPipe-DP")
          .allocations;
  for (const mp::Allocation& allocation : contiguous.allocations)
    add_unique(allocations, allocation);
  context.enter("baselines");
  std::vector<mp::Allocation> contiguous_allocations = contiguous.allocations;
  if (auto pipedream = pipedream_allocation(costs, platform, remat)) {
    add_unique(allocations, *pipedream);
    add_unique(contiguous_allocations, *pipedream);
  }
  for (const mp::Allocation& allocation :
       node_aware_allocations(costs, platform, options, {true, false}, remat, context))
    add_unique(allocations, allocation);
  if (auto sequential = sequential_allocation(costs, platform, remat))
    add_unique(allocations, *sequential);
  if (remat == nullptr)
    for (const mp::Allocation& allocation : mp::tied_together_allocations(
             costs, platform, options.discretization, context.out_of_time(kDpShare)))
      add_unique(allocations, allocation);
  // Today's placements compete too, so that madpipe is never worse than those baselines.
  for (const auto& placement :
       {mp::interleaved_allocation(costs, platform, 2), mp::v_shape_allocation(costs, platform)})
    if (placement) add_unique(allocations, *placement);
  ms::ScheduleSearchOptions search;
  search.max_k = options.max_k;
  // First the contiguous DP's and PipeDream's allocations with 1F1B* alone, quick to schedule:
  // under a tight time limit, madpipe's plan is then at least as good as those baselines'.
  ms::ScheduleSearchOptions contiguous_search = search;
  contiguous_search.families = {ms::PatternFamily::OneFOneBStar};
  std::optional<mp::Candidate> first =
      schedule_allocations(costs, platform, contiguous_allocations, contiguous_search, context);
  std::optional<mp::Candidate> best = schedule_allocations(costs, platform, allocations, search,
                                                           context, first ? &*first : nullptr);
  if (!best || (first && context.period_of(*first) < context.period_of(*best) * (1 - 1e-9)))
    best = std::move(first);
  if (costs.has_split_backward()) {
    mp::PlannerOptions zero_bubble = options;
    zero_bubble.algorithm = mp::Algorithm::ZbH1;
    if (auto candidate = plan_fixed_in_flight(costs, platform, zero_bubble, context, nullptr))
      keep_better(best, std::move(*candidate), context);
  }
  const double lower_bound = mp::lower_bound_period_ms(costs, platform);
  if (best && options.refine_evaluations > 0 &&
      context.period_of(*best) > lower_bound * (1 + 1e-9)) {
    if (context.expired(kRefineShare))
      context.budget().cut("the local search");
    else
      refine_best(costs, platform, options, search, best, context);
  }
  if (best && options.choose_stage_splits && costs.has_split_backward() &&
      context.period_of(*best) > lower_bound * (1 + 1e-9)) {
    if (context.expired(kSplitChoiceShare))
      context.budget().cut("the choice of split backwards");
    else
      choose_splits_of_best(costs, platform, options, search, best, context);
  }
  if (backend.empty() || options.ilp_allocations <= 0) return best;
  // The ILP's memory model is exact where the DP's is an estimate (the special GPU): it looks at
  // the best allocation and at the DP's own favourites.
  std::vector<mp::Allocation> for_ilp;
  if (best) for_ilp.push_back(best->allocation);
  for (const mp::Allocation& allocation : allocations) {
    if (static_cast<int>(for_ilp.size()) >= options.ilp_allocations) break;
    add_unique(for_ilp, allocation);
  }
  context.enter("stage-ilp");
  schedule_with_ilp(costs, platform, for_ilp, options, backend, best, context);
  return best;
}

std::optional<mp::Candidate> mp::plan_full_ilp(const ChainCosts& costs, const Platform& platform,
                                               const PlannerOptions& options,
                                               PlanningContext& context, StageOptions& remat,
                                               bool plain_can_fit) {
  using namespace madpipe;
  const std::string backend = milp_backend(options.milp, true, "--algorithm ilp");
  PlannerOptions warm_options = options;
  warm_options.algorithm = Algorithm::MadPipe;
  warm_options.max_k = 1;
  // The full ILP splits every layer that splits: so must the plan it starts from.
  warm_options.choose_stage_splits = false;
  std::optional<Candidate> warm = plan_without_and_with(
      [&](StageOptions* stage_options) {
        return plan_madpipe(costs, platform, warm_options, context, stage_options);
      },
      remat, plain_can_fit, memory_binds_plain_plans(costs, platform), context);
  // The full ILP plans plain stages.
  if (!plain_can_fit) return warm;
  const double seconds =
      ilp_seconds(std::min(options.milp.time_limit_s, context.budget().seconds_left()), context);
  if (seconds < 0.1) {
    context.budget().cut("the full ILP (returning its warm start)");
    return warm;
  }
  FullIlpOptions ilp;
  ilp.backend = backend;
  ilp.solve = solve_options(options.milp);
  ilp.solve.time_limit_s = seconds;
  ilp.solve.wall_limit_s = wall_limit(context);
  ilp.period_lower_bound_ms = lower_bound_period_ms(costs, platform);
  if (!options.milp.mps_prefix.empty()) ilp.mps_path = options.milp.mps_prefix + "-full.mps";
  if (warm) ilp.warm_start = ScheduledStages{warm->stages, warm->pattern};
  context.enter("full-ilp");
  context.detail("full ILP over " + std::to_string(costs.num_layers()) + " layers, " +
                 (warm ? "warm start at " + format_ms(warm->pattern.period_ms)
                       : std::string("no warm start")) +
                 ", time limit " + format_ms(seconds * 1000));
  const FullIlpResult result = full_ilp(costs, platform, ilp);
  const mplan::SolverInfo info = solver_info(result.solve);
  context.detail("full ILP: " + describe_solve(result.solve) +
                 (warm && !result.warm_started ? " (the warm start could not be expressed)" : ""));
  if (result.solve.status == solver::Status::Timeout ||
      result.solve.status == solver::Status::Error)
    context.note("full ILP: " + describe_solve(result.solve) +
                 (warm ? "; returning the warm start" : "; no plan"));
  if (result.solve.status == solver::Status::Feasible &&
      result.solve.gap > options.milp.relative_gap)
    context.note("full ILP: the time limit stopped the solver (" + describe_solve(result.solve) +
                 "): a longer --time-limit may find a shorter period, and the plan depends on the "
                 "machine's speed");
  if (result.plan) {
    Allocation allocation;
    for (const ms::Stage& stage : result.plan->stages) {
      allocation.first_layers.push_back(stage.first_layer);
      allocation.gpus.push_back(stage.gpu);
    }
    // The ILP knows nothing of a tied weight's exchange: plans are compared with it.
    Candidate solved{allocation, result.plan->stages, result.plan->pattern, "ilp", info};
    if (!warm || context.period_of(solved) < context.period_of(*warm) * (1 - 1e-9)) {
      context.budget().improved(context.period_of(solved));
      return solved;
    }
  }
  if (warm) warm->solver = info;
  return warm;
}

static std::optional<mp::Candidate> plan_pipedream(const madpipe::ChainCosts& costs,
                                                   const madpipe::Platform& platform,
                                                   const mp::PlannerOptions& options,
                                                   mp::PlanningContext& context,
                                                   mp::StageOptions* remat) {
  context.enter("baselines");
  const auto allocation = pipedream_allocation(costs, platform, remat);
  if (!allocation) return std::nullopt;
  ms::ScheduleSearchOptions search;
  search.families = {ms::PatternFamily::OneFOneBStar};
  search.max_k = options.max_k;
  return schedule_allocations(costs, platform, {*allocation}, search, context);
}

// 1F1B, GPipe and ZB-H1 (1F1B with split stages: its W ops fill the bubbles).
static std::optional<mp::Candidate> plan_fixed_in_flight(const madpipe::ChainCosts& costs,
                                                         const madpipe::Platform& platform,
                                                         const mp::PlannerOptions& options,
                                                         mp::PlanningContext& context,
                                                         mp::StageOptions* remat) {
  context.enter("baselines");
  const bool gpipe = options.algorithm == mp::Algorithm::GPipe;
  const bool zero_bubble = options.algorithm == mp::Algorithm::ZbH1;
  const int micro_batches =
      options.micro_batches_per_step > 0 ? options.micro_batches_per_step : platform.gpus;
  const auto allocation = mp::fixed_in_flight_partition(
      costs, platform, [&](int stages_after) { return gpipe ? micro_batches : stages_after; },
      remat);
  if (!allocation) return std::nullopt;
  const mp::Allocation placed = mp::place_on_nodes(costs, platform, *allocation);
  std::vector<ms::Stage> stages = mp::stages_of(costs, placed);
  ms::Pattern pattern =
      gpipe ? ms::gpipe(stages, platform, micro_batches) : ms::one_f_one_b(stages, platform);
  if (!gpipe)
    if (auto tight = ms::retime(pattern, stages, platform)) pattern = *tight;
  if (!ms::fits_memory(stages, pattern, platform)) return std::nullopt;
  context.budget().improved(pattern.normalized_period_ms());
  return mp::Candidate{placed, std::move(stages), std::move(pattern),
                       gpipe ? "gpipe" : (zero_bubble ? "zb-h1" : "1f1b"), std::nullopt};
}

// Interleaved 1F1B and ZB-V: their fixed placements, scheduled by the pattern families.
static std::optional<mp::Candidate> plan_loop_placement(const madpipe::ChainCosts& costs,
                                                        const madpipe::Platform& platform,
                                                        const mp::PlannerOptions& options,
                                                        mp::PlanningContext& context) {
  context.enter("baselines");
  const auto allocation = mp::fixed_placement(costs, platform, options.algorithm);
  if (!allocation) {
    context.note(std::string(mp::to_string(options.algorithm)) + " needs at least " +
                 std::to_string(2 * platform.gpus) +
                 " layers (two chunks per GPU), the chain has " +
                 std::to_string(costs.num_layers()));
    return std::nullopt;
  }
  ms::ScheduleSearchOptions search;
  search.max_k = options.max_k;
  return schedule_allocations(costs, platform, {*allocation}, search, context);
}

std::optional<mp::Candidate> mp::plan_with_algorithm(const ChainCosts& costs,
                                                     const Platform& platform,
                                                     const PlannerOptions& options,
                                                     PlanningContext& context,
                                                     StageOptions* remat) {
  switch (options.algorithm) {
    case Algorithm::MadPipe:
      return plan_madpipe(costs, platform, options, context, remat);
    case Algorithm::Contiguous:
      return plan_contiguous(costs, platform, options, context, remat);
    case Algorithm::OneFOneB:
    case Algorithm::GPipe:
    case Algorithm::ZbH1:
      return plan_fixed_in_flight(costs, platform, options, context, remat);
    case Algorithm::Interleaved:
    case Algorithm::ZbV:
      return plan_loop_placement(costs, platform, options, context);
    case Algorithm::PipeDream:
      return plan_pipedream(costs, platform, options, context, remat);
    case Algorithm::Ilp:
      break;
  }
  MADPIPE_UNREACHABLE("the full ILP is planned by plan_full_ilp()");
}
