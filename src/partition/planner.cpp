#include "partition/planner.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <initializer_list>
#include <iomanip>
#include <limits>
#include <sstream>

#include "core/chain.hpp"
#include "core/error.hpp"
#include "core/units.hpp"
#include "partition/allocation.hpp"
#include "partition/contiguous_dp.hpp"
#include "partition/full_ilp.hpp"
#include "partition/madpipe_dp.hpp"
#include "partition/planning_budget.hpp"
#include "partition/refine.hpp"
#include "schedule/gpipe.hpp"
#include "schedule/ilp_schedule.hpp"
#include "schedule/memory.hpp"
#include "schedule/one_f_one_b.hpp"
#include "schedule/retime.hpp"
#include "schedule/search.hpp"

namespace {
template <typename Enum>
struct Named {
  Enum value;
  const char* name;
};
constexpr Named<madpipe::partition::Algorithm> kAlgorithmNames[] = {
    {madpipe::partition::Algorithm::MadPipe, "madpipe"},
    {madpipe::partition::Algorithm::Contiguous, "contiguous"},
    {madpipe::partition::Algorithm::PipeDream, "pipedream"},
    {madpipe::partition::Algorithm::OneFOneB, "1f1b"},
    {madpipe::partition::Algorithm::GPipe, "gpipe"},
    {madpipe::partition::Algorithm::Ilp, "ilp"},
};
constexpr Named<madpipe::partition::Scheduler> kSchedulerNames[] = {
    {madpipe::partition::Scheduler::Auto, "auto"},
    {madpipe::partition::Scheduler::Ilp, "ilp"},
    {madpipe::partition::Scheduler::Heuristic, "heuristic"},
};

template <typename Enum, std::size_t N>
const char* name_of(const Named<Enum> (&table)[N], Enum value) {
  for (const Named<Enum>& entry : table)
    if (entry.value == value) return entry.name;
  MADPIPE_UNREACHABLE("value without a name");
}

// Case-insensitive lookup; the error names `what` and lists the valid names.
template <typename Enum, std::size_t N>
Enum value_of(const Named<Enum> (&table)[N], const std::string& name, const std::string& what) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const Named<Enum>& entry : table)
    if (lower == entry.name) return entry.value;
  std::string valid;
  for (const Named<Enum>& entry : table) valid += std::string(valid.empty() ? "" : ", ") + entry.name;
  throw madpipe::Error(madpipe::ErrorKind::InvalidInput, "", what,
                       "unknown " + what + " '" + name + "' (valid: " + valid + ")");
}

struct Candidate {
  madpipe::partition::Allocation allocation;
  std::vector<madpipe::schedule::Stage> stages;
  madpipe::schedule::Pattern pattern;
  std::string method;
  std::optional<madpipe::schedule::SolverInfo> solver;
};

// What planning learned besides the plan: notes for the user.
struct PlanningLog {
  std::vector<std::string> notes;
  std::function<void(const std::string&)> progress;
  madpipe::partition::PlanningBudget* budget = nullptr;
  void note(const std::string& line) {
    notes.push_back(line);
    if (progress) progress(line);
  }
  void enter(const std::string& phase) {
    if (budget) budget->enter(phase);
  }
};
}  // namespace

const char* madpipe::partition::to_string(Algorithm algorithm) {
  return name_of(kAlgorithmNames, algorithm);
}

madpipe::partition::Algorithm madpipe::partition::algorithm_from_string(const std::string& name) {
  return value_of(kAlgorithmNames, name, "algorithm");
}

const std::vector<madpipe::partition::Algorithm>& madpipe::partition::all_algorithms() {
  static const std::vector<Algorithm> algorithms{Algorithm::MadPipe, Algorithm::Contiguous,
                                                 Algorithm::PipeDream, Algorithm::OneFOneB,
                                                 Algorithm::GPipe, Algorithm::Ilp};
  return algorithms;
}

const char* madpipe::partition::to_string(Scheduler scheduler) {
  return name_of(kSchedulerNames, scheduler);
}

madpipe::partition::Scheduler madpipe::partition::scheduler_from_string(const std::string& name) {
  return value_of(kSchedulerNames, name, "scheduler");
}

// The backend the ILPs use, or "" when none is built and none was asked for.
static std::string milp_backend(const madpipe::partition::MilpSettings& milp, bool required,
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
                what + " needs a MILP solver, and this build has none (install coinor-libcbc-dev "
                       "or libglpk-dev and rebuild)");
  return "";
}

static madpipe::solver::SolveOptions solve_options(const madpipe::partition::MilpSettings& milp) {
  madpipe::solver::SolveOptions solve;
  solve.time_limit_s = milp.time_limit_s;
  solve.relative_gap = milp.relative_gap;
  solve.threads = milp.threads;
  solve.log = milp.log;
  return solve;
}

static madpipe::schedule::SolverInfo solver_info(const madpipe::solver::SolveResult& result) {
  madpipe::schedule::SolverInfo info;
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

double madpipe::partition::lower_bound_period_ms(const Profile& profile,
                                                 const Platform& platform) {
  return lower_bound_period_ms(ChainCosts(profile), platform);
}

double madpipe::partition::lower_bound_period_ms(const ChainCosts& costs,
                                                 const Platform& platform) {
  double bound = std::max(costs.total_compute_ms() / std::max(1, platform.gpus),
                          costs.max_layer_compute_ms());
  // A cut pays at least the fastest link's time, whichever GPUs it links.
  if (platform.gpus > 1 && platform.bandwidth_bytes_per_ms > 0)
    for (int l = 0; l + 1 < costs.num_layers(); ++l)
      bound = std::max(bound,
                       std::min(fastest_link_ms(costs, l, platform), costs.compute_ms(l, l + 1)));
  return bound;
}

static void check_platform(const madpipe::Platform& platform) {
  using madpipe::throw_invalid;
  if (platform.gpus < 1) throw_invalid("", "gpus", "must be >= 1, got " + std::to_string(platform.gpus));
  if (platform.gpus > 4096) throw_invalid("", "gpus", "must be <= 4096, got " + std::to_string(platform.gpus));
  if (platform.memory_bytes <= 0) throw_invalid("", "memory", "must be > 0");
  if (!(platform.bandwidth_bytes_per_ms > 0) || !std::isfinite(platform.bandwidth_bytes_per_ms))
    throw_invalid("", "bandwidth", "must be a finite bandwidth > 0");
  if (platform.weight_copies < 1)
    throw_invalid("", "weight-copies", "must be >= 1, got " + std::to_string(platform.weight_copies));
  if (platform.gpus_per_node < 0)
    throw_invalid("", "gpus-per-node",
                  "must be >= 0, got " + std::to_string(platform.gpus_per_node));
  if (!(platform.inter_node_bandwidth_bytes_per_ms >= 0) ||
      !std::isfinite(platform.inter_node_bandwidth_bytes_per_ms))
    throw_invalid("", "inter-node-bandwidth", "must be a finite bandwidth >= 0");
}

static void keep_better(std::optional<Candidate>& best, Candidate candidate) {
  if (!best ||
      candidate.pattern.normalized_period_ms() < best->pattern.normalized_period_ms() * (1 - 1e-9))
    best = std::move(candidate);
}

// Plans without per-stage rematerialization/offloading, then, when `remat` allows them, with
// them, and keeps the better plan: the options change which allocations the DPs estimate best,
// so planning once without them makes the result never worse than plain planning.
template <typename Plan>
static std::optional<Candidate> without_and_with(
    const Plan& plan, madpipe::partition::StageOptions& remat,
    const std::function<void(const std::string&)>& progress) {
  std::optional<Candidate> best = plan(nullptr);
  if (!remat.enabled()) return best;
  if (progress) progress("planning again with per-stage rematerialization");
  if (std::optional<Candidate> with_remat = plan(&remat)) keep_better(best, std::move(*with_remat));
  if (progress)
    progress("rematerialization options computed for " + std::to_string(remat.ranges_computed()) +
             " stage ranges");
  return best;
}

static void add_unique(std::vector<madpipe::partition::Allocation>& all,
                       const madpipe::partition::Allocation& allocation) {
  if (std::find(all.begin(), all.end(), allocation) == all.end()) all.push_back(allocation);
}

// On a multi-node platform the DPs number GPUs without looking at nodes: each allocation is
// also tried placed on the nodes by place_on_nodes() (first, when that moves GPUs).
static std::vector<madpipe::partition::Allocation> with_node_placements(
    const madpipe::ChainCosts& costs, const madpipe::Platform& platform,
    const std::vector<madpipe::partition::Allocation>& allocations) {
  if (madpipe::has_uniform_links(platform)) return allocations;
  std::vector<madpipe::partition::Allocation> out;
  for (const madpipe::partition::Allocation& allocation : allocations) {
    add_unique(out, madpipe::partition::place_on_nodes(costs, platform, allocation));
    add_unique(out, allocation);
  }
  return out;
}

// Schedules each allocation (and its placement on the nodes of a multi-node platform) with the
// given pattern families and keeps the shortest period.
static std::optional<Candidate> schedule_allocations(
    const madpipe::ChainCosts& costs, const madpipe::Platform& platform,
    const std::vector<madpipe::partition::Allocation>& dp_allocations,
    const madpipe::schedule::ScheduleSearchOptions& search,
    const madpipe::partition::PlannerOptions& options, PlanningLog& log) {
  using namespace madpipe;
  log.enter("schedule");
  const std::vector<partition::Allocation> allocations =
      with_node_placements(costs, platform, dp_allocations);
  std::optional<Candidate> best;
  int index = 0;
  for (const partition::Allocation& allocation : allocations) {
    ++index;
    std::vector<schedule::Stage> stages = partition::stages_of(costs, allocation);
    schedule::ScheduleSearchOptions bounded = search;
    if (best) bounded.give_up_at_ms = best->pattern.normalized_period_ms();
    std::optional<schedule::ScheduledPattern> scheduled =
        schedule::schedule_under_memory(stages, platform, bounded);
    if (options.progress) {
      std::ostringstream line;
      line << "scheduled allocation " << index << "/" << allocations.size() << " ("
           << stages.size() << " stages): "
           << (scheduled ? format_ms(scheduled->pattern.normalized_period_ms()) + " via " +
                               scheduled->method
                         : std::string("no better plan (or none that fits)"));
      options.progress(line.str());
    }
    if (scheduled)
      keep_better(best, Candidate{allocation, std::move(stages), scheduled->pattern,
                                  scheduled->method, std::nullopt});
  }
  return best;
}

// The DPs time every cut over the slowest link, so on a multi-node platform they do not cut
// where only a fast (intra-node) link carries the boundary in time, nor see that the GPUs of one
// node may do better than all of them. More candidates for them: the DPs' allocations with every
// link at the fastest bandwidth, and on the GPUs of the first node alone; placed on the nodes,
// they are scheduled with the real links like the others. None on a platform whose links are all
// alike.
static std::vector<madpipe::partition::Allocation> node_aware_allocations(
    const madpipe::ChainCosts& costs, const madpipe::Platform& platform,
    const madpipe::partition::PlannerOptions& options, std::initializer_list<bool> special_gpu,
    madpipe::partition::StageOptions* remat) {
  using namespace madpipe;
  std::vector<partition::Allocation> out;
  if (has_uniform_links(platform)) return out;
  const Platform fast = with_uniform_links(platform, fastest_link_bandwidth(platform));
  Platform one_node = with_uniform_links(platform, platform.bandwidth_bytes_per_ms);
  one_node.gpus = platform.gpus_per_node;
  const std::pair<const Platform*, std::string> variants[] = {
      {&fast, "with every link at the fastest bandwidth"},
      {&one_node, "on the " + std::to_string(one_node.gpus) + " GPUs of one node"}};
  for (const auto& [variant, what] : variants) {
    if (options.progress) options.progress("planning again " + what);
    for (bool special : special_gpu)
      for (const partition::Allocation& allocation : partition::madpipe_allocations(
               costs, *variant, options.discretization, special, options.progress,
               std::numeric_limits<double>::infinity(), remat))
        add_unique(out, allocation);
  }
  return out;
}

static std::optional<Candidate> plan_contiguous(const madpipe::ChainCosts& costs,
                                                const madpipe::Platform& platform,
                                                const madpipe::partition::PlannerOptions& options,
                                                PlanningLog& log,
                                                madpipe::partition::StageOptions* remat) {
  using namespace madpipe;
  log.enter("contiguous-dp");
  std::vector<partition::Allocation> allocations = partition::madpipe_allocations(
      costs, platform, options.discretization, false, options.progress,
      std::numeric_limits<double>::infinity(), remat);
  for (const partition::Allocation& allocation :
       node_aware_allocations(costs, platform, options, {false}, remat))
    add_unique(allocations, allocation);
  schedule::ScheduleSearchOptions search;
  search.families = {schedule::PatternFamily::OneFOneBStar};
  search.max_k = options.max_k;
  return schedule_allocations(costs, platform, allocations, search, options, log);
}

static std::optional<madpipe::partition::Allocation> pipedream_allocation(
    const madpipe::ChainCosts& costs, const madpipe::Platform& platform,
    madpipe::partition::StageOptions* remat) {
  return madpipe::partition::fixed_in_flight_partition(
      costs, platform, [](int stages_after) { return stages_after; }, remat);
}

// The stage-level ILP of thesis ch. 7.2 on the given allocations; keeps its pattern where it
// beats `best`. Says what happened when the solver gives up or proves nothing better exists.
static void schedule_with_ilp(const madpipe::ChainCosts& costs, const madpipe::Platform& platform,
                              const std::vector<madpipe::partition::Allocation>& allocations,
                              const madpipe::partition::PlannerOptions& options,
                              const std::string& backend, std::optional<Candidate>& best,
                              PlanningLog& log) {
  using namespace madpipe;
  const double lower_bound = partition::lower_bound_period_ms(costs, platform);
  // One time budget for all of them: --time-limit bounds what scheduling adds to planning.
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(options.milp.time_limit_s);
  int solved = 0;
  for (const partition::Allocation& allocation : allocations) {
    if (best && best->pattern.normalized_period_ms() <= lower_bound * (1 + 1e-9)) return;
    const double seconds_left =
        std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (seconds_left < 0.1) {
      log.note("ilp scheduler: time limit reached before all candidate allocations were tried");
      return;
    }
    std::vector<schedule::Stage> stages = partition::stages_of(costs, allocation);
    schedule::IlpScheduleOptions ilp;
    ilp.backend = backend;
    ilp.solve = solve_options(options.milp);
    ilp.solve.time_limit_s = seconds_left;
    if (!options.milp.mps_prefix.empty())
      ilp.mps_path = options.milp.mps_prefix + "-schedule-" + std::to_string(++solved) + ".mps";
    ilp.period_lower_bound_ms = std::max(lower_bound, schedule::busiest_resource_ms(stages, platform));
    if (best) ilp.period_upper_bound_ms = best->pattern.normalized_period_ms();
    if (best && best->allocation == allocation && best->pattern.k == 1) {
      ilp.warm_start = best->pattern;
    } else {
      schedule::ScheduleSearchOptions one_periodic;
      one_periodic.max_k = 1;
      if (auto scheduled = schedule::schedule_under_memory(stages, platform, one_periodic))
        ilp.warm_start = scheduled->pattern;
    }
    const schedule::IlpScheduleResult result = schedule::ilp_schedule(stages, platform, ilp);
    const std::string what = "ilp scheduler on " + std::to_string(stages.size()) + " stages: ";
    if (result.pattern && (!best || result.pattern->period_ms <
                                        best->pattern.normalized_period_ms() * (1 - 1e-9))) {
      if (log.progress)
        log.progress(what + describe_solve(result.solve) +
                     (best ? ", heuristic had " + format_ms(best->pattern.normalized_period_ms())
                           : std::string(", the heuristic found none that fits")));
      if (result.solve.status == solver::Status::Feasible &&
          result.solve.gap > options.milp.relative_gap)
        log.note(what + "the time limit stopped the solver (" + describe_solve(result.solve) +
                 "): a longer --time-limit may find a shorter period, and the plan depends on "
                 "the machine's speed");
      best = Candidate{allocation, std::move(stages), *result.pattern,
                       "ilp (" + std::string(solver::to_string(result.solve.status)) + ")",
                       solver_info(result.solve)};
      continue;
    }
    switch (result.solve.status) {
      case solver::Status::Infeasible:
        if (log.progress)
          log.progress(what + (best ? "no 1-periodic pattern beats " +
                                          format_ms(best->pattern.normalized_period_ms()) + " (proven)"
                                    : std::string("no 1-periodic pattern fits in memory (proven)")));
        break;
      case solver::Status::Timeout:
      case solver::Status::Error:
        log.note(what + describe_solve(result.solve) + "; keeping the heuristic schedule");
        break;
      default:
        if (log.progress) log.progress(what + describe_solve(result.solve) + ", no improvement");
        break;
    }
  }
}

static std::optional<Candidate> plan_madpipe(const madpipe::ChainCosts& costs,
                                             const madpipe::Platform& platform,
                                             const madpipe::partition::PlannerOptions& options,
                                             PlanningLog& log, madpipe::partition::StageOptions* remat) {
  using namespace madpipe;
  const std::string backend =
      options.scheduler == partition::Scheduler::Heuristic
          ? ""
          : milp_backend(options.milp, options.scheduler == partition::Scheduler::Ilp,
                         "--scheduler ilp");
  log.enter("contiguous-dp");
  const double contiguous_bound =
      partition::contiguous_upper_bound(costs, platform, options.discretization, remat);
  log.enter("madpipe-dp");
  std::vector<partition::Allocation> allocations = partition::madpipe_allocations(
      costs, platform, options.discretization, true, options.progress, contiguous_bound, remat);
  // Never worse than a baseline it could have returned: the contiguous DP's and PipeDream's
  // allocations compete too.
  log.enter("contiguous-dp");
  for (const partition::Allocation& allocation :
       partition::madpipe_allocations(costs, platform, options.discretization, false,
                                      options.progress, std::numeric_limits<double>::infinity(), remat))
    add_unique(allocations, allocation);
  log.enter("baselines");
  if (auto pipedream = pipedream_allocation(costs, platform, remat)) add_unique(allocations, *pipedream);
  for (const partition::Allocation& allocation :
       node_aware_allocations(costs, platform, options, {true, false}, remat))
    add_unique(allocations, allocation);
  schedule::ScheduleSearchOptions search;
  search.max_k = options.max_k;
  std::optional<Candidate> best = schedule_allocations(costs, platform, allocations, search, options, log);
  const double lower_bound = partition::lower_bound_period_ms(costs, platform);
  if (best && options.refine_evaluations > 0 &&
      best->pattern.normalized_period_ms() > lower_bound * (1 + 1e-9)) {
    // The local search scores neighbours with a quicker schedule search (fewer pattern families,
    // k <= 3); its result is then scheduled with the full search.
    log.enter("refine");
    partition::RefineOptions refine;
    refine.max_evaluations = options.refine_evaluations;
    refine.search.families = {schedule::PatternFamily::OneFOneBStar,
                              schedule::PatternFamily::GuidedModulo};
    refine.search.max_k = options.max_k > 0 ? std::min(options.max_k, 3) : 3;
    const partition::ScheduledAllocation refined = partition::refine_allocation(
        costs, platform, {best->allocation, {best->pattern, best->method}}, refine, options.progress);
    if (!(refined.allocation == best->allocation)) {
      std::vector<schedule::Stage> stages = partition::stages_of(costs, refined.allocation);
      schedule::ScheduledPattern scheduled = refined.scheduled;
      log.enter("schedule");
      if (auto full = schedule::schedule_under_memory(stages, platform, search))
        if (full->pattern.normalized_period_ms() < scheduled.pattern.normalized_period_ms())
          scheduled = *full;
      keep_better(best, Candidate{refined.allocation, std::move(stages), scheduled.pattern,
                                  scheduled.method, std::nullopt});
    }
  }
  if (backend.empty() || options.ilp_allocations <= 0) return best;
  // The ILP's memory model is exact where the DP's is an estimate (the special GPU): it looks at
  // the best allocation and at the DP's own favourites.
  std::vector<partition::Allocation> for_ilp;
  if (best) for_ilp.push_back(best->allocation);
  for (const partition::Allocation& allocation : allocations) {
    if (static_cast<int>(for_ilp.size()) >= options.ilp_allocations) break;
    add_unique(for_ilp, allocation);
  }
  log.enter("stage-ilp");
  schedule_with_ilp(costs, platform, for_ilp, options, backend, best, log);
  return best;
}

// Thesis ch. 6: the full ILP, warm-started from MadPipe's best 1-periodic plan.
static std::optional<Candidate> plan_ilp(const madpipe::ChainCosts& costs,
                                         const madpipe::Platform& platform,
                                         const madpipe::partition::PlannerOptions& options,
                                         PlanningLog& log, madpipe::partition::StageOptions* remat) {
  using namespace madpipe;
  const std::string backend = milp_backend(options.milp, true, "--algorithm ilp");
  partition::PlannerOptions warm_options = options;
  warm_options.algorithm = partition::Algorithm::MadPipe;
  warm_options.max_k = 1;
  std::optional<Candidate> warm = without_and_with(
      [&](partition::StageOptions* stage_options) {
        return plan_madpipe(costs, platform, warm_options, log, stage_options);
      },
      *remat, options.progress);
  partition::FullIlpOptions ilp;
  ilp.backend = backend;
  ilp.solve = solve_options(options.milp);
  ilp.period_lower_bound_ms = partition::lower_bound_period_ms(costs, platform);
  if (!options.milp.mps_prefix.empty()) ilp.mps_path = options.milp.mps_prefix + "-full.mps";
  if (warm) ilp.warm_start = partition::ScheduledStages{warm->stages, warm->pattern};
  if (log.progress)
    log.progress("full ILP over " + std::to_string(costs.num_layers()) + " layers, " +
                 (warm ? "warm start at " + format_ms(warm->pattern.period_ms) : std::string("no warm start")) +
                 ", time limit " + format_ms(options.milp.time_limit_s * 1000));
  log.enter("full-ilp");
  const partition::FullIlpResult result = partition::full_ilp(costs, platform, ilp);
  const schedule::SolverInfo info = solver_info(result.solve);
  if (log.progress)
    log.progress("full ILP: " + describe_solve(result.solve) +
                 (warm && !result.warm_started ? " (the warm start could not be expressed)" : ""));
  if (result.solve.status == solver::Status::Timeout || result.solve.status == solver::Status::Error)
    log.note("full ILP: " + describe_solve(result.solve) +
             (warm ? "; returning the warm start" : "; no plan"));
  if (result.solve.status == solver::Status::Feasible && result.solve.gap > options.milp.relative_gap)
    log.note("full ILP: the time limit stopped the solver (" + describe_solve(result.solve) +
             "): a longer --time-limit may find a shorter period, and the plan depends on the "
             "machine's speed");
  if (result.plan && (!warm || result.plan->pattern.period_ms < warm->pattern.period_ms * (1 - 1e-9))) {
    partition::Allocation allocation;
    for (const schedule::Stage& stage : result.plan->stages) {
      allocation.first_layers.push_back(stage.first_layer);
      allocation.gpus.push_back(stage.gpu);
    }
    return Candidate{allocation, result.plan->stages, result.plan->pattern, "ilp", info};
  }
  if (warm) warm->solver = info;
  return warm;
}

static std::optional<Candidate> plan_pipedream(const madpipe::ChainCosts& costs,
                                               const madpipe::Platform& platform,
                                               const madpipe::partition::PlannerOptions& options,
                                               PlanningLog& log,
                                               madpipe::partition::StageOptions* remat) {
  using namespace madpipe;
  log.enter("baselines");
  const auto allocation = pipedream_allocation(costs, platform, remat);
  if (!allocation) return std::nullopt;
  schedule::ScheduleSearchOptions search;
  search.families = {schedule::PatternFamily::OneFOneBStar};
  search.max_k = options.max_k;
  return schedule_allocations(costs, platform, {*allocation}, search, options, log);
}

static std::optional<Candidate> plan_fixed_in_flight(const madpipe::ChainCosts& costs,
                                                     const madpipe::Platform& platform,
                                                     const madpipe::partition::PlannerOptions& options,
                                                     PlanningLog& log,
                                                     madpipe::partition::StageOptions* remat) {
  using namespace madpipe;
  log.enter("baselines");
  const bool gpipe = options.algorithm == partition::Algorithm::GPipe;
  const int micro_batches = options.gpipe_micro_batches > 0 ? options.gpipe_micro_batches : platform.gpus;
  const auto allocation = partition::fixed_in_flight_partition(
      costs, platform, [&](int stages_after) { return gpipe ? micro_batches : stages_after; },
      remat);
  if (!allocation) return std::nullopt;
  const partition::Allocation placed = partition::place_on_nodes(costs, platform, *allocation);
  std::vector<schedule::Stage> stages = partition::stages_of(costs, placed);
  schedule::Pattern pattern = gpipe ? schedule::gpipe(stages, platform, micro_batches)
                                    : schedule::one_f_one_b(stages, platform);
  if (!gpipe)
    if (auto tight = schedule::retime(pattern, stages, platform)) pattern = *tight;
  if (!schedule::fits_memory(stages, pattern, platform)) return std::nullopt;
  return Candidate{placed, std::move(stages), std::move(pattern), gpipe ? "gpipe" : "1f1b",
                   std::nullopt};
}

madpipe::partition::PlanResult madpipe::partition::make_plan(const Profile& profile,
                                                             const Platform& platform,
                                                             const PlannerOptions& options) {
  check_platform(platform);
  if (profile.layers.empty()) throw_invalid("", "/layers", "the profile has no layers");
  const auto started = std::chrono::steady_clock::now();
  const ChainCosts costs(profile);
  std::optional<Candidate> best;
  PlanningBudget budget({});
  PlanningLog log;
  log.progress = options.progress;
  log.budget = &budget;
  StageOptions remat(profile, options.remat);
  auto plan_once = [&](StageOptions* options_of_stages) -> std::optional<Candidate> {
    switch (options.algorithm) {
      case Algorithm::MadPipe:
        return plan_madpipe(costs, platform, options, log, options_of_stages);
      case Algorithm::Ilp:
        MADPIPE_UNREACHABLE("the full ILP is planned once, below");
      case Algorithm::Contiguous:
        return plan_contiguous(costs, platform, options, log, options_of_stages);
      case Algorithm::OneFOneB:
      case Algorithm::GPipe:
        return plan_fixed_in_flight(costs, platform, options, log, options_of_stages);
      case Algorithm::PipeDream:
        return plan_pipedream(costs, platform, options, log, options_of_stages);
    }
    MADPIPE_UNREACHABLE("unknown algorithm");
  };
  // The full ILP plans plain stages: only its MadPipe warm start may rematerialize.
  best = options.algorithm == Algorithm::Ilp
             ? plan_ilp(costs, platform, options, log, &remat)
             : without_and_with(plan_once, remat, options.progress);
  PlanResult result;
  result.notes = std::move(log.notes);
  result.phases = budget.phases();
  result.planning_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!best) {
    result.reason = std::string("no ") + to_string(options.algorithm) + " plan fits in " +
                    format_bytes(static_cast<double>(platform.memory_bytes)) + " per GPU";
    return result;
  }
  result.feasible = true;
  schedule::Plan& plan = result.plan;
  plan.profile = profile.name;
  plan.platform = platform;
  plan.algorithm = to_string(options.algorithm);
  plan.stages = std::move(best->stages);
  plan.pattern = std::move(best->pattern);
  plan.solver = best->solver;
  schedule::fill_predicted(plan, lower_bound_period_ms(profile, platform));
  return result;
}

std::int64_t madpipe::partition::smallest_feasible_memory(const Profile& profile,
                                                          const Platform& platform,
                                                          const PlannerOptions& options) {
  check_platform(platform);
  const ChainCosts costs(profile);
  PlannerOptions quick = options;
  quick.progress = nullptr;
  // A binary search solves many plans: the heuristic scheduler answers "does it fit" well enough.
  quick.scheduler = Scheduler::Heuristic;
  if (quick.algorithm == Algorithm::Ilp) {
    quick.algorithm = Algorithm::MadPipe;
    quick.max_k = 1;
  }
  if (quick.algorithm == Algorithm::MadPipe) {
    quick.discretization.iterations = std::min(quick.discretization.iterations, 6);
  }
  auto feasible = [&](std::int64_t memory) {
    Platform trial = platform;
    trial.memory_bytes = memory;
    return make_plan(profile, trial, quick).feasible;
  };
  // Everything on one GPU with one micro-batch in flight always fits this much.
  std::int64_t hi = platform.weight_copies * costs.weight_bytes(0, costs.num_layers() - 1) +
                    costs.stored_bytes(0, costs.num_layers() - 1) +
                    costs.workspace_bytes(0, costs.num_layers() - 1) + 1;
  hi = std::max(hi, platform.memory_bytes);
  int guard = 0;
  while (!feasible(hi)) {
    if (++guard > 8) return -1;
    hi *= 2;
  }
  std::int64_t lo = 0;
  while (hi - lo > std::max<std::int64_t>(1, hi / 100)) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (feasible(mid))
      hi = mid;
    else
      lo = mid;
  }
  return hi;
}
