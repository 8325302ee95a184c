#include "runtime/model/precision.hpp"

#include "core/error.hpp"

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

void madpipe::runtime::scale_loss_gradient(ChainModel& model, std::shared_ptr<const double> scale) {
  model.loss = [loss = model.loss, scale = std::move(scale)](const torch::Tensor& output,
                                                             const torch::Tensor& target) {
    torch::Tensor value = loss(output, target);
    if (value.requires_grad())
      value.register_hook([scale](const torch::Tensor& grad) { return grad * *scale; });
    return value;
  };
}

void madpipe::runtime::check_precision_runs(Precision precision, const torch::Device& device) {
  if (precision == Precision::Fp32) return;
  try {
    const torch::Tensor x =
        torch::ones({4, 4}, torch::dtype(compute_dtype(precision)).device(device));
    torch::softmax(x.matmul(x), -1).sum().item<double>();
  } catch (const c10::Error& e) {
    throw Error(ErrorKind::Unsupported, "", "precision",
                std::string("--precision ") + name_of(kPrecisionNames, precision) +
                    " does not run on " + device.str() + ": " + e.what_without_backtrace());
  }
}
