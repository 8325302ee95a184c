#include "partition/data_parallel.hpp"

#include "core/error.hpp"
#include "core/units.hpp"
#include "plan/simulate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

madpipe::Platform madpipe::partition::replica_platform(const Platform& platform, int pipeline_gpus,
                                                       bool* aligned) {
  Platform replica = platform;
  replica.gpus = pipeline_gpus;
  const int per_node = platform.gpus_per_node;
  bool same_everywhere = true;
  if (num_nodes(platform) < 2 || per_node % pipeline_gpus == 0) {
    // Every replica inside one node.
    replica.gpus_per_node = 0;
    replica.inter_node_bandwidth_bytes_per_ms = 0;
  } else if (pipeline_gpus % per_node != 0) {
    // Replicas straddle node boundaries at different positions: no one node layout fits all.
    same_everywhere = false;
    replica = with_uniform_links(replica, slowest_link_bandwidth(platform));
  }
  if (aligned) *aligned = same_everywhere;
  return replica;
}

double madpipe::partition::all_reduce_bandwidth(const Platform& platform, int pipeline_gpus,
                                                int position) {
  const int first_node = node_of(platform, position);
  for (int rank = position + pipeline_gpus; rank < platform.gpus; rank += pipeline_gpus)
    if (node_of(platform, rank) != first_node) return inter_node_bandwidth(platform);
  return platform.bandwidth_bytes_per_ms;
}

// End of the last backward (B, or W on a split stage) of each stage in the simulated step.
static std::vector<double> last_backward_ends(const madpipe::plan::SimResult& run,
                                              std::size_t num_stages) {
  std::vector<double> ends(num_stages, 0.0);
  for (const madpipe::plan::SimOp& op : run.ops)
    if (op.kind == madpipe::schedule::OpKind::B || op.kind == madpipe::schedule::OpKind::W)
      ends[static_cast<std::size_t>(op.stage)] =
          std::max(ends[static_cast<std::size_t>(op.stage)], op.end_ms);
  return ends;
}

void madpipe::partition::estimate_step(DataParallelChoice& choice, const Platform& platform,
                                       int global_batch, double all_reduce_latency_ms) {
  const plan::Plan& plan = choice.plan;
  const int m = choice.micro_batches;
  plan::SimOptions sim;
  sim.micro_batches = m;
  // The executor runs each GPU's list as fast as it can: the pattern's order, not its clock.
  sim.policy = plan::StartPolicy::Asap;
  const plan::SimResult run = plan::simulate(plan, sim);
  choice.period_ms = plan.pattern.normalized_period_ms();
  choice.pipeline_ms = run.step_ms;
  // A short run may beat m periods where the period comes from the steady state's own cycles.
  choice.fill_drain_ms = std::max(0.0, run.step_ms - m * choice.period_ms);

  const std::vector<double> ready = last_backward_ends(run, plan.stages.size());
  double busiest = 0, latest_end = run.step_ms;
  for (int gpu = 0; gpu < plan.platform.gpus; ++gpu) {
    std::vector<const schedule::Stage*> stages;
    for (const schedule::Stage& stage : plan.stages)
      if (stage.gpu == gpu) stages.push_back(&stage);
    std::stable_sort(stages.begin(), stages.end(), [&](const auto* a, const auto* b) {
      return ready[static_cast<std::size_t>(a->id)] < ready[static_cast<std::size_t>(b->id)];
    });
    const double bandwidth = all_reduce_bandwidth(platform, plan.platform.gpus, gpu);
    double end = 0, busy = 0;
    for (const schedule::Stage* stage : stages) {
      const double reduce = ring_all_reduce_ms(stage->weight_bytes, choice.replicas, bandwidth,
                                               all_reduce_latency_ms);
      end = std::max(end, ready[static_cast<std::size_t>(stage->id)]) + reduce;
      busy += reduce;
    }
    busiest = std::max(busiest, busy);
    latest_end = std::max(latest_end, end);
  }
  // Then each tied weight's gradients are summed over the pipeline's GPUs that hold a copy.
  latest_end += schedule::tied_exchange_ms(plan.stages, plan.platform);
  choice.all_reduce_ms = busiest;
  choice.all_reduce_exposed_ms = latest_end - run.step_ms;
  choice.step_ms = latest_end;
  choice.samples_per_s = choice.step_ms > 0 ? 1000.0 * global_batch / choice.step_ms : 0.0;
  choice.peak_memory_bytes = plan.predicted.memory_bytes.empty()
                                 ? 0
                                 : *std::max_element(plan.predicted.memory_bytes.begin(),
                                                     plan.predicted.memory_bytes.end());
}

static void check_inputs(const madpipe::Profile& profile, const madpipe::Platform& platform,
                         const madpipe::partition::DataParallelOptions& options) {
  using madpipe::throw_invalid;
  madpipe::check_platform(platform);
  if (profile.layers.empty()) throw_invalid("", "/layers", "the profile has no layers");
  if (profile.batch < 1)
    throw_invalid("", "/batch", "must be >= 1, got " + std::to_string(profile.batch));
  if (options.global_batch < 1 || options.global_batch % profile.batch != 0)
    throw_invalid("", "global_batch",
                  "must be a positive multiple of the profile's batch (" +
                      std::to_string(profile.batch) + "), got " +
                      std::to_string(options.global_batch));
  if (!(options.all_reduce_latency_ms >= 0))
    throw_invalid("", "all_reduce_latency_ms", "must be >= 0");
}

static std::string join_warnings(const std::string& a, const std::string& b) {
  return a.empty() ? b : b.empty() ? a : a + "; " + b;
}

// Plans the pipeline of one choice and times its step, or says why it is rejected.
static madpipe::partition::DataParallelChoice evaluate_choice(
    const madpipe::Profile& profile, const madpipe::Platform& platform,
    const madpipe::partition::DataParallelOptions& options, int replicas) {
  using namespace madpipe;
  partition::DataParallelChoice choice;
  choice.replicas = replicas;
  choice.pipeline_gpus = platform.gpus / replicas;
  const int pipeline_gpus = choice.pipeline_gpus;
  const std::int64_t samples_per_round = std::int64_t{replicas} * profile.batch;  // m = 1
  if (options.global_batch % samples_per_round != 0) {
    choice.reason = "the global batch does not split: " + std::to_string(options.global_batch) +
                    " is not a multiple of D x batch = " + std::to_string(samples_per_round);
    return choice;
  }
  choice.micro_batches = static_cast<int>(options.global_batch / samples_per_round);
  const int layers = static_cast<int>(profile.layers.size());
  if (pipeline_gpus > layers) {
    choice.reason = "P = " + std::to_string(pipeline_gpus) + " GPUs exceed the " +
                    std::to_string(layers) + " layers";
    return choice;
  }
  partition::PlannerOptions planner = options.planner;
  planner.progress = nullptr;
  // GPipe's pattern is the whole step: its micro-batches are the replica's m.
  planner.micro_batches_per_step = choice.micro_batches;
  bool aligned = true;
  const Platform replica = partition::replica_platform(platform, pipeline_gpus, &aligned);
  partition::PlanResult result = partition::make_plan(profile, replica, planner);
  choice.planning_seconds = result.planning_seconds;
  if (!result.feasible) {
    choice.reason = result.reason;
    return choice;
  }
  choice.feasible = true;
  choice.plan = std::move(result.plan);
  choice.plan.replicas = replicas;
  choice.notes = std::move(result.notes);
  partition::estimate_step(choice, platform, options.global_batch, options.all_reduce_latency_ms);
  if (!aligned)
    choice.warning = "the replicas sit differently on the nodes: every pipeline link planned at " +
                     format_bandwidth(replica.bandwidth_bytes_per_ms);
  if (choice.micro_batches < pipeline_gpus)
    choice.warning = join_warnings(choice.warning, "m = " + std::to_string(choice.micro_batches) +
                                                       " < P = " + std::to_string(pipeline_gpus) +
                                                       ": mostly fill and drain");
  return choice;
}

static std::string describe_choice(const madpipe::partition::DataParallelChoice& choice) {
  using madpipe::format_ms;
  std::string line =
      "D=" + std::to_string(choice.replicas) + " x P=" + std::to_string(choice.pipeline_gpus);
  if (choice.micro_batches > 0) line += ", m=" + std::to_string(choice.micro_batches);
  if (!choice.feasible) return line + ": rejected: " + choice.reason;
  char throughput[32];
  std::snprintf(throughput, sizeof throughput, "%.1f", choice.samples_per_s);
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.2f", choice.planning_seconds);
  return line + ": " + format_ms(choice.period_ms) + " per micro-batch, step " +
         format_ms(choice.step_ms) + ", " + throughput + " samples/s (" + seconds + " s)";
}

madpipe::partition::DataParallelResult madpipe::partition::plan_data_parallel(
    const Profile& profile, const Platform& platform, const DataParallelOptions& options) {
  check_inputs(profile, platform, options);
  const auto started = std::chrono::steady_clock::now();
  std::vector<int> replica_counts;  // fewest pipeline GPUs first: the quickest plans
  for (int replicas = platform.gpus; replicas >= 1; --replicas)
    if (platform.gpus % replicas == 0) replica_counts.push_back(replicas);
  DataParallelResult result;
  // The time limit bounds the whole request: each choice gets an even share of what is left,
  // so what a quick one leaves goes to those after it.
  double seconds_left = options.planner.time_limit_s;
  for (std::size_t i = 0; i < replica_counts.size(); ++i) {
    DataParallelOptions mine = options;
    // Rounded to hundredths: the share appears in the notes of a plan it cut.
    mine.planner.time_limit_s = std::max(
        1e-2,
        std::floor(100 * seconds_left / static_cast<double>(replica_counts.size() - i)) / 100);
    result.choices.push_back(evaluate_choice(profile, platform, mine, replica_counts[i]));
    seconds_left -= result.choices.back().planning_seconds;
    if (options.planner.progress)
      options.planner.progress("[" + std::to_string(i + 1) + "/" +
                               std::to_string(replica_counts.size()) + "] " +
                               describe_choice(result.choices.back()));
  }
  std::stable_sort(result.choices.begin(), result.choices.end(),
                   [](const DataParallelChoice& a, const DataParallelChoice& b) {
                     if (a.feasible != b.feasible) return a.feasible;
                     if (a.feasible && a.samples_per_s != b.samples_per_s)
                       return a.samples_per_s > b.samples_per_s;
                     return a.replicas > b.replicas;
                   });
  result.planning_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}
