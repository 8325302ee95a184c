#pragma once

#include <torch/torch.h>

namespace madpipe::runtime {

// One micro-batch: the first stage's input and the loss's target.
struct Batch {
  torch::Tensor input;
  torch::Tensor target;
};

}  // namespace madpipe::runtime
