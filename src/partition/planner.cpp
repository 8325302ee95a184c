#include "partition/planner.hpp"

#include "core/chain.hpp"
#include "core/error.hpp"
#include "core/names.hpp"
#include "core/units.hpp"
#include "partition/allocation.hpp"
#include "partition/backward_splits.hpp"
#include "partition/loop_placements.hpp"
#include "partition/plan_search.hpp"
#include "partition/planning_budget.hpp"
#include "partition/step_choice.hpp"
#include "plan/step.hpp"
#include "plan/time_breakdown.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <functional>
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

// Layers are indivisible: among the k P + 1 longest, some GPU runs k + 1 (pigeonhole), at least
// the k + 1 shortest of them.
static double indivisible_layers_bound_ms(const madpipe::ChainCosts& costs, int gpus) {
  const int layers = costs.num_layers();
  if (gpus < 1 || layers <= gpus) return 0;
  std::vector<double> compute(static_cast<std::size_t>(layers));
  for (int l = 0; l < layers; ++l) compute[static_cast<std::size_t>(l)] = costs.compute_ms(l, l);
  std::sort(compute.begin(), compute.end(), std::greater<>());
  std::vector<double> prefix(compute.size() + 1, 0.0);  // prefix[j]: the j longest
  for (std::size_t j = 0; j < compute.size(); ++j) prefix[j + 1] = prefix[j] + compute[j];
  double bound = 0;
  for (int k = 1; static_cast<long long>(k) * gpus + 1 <= layers; ++k) {
    const int last = k * gpus;  // index of the (k P + 1)-th longest
    bound = std::max(bound, prefix[static_cast<std::size_t>(last) + 1] -
                                prefix[static_cast<std::size_t>(last - k)]);
  }
  return bound;
}

double madpipe::partition::lower_bound_period_ms(const ChainCosts& costs,
                                                 const Platform& platform) {
  double bound =
      std::max({costs.total_compute_ms() / std::max(1, platform.gpus), costs.max_layer_compute_ms(),
                indivisible_layers_bound_ms(costs, platform.gpus)});
  // A cut pays at least the fastest link's time, whichever GPUs it links.
  if (platform.gpus > 1 && platform.bandwidth_bytes_per_ms > 0)
    for (int l = 0; l + 1 < costs.num_layers(); ++l)
      bound = std::max(bound,
                       std::min(fastest_link_ms(costs, l, platform), costs.compute_ms(l, l + 1)));
  return bound;
}

double madpipe::partition::memory_bound_period_ms(const ChainCosts& costs,
                                                  const Platform& platform) {
  double bound = 0;
  double after = 0;  // sum over the layers from l to the end
  double held = 0;   // sum over the layers of stored bytes x after
  std::int64_t largest_workspace = 0;
  for (int l = costs.num_layers() - 1; l >= 0; --l) {
    after += costs.compute_ms(l, l) - costs.backward_weight_ms(l, l);
    const std::int64_t stored = costs.stored_bytes(l, l);
    largest_workspace = std::max(largest_workspace, costs.workspace_bytes(l, l));
    held += static_cast<double>(stored) * after;
    if (stored <= 0) continue;
    const std::int64_t room = platform.memory_bytes -
                              platform.weight_copies * costs.weight_bytes(l, l) -
                              costs.workspace_bytes(l, l);
    const std::int64_t most_in_flight = room / stored;
    if (most_in_flight >= 1) bound = std::max(bound, after / static_cast<double>(most_in_flight));
  }
  // All GPUs together: each layer's micro-batches are held at least `after` (its stage's round
  // trip is no shorter), and what the GPUs have for them is at most P M less every weight once
  // (C copies) and the largest workspace.
  if (costs.num_layers() > 0) {
    const double room =
        static_cast<double>(platform.gpus) * static_cast<double>(platform.memory_bytes) -
        static_cast<double>(platform.weight_copies) *
            static_cast<double>(costs.weight_bytes(0, costs.num_layers() - 1)) -
        static_cast<double>(largest_workspace);
    if (room > 0 && held > 0) bound = std::max(bound, held / room * (1 - 1e-9));
  }
  return bound;
}

double madpipe::partition::lower_bound_for(const plan::Plan& plan, const Profile& profile) {
  const ChainCosts costs(profile);
  double bound = lower_bound_period_ms(costs, plan.platform);
  for (const schedule::Stage& stage : plan.stages)
    if (stage.remat != schedule::RematStrategy::None ||
        stage.offload != schedule::OffloadStrategy::None)
      return bound;
  return std::max(bound, memory_bound_period_ms(costs, plan.platform));
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

// The profile with the backward split only on the layers `split` selects.
static madpipe::Profile with_split_on(madpipe::Profile profile,
                                      const std::function<bool(int)>& split) {
  for (std::size_t l = 0; l < profile.layers.size(); ++l)
    if (!split(static_cast<int>(l))) profile.layers[l].split_backward.reset();
  return profile;
}

// The step order its paper publishes for an algorithm's plan (interleaved 1F1B, ZB-V), nullopt
// for the others and where the order does not apply (see step_order.hpp).
static std::optional<madpipe::schedule::StepOrder> published_step_order(
    const madpipe::plan::Plan& plan, madpipe::partition::Algorithm algorithm, int micro_batches) {
  using madpipe::partition::Algorithm;
  if (algorithm == Algorithm::Interleaved)
    return madpipe::schedule::interleaved_1f1b_order(plan.stages, plan.platform.gpus,
                                                     micro_batches);
  if (algorithm == Algorithm::ZbV)
    return madpipe::schedule::zb_v_order(plan.stages, plan.platform.gpus, micro_batches);
  return std::nullopt;
}

// The plan's predicted fields: period (a tied weight's exchange included), bound, memory and
// where the time goes, and the step where the options give its micro-batches: for interleaved
// and zb-v, in their published order where it applies and fits the memory. Returns a note where
// such an algorithm's step cannot follow its published order.
static std::optional<std::string> predict(madpipe::plan::Plan& plan,
                                          const madpipe::Profile& profile,
                                          const madpipe::partition::PlannerOptions& options) {
  madpipe::plan::fill_predicted(plan, madpipe::partition::lower_bound_for(plan, profile),
                                options.micro_batches_per_step);
  plan.predicted.time = madpipe::plan::time_breakdown(plan, profile);
  const int m = options.micro_batches_per_step;
  if (m <= 0) return std::nullopt;
  plan.step_order = published_step_order(plan, options.algorithm, m);
  const bool ordered = plan.step_order.has_value();
  madpipe::plan::predict_step(plan, m);
  if (!madpipe::partition::uses_fixed_placement(options.algorithm) || plan.step_order)
    return std::nullopt;
  const std::string name = madpipe::partition::to_string(options.algorithm);
  if (ordered)
    return name + "'s published step order needs more than " +
           madpipe::format_bytes(static_cast<double>(plan.platform.memory_bytes)) +
           " on some GPU: the step follows the pattern";
  return name + " publishes no step order for " + std::to_string(m) + " micro-batches on " +
         std::to_string(plan.platform.gpus) +
         " GPUs (interleaved: a multiple of max(1, micro-batches / GPUs)): the step follows the "
         "pattern";
}

// What plans are compared by: the step's time where the options give its micro-batches, else
// the period.
static double objective_ms(const madpipe::plan::Plan& plan) {
  return plan.predicted.step ? plan.predicted.step->time_ms : plan.predicted.period_ms;
}

// One planning request on `profile` as it is (split backwards where it has them).
// `stated_limit_s`: the limit the user gave, which a note that the limit cut planning names (a
// request may have a share of it).
static madpipe::partition::PlanResult plan_profile(
    const madpipe::Profile& profile, const madpipe::Platform& platform,
    const madpipe::partition::PlannerOptions& options, double stated_limit_s) {
  using namespace madpipe;
  using namespace madpipe::partition;
  const auto started = std::chrono::steady_clock::now();
  const ChainCosts costs(profile);
  PlanningBudget::Settings settings;
  settings.time_limit_s = options.time_limit_s;
  settings.progress = options.progress;
  settings.detailed = options.detailed_progress;
  settings.clock = options.clock;
  PlanningBudget budget(std::move(settings));
  PlanningContext context(budget, platform, options.micro_batches_per_step);
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
                remat, plain_can_fit, memory_binds_plain_plans(costs, platform), context);
  PlanResult result;
  result.notes = context.notes();
  if (!budget.cuts().empty()) {
    result.cut_by_time_limit = true;
    std::string cut;
    for (const std::string& what : budget.cuts()) cut += (cut.empty() ? "" : "; ") + what;
    result.notes.push_back("the time limit of " + seconds_text(stated_limit_s) +
                           " cut planning short: " + cut +
                           "; a longer --time-limit may find a shorter period");
  }
  result.phases = budget.phases();
  result.allocations_total = context.allocations_total();
  result.allocations_scheduled = context.allocations_scheduled();
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
  if (std::optional<std::string> note = predict(plan, profile, options))
    result.notes.push_back(std::move(*note));
  return result;
}

enum class SplitKind { Whole, Everywhere, Partial };

// Whether a plan splits the backward of no stage, of every stage whose layers split (and that
// neither rematerializes nor offloads), or of some of them.
static SplitKind split_kind(const madpipe::plan::Plan& plan, const madpipe::ChainCosts& costs) {
  int split = 0, splittable = 0;
  for (const madpipe::schedule::Stage& stage : plan.stages) {
    split += stage.splits_backward() ? 1 : 0;
    splittable +=
        stage.splits_backward() || madpipe::schedule::can_split_backward(costs, stage) ? 1 : 0;
  }
  if (split == 0) return SplitKind::Whole;
  return split == splittable ? SplitKind::Everywhere : SplitKind::Partial;
}

// The layers whose stages split their backward: "layers 6..15", "layers 0..3, 8..11".
static std::string split_layers_text(const madpipe::plan::Plan& plan) {
  std::vector<madpipe::schedule::Stage> stages = plan.stages;
  std::sort(stages.begin(), stages.end(),
            [](const auto& a, const auto& b) { return a.first_layer < b.first_layer; });
  std::vector<std::pair<int, int>> ranges;
  for (const madpipe::schedule::Stage& stage : stages) {
    if (!stage.splits_backward()) continue;
    if (!ranges.empty() && ranges.back().second + 1 == stage.first_layer)
      ranges.back().second = stage.last_layer;
    else
      ranges.emplace_back(stage.first_layer, stage.last_layer);
  }
  std::string text;
  for (const auto& [first, last] : ranges)
    text += (text.empty() ? "" : ", ") +
            (first == last ? std::to_string(first)
                           : std::to_string(first) + ".." + std::to_string(last));
  return (ranges.size() == 1 && ranges[0].first == ranges[0].second ? "layer " : "layers ") + text;
}

// A plan of a partly split profile as the runtime runs it: a stage splits the backward of every
// layer of its own or of none (`profile`'s sums). Where a stage straddles the edge of the split,
// the stage is split whole, then left whole, each pattern scheduled again; the shorter that fits
// is kept. False when neither fits, or when such a stage rematerializes or offloads.
static bool split_as_profiled(madpipe::partition::PlanResult& result,
                              const madpipe::Profile& profile, const madpipe::Platform& platform,
                              const madpipe::partition::PlannerOptions& options) {
  using namespace madpipe;
  const ChainCosts costs(profile);
  std::vector<schedule::Stage>& stages = result.plan.stages;
  std::vector<std::size_t> straddling;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const schedule::Stage& stage = stages[s];
    const double profiled = costs.backward_weight_ms(stage.first_layer, stage.last_layer);
    if (!stage.splits_backward() ||
        std::abs(stage.backward_weight_ms - profiled) <= 1e-9 * std::max(1.0, profiled)) {
      if (stage.splits_backward()) stages[s] = schedule::with_split_backward(costs, stage);
      continue;
    }
    if (stage.uses_sequence()) return false;
    straddling.push_back(s);
  }
  if (straddling.empty()) return true;
  std::optional<schedule::ScheduledPattern> best;
  std::vector<schedule::Stage> best_stages;
  for (bool split : {true, false}) {
    std::vector<schedule::Stage> candidate = stages;
    for (std::size_t s : straddling)
      candidate[s] = split ? schedule::with_split_backward(costs, candidate[s])
                           : schedule::with_whole_backward(candidate[s]);
    schedule::ScheduleSearchOptions search;
    search.max_k = options.max_k;
    // The contiguous baseline schedules with 1F1B* alone; MadPipe with every family.
    if (options.algorithm == partition::Algorithm::Contiguous)
      search.families = {schedule::PatternFamily::OneFOneBStar};
    auto scheduled = schedule::schedule_under_memory(candidate, platform, search);
    if (scheduled && (!best || scheduled->pattern.normalized_period_ms() <
                                   best->pattern.normalized_period_ms())) {
      best = std::move(scheduled);
      best_stages = std::move(candidate);
    }
  }
  if (!best) return false;
  stages = std::move(best_stages);
  result.plan.pattern = std::move(best->pattern);
  result.plan.solver.reset();
  predict(result.plan, profile, options);
  return true;
}

// One planning request per choice of which layers split their backward, each with a share of
// what is left of the time limit: whole backwards, every layer split, and (not for the full ILP)
// the split on the first or last half or quarters of the chain only. The split fills idle time
// but keeps memory until W: where memory is short, splitting only where it costs least may beat
// both. Keeps the shortest period (step, with its micro-batches), with a note that compares them.
static madpipe::partition::PlanResult plan_choosing_splits(
    const madpipe::Profile& profile, const madpipe::Profile& whole,
    const madpipe::Platform& platform, const madpipe::partition::PlannerOptions& options) {
  using namespace madpipe;
  using namespace madpipe::partition;
  struct Request {
    Profile profile;
    double weight;      // share of the time left, against the other requests not run yet
    bool partial;       // split on some layers only
    std::string label;  // of its progress lines
  };
  std::vector<Request> requests{{whole, 2, false, "whole backwards"},
                                {profile, 2, false, "split backwards"}};
  if (options.algorithm != Algorithm::Ilp) {
    const int layers = static_cast<int>(profile.layers.size());
    std::vector<std::vector<bool>> seen;
    auto splits_of = [&](const Profile& p) {
      std::vector<bool> split(p.layers.size());
      for (std::size_t l = 0; l < p.layers.size(); ++l)
        split[l] = p.layers[l].split_backward.has_value();
      return split;
    };
    seen.push_back(splits_of(whole));
    seen.push_back(splits_of(profile));
    for (int quarter : {1, 2, 3}) {
      const int cut = layers * quarter / 4;
      if (cut <= 0 || cut >= layers) continue;
      for (bool late : {true, false}) {
        Profile partial = with_split_on(profile, [&](int l) { return late ? l >= cut : l < cut; });
        const std::vector<bool> split = splits_of(partial);
        if (std::find(seen.begin(), seen.end(), split) != seen.end()) continue;
        seen.push_back(split);
        const std::string layers_text =
            late ? std::to_string(cut) + ".." + std::to_string(layers - 1)
                 : std::to_string(0) + ".." + std::to_string(cut - 1);
        requests.push_back({std::move(partial), 1, true, "split on layers " + layers_text});
      }
    }
  }
  const auto started = std::chrono::steady_clock::now();
  double weight_left = 0;
  for (const Request& request : requests) weight_left += request.weight;
  std::vector<PlanResult> results;
  for (const Request& request : requests) {
    PlannerOptions share = options;
    if (std::isfinite(options.time_limit_s)) {
      const double spent =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      share.time_limit_s =
          std::max(0.0, options.time_limit_s - spent) * request.weight / weight_left;
    }
    weight_left -= request.weight;
    if (options.progress)
      share.progress = [&](const std::string& line) {
        options.progress("[" + request.label + "] " + line);
      };
    results.push_back(plan_profile(request.profile, platform, share, options.time_limit_s));
    PlanResult& planned = results.back();
    if (request.partial && planned.feasible &&
        !split_as_profiled(planned, profile, platform, options))
      planned.feasible = false;
  }
  const auto better = [](const PlanResult& a, const PlanResult& b) {
    return objective_ms(a.plan) < objective_ms(b.plan) * (1 - 1e-9);
  };
  std::size_t kept = 0;
  for (std::size_t i = 1; i < results.size(); ++i)
    if (results[i].feasible && (!results[kept].feasible || better(results[i], results[kept])))
      kept = i;
  // The note compares the best plan of each kind, whichever request found it.
  const ChainCosts costs(profile);
  std::array<const PlanResult*, 3> best_of{};  // by SplitKind
  for (const PlanResult& r : results) {
    if (!r.feasible) continue;
    const PlanResult*& best = best_of[static_cast<std::size_t>(split_kind(r.plan, costs))];
    if (!best || better(r, *best)) best = &r;
  }
  // "6.00 ms per micro-batch", or with a step "a step of 54.00 ms (6.00 ms per micro-batch)";
  // the first time with its unit, the others short.
  const auto text = [](const PlanResult* r, bool first) {
    if (!r) return std::string("no plan fits");
    const plan::Predicted& p = r->plan.predicted;
    if (!p.step) return format_ms(p.period_ms) + (first ? " per micro-batch" : "");
    return (first ? "a step of " : "") + format_ms(p.step->time_ms) + " (" +
           format_ms(p.period_ms) + (first ? " per micro-batch)" : ")");
  };
  const auto best_kind = [&](SplitKind kind) { return best_of[static_cast<std::size_t>(kind)]; };
  const SplitKind kept_kind =
      results[kept].feasible ? split_kind(results[kept].plan, costs) : SplitKind::Whole;
  std::string compared;
  if (kept_kind == SplitKind::Partial) {
    compared = "split backward (B and W) on " + split_layers_text(results[kept].plan) +
               " only: " + text(best_kind(SplitKind::Partial), true) + ", ";
    if (best_kind(SplitKind::Everywhere))
      compared += "on every layer: " + text(best_kind(SplitKind::Everywhere), false) + ", ";
    compared += "whole backwards: " + text(best_kind(SplitKind::Whole), false) +
                "; the partial split is kept";
  } else {
    // The best plan with any split (a local search may have left some stages whole).
    const PlanResult* everywhere = best_kind(SplitKind::Everywhere);
    const PlanResult* partial = best_kind(SplitKind::Partial);
    const PlanResult* split =
        !everywhere || (partial && better(*partial, *everywhere)) ? partial : everywhere;
    compared = "split backward (B and W): " + text(split, true) +
               ", whole backwards: " + text(best_kind(SplitKind::Whole), false) +
               (kept_kind == SplitKind::Whole ? "; whole backwards kept" : "; the split is kept");
  }
  PlanResult result = std::move(results[kept]);
  result.notes.push_back(compared);
  // Every request, and the rescheduling of partial plans.
  result.planning_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (i == kept) continue;
    result.phases.insert(result.phases.end(), results[i].phases.begin(), results[i].phases.end());
    result.cut_by_time_limit = result.cut_by_time_limit || results[i].cut_by_time_limit;
  }
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
  const auto started = std::chrono::steady_clock::now();
  const Profile whole = without_split_backward(profile);
  PlanResult result;
  if (options.split_backward == BackwardSplit::Off || !can_split_backward(options.algorithm) ||
      !ChainCosts(profile).has_split_backward())
    result = plan_profile(whole, platform, options, options.time_limit_s);
  else if (options.algorithm == Algorithm::ZbH1 || options.algorithm == Algorithm::ZbV)
    result = plan_profile(profile, platform, options, options.time_limit_s);  // split ones
  else
    result = plan_choosing_splits(profile, whole, platform, options);
  if (options.algorithm == Algorithm::MadPipe && options.micro_batches_per_step > 0) {
    keep_baseline_step_if_shorter(options.split_backward == BackwardSplit::Off ? whole : profile,
                                  platform, options, started, result);
    solve_the_step(options, started, result);
  }
  return result;
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
          options.micro_batches_per_step > 0 ? options.micro_batches_per_step : platform.gpus;
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
