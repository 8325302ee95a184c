#pragma once

#include "runtime/config/training_settings.hpp"
#include "runtime/model/batch.hpp"
#include "runtime/model/model.hpp"

#include <memory>

#include <torch/torch.h>

namespace madpipe::runtime {

// The dtype layers compute in under `precision` (fp32: float).
torch::Dtype compute_dtype(Precision precision);

// `batch` as the first layer takes it in `precision`: floating inputs in the compute dtype (token
// ids and targets unchanged).
Batch in_precision(Batch batch, Precision precision);

// The model's loss computed in fp32 whatever dtype its last layer returns (as mixed-precision
// training computes it): wraps model.loss.
void compute_loss_in_fp32(ChainModel& model);

// fp16's loss scaling: a backward through the model's loss starts from `scale` (its value at that
// backward) times the loss's gradient, while the loss's value stays what the loss computes (wraps
// model.loss; losses computed without gradients are untouched).
void scale_loss_gradient(ChainModel& model, std::shared_ptr<const double> scale);

// Throws Error{Unsupported} naming --precision when `device` cannot compute in its dtype (a
// matrix product and a softmax in it fail).
void check_precision_runs(Precision precision, const torch::Device& device);

}  // namespace madpipe::runtime
