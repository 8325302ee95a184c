#pragma once

#include "core/profile.hpp"
#include "plan/plan.hpp"

#include <string>

#include <nanobind/nanobind.h>

namespace madpipe::python {

// What `madpipe plan` prints about a plan beyond its JSON, computed by the planner library, for
// Plan.summary() and Plan.stage_table() (madpipe/_summary.py):
//   in_flight: per stage, the micro-batches whose activations it holds at once;
//   memory: per GPU, {weights, activations, buffers, workspace} in bytes;
//   platform_text: "4 GPUs with 8.0 GiB each, links at 12.0 GB/s, C = 3"; nodes: how many;
//   time: the breakdown of the period (predicted.time, else computed with the profile; None
//     without either);
//   step_lower_bound_ms: for a plan that predicts its step (None otherwise);
//   compute_bound_ms: the period compute alone allows (None without the profile);
//   tied_weights: [{group, bytes, gpus}]; node_crossings: [{stage, from_gpu, to_gpu, from_node,
//     to_node, bytes, transfer_ms}], the stage boundaries whose transfers cross nodes.
// `profile` may be null.
nanobind::dict plan_details(const plan::Plan& plan, const Profile* profile);

// The Gantt chart `madpipe show --plan FILE --svg OUT` draws: one step of `micro_batches`
// (0: enough for the steady state), as an SVG document.
std::string plan_svg(const plan::Plan& plan, int micro_batches);

}  // namespace madpipe::python
