#pragma once

#include "partition/planner.hpp"
#include "solver/solve.hpp"
#include "support/test_support.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

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

// The zero-bubble paper's uniform case: p layers of F = 2 and B = 4 ms split evenly (F = B = W =
// 2 ms on a GPU each), each storing `stored_bytes`, of which W keeps a tenth.
inline Profile zero_bubble_chain(int p, std::int64_t stored_bytes) {
  Profile profile = make_chain(std::vector<double>(p, 2.0), std::vector<double>(p, 4.0));
  for (Layer& layer : profile.layers) layer.saved_bytes = stored_bytes;
  profile = with_split_backward(profile, 0.5);
  for (Layer& layer : profile.layers) layer.split_backward->kept_bytes = stored_bytes / 10;
  return profile;
}

// The same case cut in two chunks per GPU (interleaved, ZB-V): 2p layers of F = 1 ms and a
// backward of 2 ms split evenly (B = W = 1 ms), storing `stored_bytes`, of which W keeps a tenth.
inline Profile zero_bubble_chunks(int p, std::int64_t stored_bytes) {
  Profile profile = make_chain(std::vector<double>(2 * p, 1.0), std::vector<double>(2 * p, 2.0));
  for (Layer& layer : profile.layers) layer.saved_bytes = stored_bytes;
  profile = with_split_backward(profile, 0.5);
  for (Layer& layer : profile.layers) layer.split_backward->kept_bytes = stored_bytes / 10;
  return profile;
}

// Calls check(profile, platform, p, m) on the zero-bubble paper's uniform cases, each in a
// SCOPED_TRACE: p = 2, 3, 4 and 8 GPUs, layers that store nothing and 1000 bytes, m = p, 2p and
// 4p micro-batches per step, memory ample.
template <typename Check>
void for_each_zero_bubble_case(Check check) {
  for (int p : {2, 3, 4, 8})
    for (std::int64_t stored : {0, 1000}) {
      const Profile profile = zero_bubble_chain(p, stored);
      const Platform platform = huge_memory_platform(p);
      for (int m : {p, 2 * p, 4 * p}) {
        SCOPED_TRACE("p " + std::to_string(p) + " m " + std::to_string(m) + ", " +
                     std::to_string(stored) + " bytes stored");
        check(profile, platform, p, m);
      }
    }
}

// The plan `algorithm` makes, with the heuristic scheduler, of a shipped profile
// (configs/profiles/<profile_name>.json) on `gpus` GPUs of `memory_gib` GiB linked at
// `bandwidth_gb_per_s` GB/s; a failure when nothing fits.
inline plan::Plan shipped_plan(const std::string& profile_name, partition::Algorithm algorithm,
                               int gpus, double memory_gib, double bandwidth_gb_per_s) {
  const Profile profile = read_profile(shipped_profile_path(profile_name));
  Platform platform;
  platform.gpus = gpus;
  platform.memory_bytes = static_cast<std::int64_t>(memory_gib * (1LL << 30));
  platform.bandwidth_bytes_per_ms = bandwidth_gb_per_s * 1e6;
  partition::PlannerOptions options;
  options.algorithm = algorithm;
  options.scheduler = partition::Scheduler::Heuristic;
  const partition::PlanResult result = partition::make_plan(profile, platform, options);
  EXPECT_TRUE(result.feasible) << result.reason;
  return result.plan;
}

// Whether the plan's pattern has W ops (split backwards).
inline bool has_weight_ops(const plan::Plan& plan) {
  return std::any_of(plan.pattern.ops.begin(), plan.pattern.ops.end(),
                     [](const schedule::Op& op) { return op.kind == schedule::OpKind::W; });
}

}  // namespace madpipe::testing
