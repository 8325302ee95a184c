#include "partition/full_ilp.hpp"

#include "schedule/ilp_schedule.hpp"
#include "schedule/memory.hpp"
#include "schedule/pattern_ilp.hpp"
#include "schedule/retime.hpp"
#include "schedule/search.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>

namespace madpipe::partition {

using schedule::Op;
using schedule::OpKind;
using schedule::Stage;

// One stage per layer, layer l on gpu_of_layer[l].
static std::vector<Stage> layer_stages(const ChainCosts& costs,
                                       const std::vector<int>& gpu_of_layer) {
  std::vector<int> first_layers(gpu_of_layer.size());
  std::iota(first_layers.begin(), first_layers.end(), 0);
  return schedule::make_stages(costs, first_layers, gpu_of_layer);
}

ScheduledStages expand_to_layers(const ChainCosts& costs, const ScheduledStages& scheduled) {
  std::vector<int> gpu_of_layer(static_cast<std::size_t>(costs.num_layers()));
  for (const Stage& s : scheduled.stages)
    for (int l = s.first_layer; l <= s.last_layer; ++l)
      gpu_of_layer[static_cast<std::size_t>(l)] = s.gpu;
  ScheduledStages out;
  out.stages = layer_stages(costs, gpu_of_layer);
  out.pattern.period_ms = scheduled.pattern.period_ms;
  out.pattern.k = scheduled.pattern.k;
  for (const Op& op : scheduled.pattern.ops) {
    const Stage& stage = scheduled.stages[static_cast<std::size_t>(op.stage)];
    if (schedule::is_transfer(op.kind)) {
      Op moved = op;
      moved.stage = stage.last_layer;
      out.pattern.ops.push_back(moved);
      continue;
    }
    // F runs its layers in chain order, B and W in reverse; W only those that split.
    double t = op.start_ms;
    const bool forward = op.kind == OpKind::F;
    for (int i = 0; i <= stage.last_layer - stage.first_layer; ++i) {
      const int l = forward ? stage.first_layer + i : stage.last_layer - i;
      const Stage& layer = out.stages[static_cast<std::size_t>(l)];
      if (op.kind == OpKind::W && !layer.splits_backward()) continue;
      Op part = op;
      part.stage = l;
      part.start_ms = t;
      part.duration_ms = schedule::compute_op_ms(layer, op.kind);
      t += part.duration_ms;
      out.pattern.ops.push_back(part);
    }
  }
  schedule::normalize(out.pattern);
  schedule::sort_ops(out.pattern);
  return out;
}

// Stages `s` and `s + 1` as one: its F starts with F of s, its B with B of s + 1, its W (when
// either splits) with the W of s, or of s + 1 when s does not split; retimed.
static std::optional<ScheduledStages> merged(const ChainCosts& costs, const Platform& platform,
                                             const ScheduledStages& in, int s) {
  ScheduledStages out;
  for (int i = 0; i < static_cast<int>(in.stages.size()); ++i) {
    if (i == s + 1) continue;
    Stage stage = in.stages[static_cast<std::size_t>(i)];
    const int last =
        i == s ? in.stages[static_cast<std::size_t>(s + 1)].last_layer : stage.last_layer;
    stage = schedule::make_stage(costs, static_cast<int>(out.stages.size()), stage.first_layer,
                                 last, stage.gpu);
    out.stages.push_back(stage);
  }
  out.pattern.period_ms = in.pattern.period_ms;
  out.pattern.k = in.pattern.k;
  const int weight_of = in.stages[static_cast<std::size_t>(s)].splits_backward() ? s : s + 1;
  for (const Op& op : in.pattern.ops) {
    const bool keep = op.stage < s || op.stage > s + 1 || (op.kind == OpKind::F && op.stage == s) ||
                      (op.kind == OpKind::B && op.stage == s + 1) ||
                      (op.kind == OpKind::W && op.stage == weight_of) ||
                      (schedule::is_transfer(op.kind) && op.stage == s + 1);
    if (!keep) continue;
    Op moved = op;
    if (moved.stage > s) --moved.stage;
    if (!schedule::is_transfer(moved.kind))
      moved.duration_ms =
          schedule::compute_op_ms(out.stages[static_cast<std::size_t>(moved.stage)], moved.kind);
    out.pattern.ops.push_back(moved);
  }
  auto retimed = schedule::retime(out.pattern, out.stages, platform);
  if (!retimed) return std::nullopt;
  out.pattern = *retimed;
  return out;
}

ScheduledStages merge_stages(const ChainCosts& costs, const Platform& platform,
                             ScheduledStages scheduled) {
  const double period = scheduled.pattern.period_ms;
  for (int s = 0; s + 1 < static_cast<int>(scheduled.stages.size());) {
    if (scheduled.stages[static_cast<std::size_t>(s)].gpu !=
        scheduled.stages[static_cast<std::size_t>(s + 1)].gpu) {
      ++s;
      continue;
    }
    auto candidate = merged(costs, platform, scheduled, s);
    if (candidate && candidate->pattern.period_ms <= period * (1 + 1e-9) &&
        schedule::fits_memory(candidate->stages, candidate->pattern, platform)) {
      scheduled = std::move(*candidate);
    } else {
      ++s;
    }
  }
  return scheduled;
}

// The full ILP chooses the GPUs and times every transfer over the slowest link; on a platform
// whose links differ, a warm start must take those times too: its transfers get them and it is
// retimed (keeping its order and shifts) from a period long enough for them.
static std::optional<ScheduledStages> at_slowest_links(const Platform& platform,
                                                       ScheduledStages start) {
  if (has_uniform_links(platform)) return start;
  double added = 0;
  for (Op& op : start.pattern.ops) {
    if (!schedule::is_transfer(op.kind)) continue;
    const double slow = schedule::transfer_ms(
        start.stages[static_cast<std::size_t>(op.stage)].output_bytes, platform);
    added += std::max(0.0, slow - op.duration_ms);
    op.duration_ms = slow;
  }
  start.pattern.period_ms += added;
  auto retimed = schedule::retime(start.pattern, start.stages, platform);
  if (!retimed) return std::nullopt;
  start.pattern = *retimed;
  return start;
}

FullIlpResult full_ilp(const ChainCosts& costs, const Platform& platform,
                       const FullIlpOptions& options) {
  FullIlpResult result;
  // Blocks = layers; their GPUs are what the program decides. With every boundary cut between
  // two GPUs, running one micro-batch at a time is the least memory any allocation can use: its
  // period bounds every period worth finding.
  std::vector<int> alternating(static_cast<std::size_t>(costs.num_layers()));
  for (int l = 0; l < costs.num_layers(); ++l)
    alternating[static_cast<std::size_t>(l)] = platform.gpus > 1 ? l % 2 : 0;
  schedule::PatternIlp::Spec spec;
  spec.blocks = layer_stages(costs, alternating);
  spec.fixed_allocation = false;
  spec.period_upper_bound_ms = schedule::sequential_period_ms(
      spec.blocks, with_uniform_links(platform, slowest_link_bandwidth(platform)));
  std::optional<ScheduledStages> start;
  if (options.warm_start && options.warm_start->pattern.k == 1)
    start = at_slowest_links(platform, expand_to_layers(costs, *options.warm_start));
  if (start) {
    // A hair above the start's period: the solver must be able to take the start as it is.
    spec.period_upper_bound_ms = start->pattern.period_ms * (1 + 1e-6);
  }
  spec.period_upper_bound_ms = std::max(spec.period_upper_bound_ms, 1e-9);
  schedule::PatternIlp ilp(spec, platform);
  if (start) result.warm_started = ilp.set_start(start->stages, start->pattern);
  schedule::SolvedPatternIlp solved = schedule::solve_pattern_ilp(
      ilp, options.backend, options.solve, options.mps_path, options.period_lower_bound_ms);
  result.solve = std::move(solved.solve);
  if (solved.decoded)
    result.plan = merge_stages(
        costs, platform,
        ScheduledStages{std::move(solved.decoded->stages), std::move(solved.decoded->pattern)});
  return result;
}

}  // namespace madpipe::partition
