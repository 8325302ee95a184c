#pragma once

#include <cstdint>
#include <functional>

#include <c10/core/Device.h>

namespace madpipe::runtime {

// The random numbers of a layer's forward (dropout masks) are a function of the run's seed, the
// step, the micro-batch and the layer, not of which rank runs the layer or what ran before it on
// that rank: a model trains alike however it is split.

// The key of one micro-batch of one step (the micro-batch counted over all the step's replicas).
std::uint64_t micro_batch_random_key(std::uint64_t seed, std::int64_t step, int micro_batch);

// Seeds the CPU generator and, on a GPU, the device's for the forward of `layer` of the micro-batch
// with `key`.
void seed_layer_forward(std::uint64_t key, int layer, const c10::Device& device);

// Micro-batch i of a program -> its key; null: the generators are left as they are.
using RandomKeyOf = std::function<std::uint64_t(int micro_batch)>;

}  // namespace madpipe::runtime
