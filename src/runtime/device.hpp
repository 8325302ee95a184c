#pragma once

#include "runtime/data.hpp"
#include "runtime/model.hpp"

#include <string>

#include <torch/torch.h>

namespace madpipe::runtime {

// The device named `name`: "cpu", "cuda:N", or "cuda" (the GPU of this process: its rank among
// the processes of its node, modulo the GPUs it sees; device 0 when `local_rank` < 0). Throws
// Error naming the option `device` for an unknown name, a missing GPU or an index out of range.
torch::Device device_of(const std::string& name, int local_rank = -1);

// Moves every layer's parameters and buffers to `device`.
void move_model(ChainModel& model, const torch::Device& device);
Batch on_device(Batch batch, const torch::Device& device);

}  // namespace madpipe::runtime
