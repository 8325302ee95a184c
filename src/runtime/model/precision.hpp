#pragma once

#include "runtime/config/training_settings.hpp"
#include "runtime/model/batch.hpp"
#include "runtime/model/model.hpp"

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

}  // namespace madpipe::runtime
