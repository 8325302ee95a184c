#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/profile.hpp"

namespace madpipe::testing {

// A chain whose layer l has forward time fwd[l], backward time bwd[l] (default 0), weights w[l]
// (default 0) and activations act[l] (default 0); input_bytes = act_in.
Profile make_chain(const std::vector<double>& fwd, const std::vector<double>& bwd = {},
                   const std::vector<std::int64_t>& weights = {},
                   const std::vector<std::int64_t>& outputs = {}, std::int64_t input_bytes = 0);

// A random heterogeneous chain of `layers` layers: times in [0.5, 5] ms, weights and activations
// in [1, 100] MB, saved bytes in [0, 100] MB.
Profile random_chain(std::mt19937& rng, int layers);

// Path of a profile shipped in configs/profiles ("resnet50", "gpt2_small", "gpt2_xl16").
std::string shipped_profile_path(const std::string& name);
// Path of a fixture in tests/data.
std::string test_data_path(const std::string& name);

}  // namespace madpipe::testing
