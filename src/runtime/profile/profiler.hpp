#pragma once

#include "core/profile.hpp"
#include "runtime/data/data.hpp"
#include "runtime/device/op_timer.hpp"
#include "runtime/model/model.hpp"
#include "runtime/profile/profile_run.hpp"

#include <string>
#include <vector>

#include <torch/torch.h>

namespace madpipe::runtime {

struct ProfilerOptions {
  torch::Device device = torch::kCPU;  // the model and the sample must already be there
  int warmup = 2;                      // untimed runs per layer before the timed ones
  int repeats = 10;                    // timed runs per layer; the profile keeps the median
  HostClock clock = HostClock::Wall;   // CPU: the clock of the times (op_timer.hpp)
  // The dtype the layers the profiler builds compute in (--precision bf16: bfloat16); the sample
  // must be in it already (in_precision) and the loss computed in fp32 (compute_loss_in_fp32).
  torch::Dtype layer_dtype = torch::kFloat;
};

// Measures every layer of the chain with one micro-batch, on options.device: forward and backward
// time (CUDA: the device is synchronized around each timed op; CPU: steady clock), weight bytes
// (parameters and buffers), output bytes, the bytes autograd saves for the backward besides the
// input and output, and the transient workspace peaks of the forward and the backward (CUDA
// allocator statistics; on CPU the counting allocator, installed here). The last layer's times
// and saved bytes include the loss, and its output is the loss (4 bytes). A layer with parts that
// can leave their weight gradient to a later W (weight_gradients.hpp) gets its backward's split:
// the times of B (the input gradient) and W, in proportion to their own medians and adding up to
// backward_ms, and the bytes W keeps from the end of B.
// Parameter gradients are left cleared; buffers (batch-norm statistics) move as in training.
// Layers the model does not hold are built on options.device for their measurement and dropped
// after it, so that one layer's tensors are alive at a time besides the held ones.
ProfileMeasurement profile_model(ChainModel& model, const Batch& sample, const std::string& name,
                                 const ProfilerOptions& options = {});

}  // namespace madpipe::runtime
