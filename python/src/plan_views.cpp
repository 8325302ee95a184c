#include "plan_views.hpp"

#include "core/platform.hpp"
#include "core/units.hpp"
#include "partition/planner.hpp"
#include "plan/step.hpp"
#include "plan/time_breakdown.hpp"
#include "plan/timeline.hpp"
#include "schedule/memory.hpp"
#include "schedule/shared_weights.hpp"
#include "schedule/stage.hpp"

#include <optional>
#include <vector>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

namespace nb = nanobind;

namespace {

// As `madpipe plan` describes the platform.
std::string describe(const madpipe::Platform& platform) {
  using madpipe::format_bandwidth;
  const int nodes = madpipe::num_nodes(platform);
  const std::string nodes_text = nodes < 2 ? std::string()
                                           : " in " + std::to_string(nodes) + " nodes of " +
                                                 std::to_string(platform.gpus_per_node);
  const std::string links_text =
      nodes < 2 || madpipe::has_uniform_links(platform)
          ? "links at " + format_bandwidth(madpipe::slowest_link_bandwidth(platform))
          : "links at " + format_bandwidth(platform.bandwidth_bytes_per_ms) +
                " within a node and " + format_bandwidth(madpipe::inter_node_bandwidth(platform)) +
                " between nodes";
  return std::to_string(platform.gpus) + (platform.gpus == 1 ? " GPU" : " GPUs") + " with " +
         madpipe::format_bytes(static_cast<double>(platform.memory_bytes)) + " each" + nodes_text +
         ", " + links_text + ", C = " + std::to_string(platform.weight_copies) +
         (platform.host_bandwidth_bytes_per_ms > 0
              ? ", host link at " + format_bandwidth(platform.host_bandwidth_bytes_per_ms)
              : std::string());
}

nb::list memory_of(const madpipe::plan::Plan& plan) {
  nb::list gpus;
  for (const madpipe::schedule::GpuMemory& memory :
       madpipe::schedule::evaluate_memory(plan.stages, plan.pattern, plan.platform)) {
    nb::dict gpu;
    gpu["weights"] = memory.weights;
    gpu["activations"] = memory.activations;
    gpu["buffers"] = memory.buffers;
    gpu["workspace"] = memory.workspace;
    gpus.append(gpu);
  }
  return gpus;
}

nb::object time_of(const madpipe::plan::Plan& plan, const madpipe::Profile* profile) {
  std::optional<madpipe::plan::TimeBreakdown> time = plan.predicted.time;
  if (!time && profile) time = madpipe::plan::time_breakdown(plan, *profile);
  if (!time) return nb::none();
  nb::dict out;
  out["useful"] = time->useful;
  out["recomputation"] = time->recomputation;
  out["imbalance"] = time->imbalance;
  out["tied_exchange"] = time->tied_exchange;
  out["waiting"] = time->waiting;
  out["busy"] = time->busy;
  return std::move(out);
}

nb::list tied_weights_of(const madpipe::plan::Plan& plan) {
  nb::list placements;
  for (const madpipe::schedule::SharedWeightPlacement& placement :
       madpipe::schedule::shared_weight_placements(plan.stages)) {
    nb::dict out;
    out["group"] = placement.group;
    out["bytes"] = placement.bytes;
    out["gpus"] = placement.gpus;
    placements.append(out);
  }
  return placements;
}

nb::list node_crossings_of(const madpipe::plan::Plan& plan) {
  nb::list crossings;
  if (madpipe::num_nodes(plan.platform) < 2) return crossings;
  for (std::size_t s = 0; s + 1 < plan.stages.size(); ++s) {
    const madpipe::schedule::Stage& from = plan.stages[s];
    const int to = plan.stages[s + 1].gpu;
    const int from_node = madpipe::node_of(plan.platform, from.gpu);
    const int to_node = madpipe::node_of(plan.platform, to);
    if (from_node == to_node) continue;
    nb::dict out;
    out["stage"] = from.id;
    out["from_gpu"] = from.gpu;
    out["to_gpu"] = to;
    out["from_node"] = from_node;
    out["to_node"] = to_node;
    out["bytes"] = from.output_bytes;
    out["transfer_ms"] =
        madpipe::schedule::transfer_ms(from.output_bytes, plan.platform, from.gpu, to);
    crossings.append(out);
  }
  return crossings;
}

}  // namespace

nb::dict madpipe::python::plan_details(const plan::Plan& plan, const Profile* profile) {
  nb::dict out;
  out["in_flight"] =
      schedule::concurrent_activations(plan.pattern, static_cast<int>(plan.stages.size()));
  out["memory"] = memory_of(plan);
  out["platform_text"] = describe(plan.platform);
  out["nodes"] = num_nodes(plan.platform);
  out["time"] = time_of(plan, profile);
  out["step_lower_bound_ms"] =
      plan.predicted.step
          ? nb::cast(plan::step_lower_bound_ms(plan, plan.predicted.step->micro_batches))
          : nb::none();
  out["compute_bound_ms"] =
      profile ? nb::cast(partition::lower_bound_period_ms(*profile, plan.platform)) : nb::none();
  out["tied_weights"] = tied_weights_of(plan);
  out["node_crossings"] = node_crossings_of(plan);
  return out;
}

std::string madpipe::python::plan_svg(const plan::Plan& plan, int micro_batches) {
  return plan::to_svg({plan::timeline_of_plan(plan, micro_batches)});
}
