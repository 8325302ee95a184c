#pragma once

#include "core/platform.hpp"
#include "core/profile.hpp"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace madpipe::testing {

// Per-GPU memory (1 PiB) that no test chain comes near.
inline constexpr std::int64_t kHugeMemory = std::int64_t{1} << 50;

// A chain whose layer l has forward time fwd[l], backward time bwd[l] (default 0), weights w[l]
// (default 0) and activations act[l] (default 0); input_bytes = act_in.
Profile make_chain(const std::vector<double>& fwd, const std::vector<double>& bwd = {},
                   const std::vector<std::int64_t>& weights = {},
                   const std::vector<std::int64_t>& outputs = {}, std::int64_t input_bytes = 0);

// Two layers f = 1, b = 2, weights 100 and 200 bytes, activations 500 and 10 bytes, input 300.
Profile two_layer_profile();

// Four layers (f = 1, b = 2); layers 0 and 3 (an embedding and a head) share 600 bytes of their
// 1000 and 700 weight bytes (tied_weights).
Profile tied_chain();

// A random heterogeneous chain of `layers` layers: times in [0.5, 5] ms, weights and activations
// in [1, 100] MB, saved bytes in [0, 100] MB.
Profile random_chain(std::mt19937& rng, int layers);

// `gpus` GPUs of `memory_bytes` each, linked at `bandwidth_bytes_per_ms`, keeping `weight_copies`.
Platform make_platform(int gpus, std::int64_t memory_bytes, double bandwidth_bytes_per_ms,
                       int weight_copies);

// `gpus` GPUs of kHugeMemory; 5e7 B/ms sends random_chain's 1-100 MB activations in 0.02-2 ms.
Platform huge_memory_platform(int gpus, double bandwidth_bytes_per_ms = 5e7, int weight_copies = 3);

// `gpus` GPUs of 1 MB each keeping 3 weight copies; 1000 B/ms by default (1 ms per kB sent).
Platform small_platform(int gpus, double bandwidth_bytes_per_ms = 1000);

// Path of a profile shipped in configs/profiles ("resnet50", "gpt2_small", "gpt2_xl16").
std::string shipped_profile_path(const std::string& name);
// Path of a fixture in tests/data.
std::string test_data_path(const std::string& name);

}  // namespace madpipe::testing
