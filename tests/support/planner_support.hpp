#pragma once

#include "partition/planner.hpp"
#include "solver/solve.hpp"

#include <algorithm>
#include <vector>

namespace madpipe::testing {

// The planning algorithms this build can run: all of them, less the full ILP where no MILP
// backend (CBC, GLPK) was built.
inline std::vector<partition::Algorithm> runnable_algorithms() {
  std::vector<partition::Algorithm> out;
  for (partition::Algorithm algorithm : partition::all_algorithms())
    if (algorithm != partition::Algorithm::Ilp || !solver::built_backends().empty())
      out.push_back(algorithm);
  return out;
}

// The profile with every layer's backward split: `weight_fraction` of it in W, which keeps half
// the layer's saved bytes from the end of B.
inline Profile with_split_backward(Profile profile, double weight_fraction) {
  for (Layer& layer : profile.layers) {
    SplitBackward split;
    split.weight_ms = layer.backward_ms * weight_fraction;
    split.input_ms = layer.backward_ms - split.weight_ms;
    split.kept_bytes = layer.saved_bytes / 2;
    layer.split_backward = split;
  }
  return profile;
}

// Whether the plan's pattern has W ops (split backwards).
inline bool has_weight_ops(const plan::Plan& plan) {
  return std::any_of(plan.pattern.ops.begin(), plan.pattern.ops.end(),
                     [](const schedule::Op& op) { return op.kind == schedule::OpKind::W; });
}

}  // namespace madpipe::testing
