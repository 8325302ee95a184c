#include "runtime/model/precision.hpp"

torch::Dtype madpipe::runtime::compute_dtype(Precision precision) {
  switch (precision) {
    case Precision::Bf16:
      return torch::kBFloat16;
    case Precision::Fp16:
      return torch::kHalf;
    case Precision::Fp32:
      break;
  }
  return torch::kFloat;
}

madpipe::runtime::Batch madpipe::runtime::in_precision(Batch batch, Precision precision) {
  if (precision != Precision::Fp32 && batch.input.is_floating_point())
    batch.input = batch.input.to(compute_dtype(precision));
  return batch;
}

void madpipe::runtime::compute_loss_in_fp32(ChainModel& model) {
  model.loss = [loss = model.loss](const torch::Tensor& output, const torch::Tensor& target) {
    return loss(output.is_floating_point() ? output.to(torch::kFloat) : output, target);
  };
}
