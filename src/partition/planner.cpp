#include "partition/planner.hpp"

#include "core/chain.hpp"
#include "core/error.hpp"
#include "core/names.hpp"
#include "core/units.hpp"
#include "partition/allocation.hpp"
#include "partition/loop_placements.hpp"
#include "partition/plan_search.hpp"
#include "partition/planning_budget.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <initializer_list>
#include <iomanip>
#include <limits>
#include <sstream>

namespace {
using madpipe::Named;
constexpr Named<madpipe::partition::Algorithm> kAlgorithmNames[] = {
    {madpipe::partition::Algorithm::MadPipe, "madpipe"},
    {madpipe::partition::Algorithm::Contiguous, "contiguous"},
    {madpipe::partition::Algorithm::PipeDream, "pipedream"},
    {madpipe::partition::Algorithm::OneFOneB, "1f1b"},
    {madpipe::partition::Algorithm::GPipe, "gpipe"},
    {madpipe::partition::Algorithm::Interleaved, "interleaved"},
    {madpipe::partition::Algorithm::ZbH1, "zb-h1"},
    {madpipe::partition::Algorithm::ZbV, "zb-v"},
    {madpipe::partition::Algorithm::Ilp, "ilp"},
};
constexpr Named<madpipe::partition::Scheduler> kSchedulerNames[] = {
    {madpipe::partition::Scheduler::Auto, "auto"},
    {madpipe::partition::Scheduler::Ilp, "ilp"},
    {madpipe::partition::Scheduler::Heuristic, "heuristic"},
};
constexpr Named<madpipe::partition::BackwardSplit> kBackwardSplitNames[] = {
    {madpipe::partition::BackwardSplit::Auto, "auto"},
    {madpipe::partition::BackwardSplit::Off, "off"},
};

}  // namespace

const char* madpipe::partition::to_string(Algorithm algorithm) {
  return name_of(kAlgorithmNames, algorithm);
}

madpipe::partition::Algorithm madpipe::partition::algorithm_from_string(const std::string& name) {
  return value_named(kAlgorithmNames, name, "algorithm", "algorithm");
}

const std::vector<madpipe::partition::Algorithm>& madpipe::partition::all_algorithms() {
  static const std::vector<Algorithm> algorithms{
      Algorithm::MadPipe,  Algorithm::Contiguous, Algorithm::PipeDream,
      Algorithm::OneFOneB, Algorithm::GPipe,      Algorithm::Interleaved,
      Algorithm::ZbH1,     Algorithm::ZbV,        Algorithm::Ilp};
  return algorithms;
}

const char* madpipe::partition::to_string(Scheduler scheduler) {
  return name_of(kSchedulerNames, scheduler);
}

madpipe::partition::Scheduler madpipe::partition::scheduler_from_string(const std::string& name) {
  return value_named(kSchedulerNames, name, "scheduler", "scheduler");
}

const char* madpipe::partition::to_string(BackwardSplit split) {
  return name_of(kBackwardSplitNames, split);
}

madpipe::partition::BackwardSplit madpipe::partition::backward_split_from_string(
    const std::string& name) {
  return value_named(kBackwardSplitNames, name, "split-backward mode", "split_backward");
}

bool madpipe::partition::can_split_backward(Algorithm algorithm) {
  return algorithm == Algorithm::MadPipe || algorithm == Algorithm::Contiguous ||
         algorithm == Algorithm::Ilp || algorithm == Algorithm::ZbH1 || algorithm == Algorithm::ZbV;
}

bool madpipe::partition::places_contiguously(Algorithm algorithm) {
  return algorithm != Algorithm::MadPipe && algorithm != Algorithm::Ilp &&
         !uses_fixed_placement(algorithm);
}

bool madpipe::partition::uses_fixed_placement(Algorithm algorithm) {
  return algorithm == Algorithm::Interleaved || algorithm == Algorithm::ZbV;
}

double madpipe::partition::lower_bound_period_ms(const Profile& profile, const Platform& platform) {
  return lower_bound_period_ms(ChainCosts(profile), platform);
}

double madpipe::partition::lower_bound_period_ms(const ChainCosts& costs,
                                                 const Platform& platform) {
  double bound =
      std::max(costs.total_compute_ms() / std::max(1, platform.gpus), costs.max_layer_compute_ms());
  // A cut pays at least the fastest link's time, whichever GPUs it links.
  if (platform.gpus > 1 && platform.bandwidth_bytes_per_ms > 0)
    for (int l = 0; l + 1 < costs.num_layers(); ++l)
      bound = std::max(bound,
                       std::min(fastest_link_ms(costs, l, platform), costs.compute_ms(l, l + 1)));
  return bound;
}

static std::string seconds_text(double seconds) {
  std::ostringstream text;
  text << seconds << " s";
  return text.str();
}

// The profile with every backward whole.
static madpipe::Profile without_split_backward(madpipe::Profile profile) {
  for (madpipe::Layer& layer : profile.layers) layer.split_backward.reset();
  return profile;
}

// One planning request on `profile` as it is (split backwards where it has them).
static madpipe::partition::PlanResult plan_profile(
    const madpipe::Profile& profile, const madpipe::Platform& platform,
    const madpipe::partition::PlannerOptions& options) {
  using namespace madpipe;
  using namespace madpipe::partition;
  const auto started = std::chrono::steady_clock::now();
  const ChainCosts costs(profile);
  PlanningBudget::Settings settings;
  settings.time_limit_s = options.time_limit_s;
  settings.progress = options.progress;
  settings.detailed = options.detailed_progress;
  PlanningBudget budget(std::move(settings));
  PlanningContext context(budget);
  StageOptions remat(profile, options.remat);
  // Below the memory floor (checked in O(P L^2)) planning without rematerialization can only fail:
  // the contiguous algorithms find nothing below it, the others nothing below what any allocation
  // needs.
  const MemoryFloor plain_floor = algorithm_memory_floor(costs, platform, options);
  const bool contiguous = places_contiguously(options.algorithm);
  const bool plain_can_fit =
      plain_floor.fits &&
      platform.memory_bytes >= (contiguous ? plain_floor.bytes : plain_floor.any_allocation_bytes);
  // The full ILP plans plain stages: only its MadPipe warm start may rematerialize.
  const std::optional<Candidate> best =
      options.algorithm == Algorithm::Ilp
          ? plan_full_ilp(costs, platform, options, context, remat, plain_can_fit)
          : plan_without_and_with(
                [&](StageOptions* stage_options) {
                  return plan_with_algorithm(costs, platform, options, context, stage_options);
                },
                remat, plain_can_fit, context);
  PlanResult result;
  result.notes = context.notes();
  if (!budget.cuts().empty()) {
    result.cut_by_time_limit = true;
    std::string cut;
    for (const std::string& what : budget.cuts()) cut += (cut.empty() ? "" : "; ") + what;
    result.notes.push_back("the time limit of " + seconds_text(options.time_limit_s) +
                           " cut planning short: " + cut +
                           "; a longer --time-limit may find a shorter period");
  }
  result.phases = budget.phases();
  result.planning_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!best) {
    result.reason = std::string("no ") + to_string(options.algorithm) + " plan fits in " +
                    format_bytes(static_cast<double>(platform.memory_bytes)) + " per GPU";
    return result;
  }
  result.feasible = true;
  plan::Plan& plan = result.plan;
  plan.profile = profile.name;
  plan.platform = platform;
  plan.algorithm = to_string(options.algorithm);
  plan.stages = std::move(best->stages);
  plan.pattern = std::move(best->pattern);
  plan.solver = best->solver;
  plan::fill_predicted(plan, lower_bound_period_ms(profile, platform));
  return result;
}

madpipe::partition::PlanResult madpipe::partition::make_plan(const Profile& profile,
                                                             const Platform& platform,
                                                             const PlannerOptions& options) {
  check_platform(platform);
  if (profile.layers.empty()) throw_invalid("", "/layers", "the profile has no layers");
  if (uses_fixed_placement(options.algorithm) &&
      static_cast<int>(profile.layers.size()) < 2 * platform.gpus) {
    PlanResult result;
    result.reason = std::string(to_string(options.algorithm)) + " places two chunks of layers on " +
                    "each GPU: it needs at least " + std::to_string(2 * platform.gpus) +
                    " layers, the chain has " + std::to_string(profile.layers.size());
    return result;
  }
  const Profile whole = without_split_backward(profile);
  if (options.split_backward == BackwardSplit::Off || !can_split_backward(options.algorithm) ||
      !ChainCosts(profile).has_split_backward())
    return plan_profile(whole, platform, options);
  // The zero-bubble schedules are split ones.
  if (options.algorithm == Algorithm::ZbH1 || options.algorithm == Algorithm::ZbV)
    return plan_profile(profile, platform, options);
  // Each request gets half the time limit.
  PlannerOptions half = options;
  if (std::isfinite(options.time_limit_s)) half.time_limit_s = options.time_limit_s / 2;
  PlanResult result = plan_profile(whole, platform, half);
  PlanResult split = plan_profile(profile, platform, half);
  const bool split_wins =
      split.feasible && (!result.feasible || split.plan.predicted.period_ms <
                                                 result.plan.predicted.period_ms * (1 - 1e-9));
  const std::string compared =
      "split backward (B and W): " +
      (split.feasible ? format_ms(split.plan.predicted.period_ms) : std::string("no plan")) +
      " per micro-batch, whole backwards: " +
      (result.feasible ? format_ms(result.plan.predicted.period_ms) : std::string("no plan"));
  PlanResult& kept = split_wins ? split : result;
  const PlanResult& other = split_wins ? result : split;
  kept.notes.push_back(compared + (split_wins ? "; the split is kept" : "; whole backwards kept"));
  kept.planning_seconds += other.planning_seconds;
  kept.phases.insert(kept.phases.end(), other.phases.begin(), other.phases.end());
  kept.cut_by_time_limit = kept.cut_by_time_limit || other.cut_by_time_limit;
  return std::move(kept);
}

madpipe::partition::InFlight madpipe::partition::least_in_flight(const PlannerOptions& options,
                                                                 const Platform& platform) {
  switch (options.algorithm) {
    case Algorithm::OneFOneB:
    case Algorithm::PipeDream:
    case Algorithm::ZbH1:
      return [](int stages_after) { return stages_after; };
    case Algorithm::GPipe: {
      const int micro_batches =
          options.gpipe_micro_batches > 0 ? options.gpipe_micro_batches : platform.gpus;
      return [micro_batches](int) { return micro_batches; };
    }
    case Algorithm::MadPipe:
    case Algorithm::Contiguous:
    case Algorithm::Ilp:
    case Algorithm::Interleaved:
    case Algorithm::ZbV:
      break;
  }
  return [](int) { return 1; };
}

madpipe::partition::MemoryFloor madpipe::partition::algorithm_memory_floor(
    const ChainCosts& costs, const Platform& platform, const PlannerOptions& options,
    StageOptions* remat, const std::function<bool()>& out_of_time) {
  return memory_floor(costs, platform, least_in_flight(options, platform), remat, out_of_time);
}

std::int64_t madpipe::partition::smallest_feasible_memory(const Profile& profile,
                                                          const Platform& platform,
                                                          const PlannerOptions& options) {
  check_platform(platform);
  if (profile.layers.empty()) throw_invalid("", "/layers", "the profile has no layers");
  if (uses_fixed_placement(options.algorithm)) {
    // The memory of its least-memory pattern.
    const bool split =
        options.algorithm == Algorithm::ZbV && options.split_backward != BackwardSplit::Off;
    const ChainCosts costs(split ? profile : without_split_backward(profile));
    const std::optional<Allocation> allocation =
        fixed_placement(costs, platform, options.algorithm);
    return allocation ? least_memory(costs, platform, *allocation) : -1;
  }
  const ChainCosts costs(profile);
  StageOptions remat(profile, options.remat);
  const MemoryFloor floor = algorithm_memory_floor(costs, platform, options, &remat);
  return floor.fits ? floor.bytes : -1;
}
