#include "runtime/train/master_weights.hpp"

madpipe::runtime::MasterWeights::MasterWeights(ChainModel& model, torch::Dtype dtype)
    : dtype_(dtype) {
  torch::NoGradGuard no_grad;
  for (int l = 0; l < model.size(); ++l) {
    if (!model.holds(l)) continue;
    for (const torch::Tensor& p : model.layers[l].ptr()->parameters()) {
      if (!p.is_floating_point() || by_parameter_.count(p.unsafeGetTensorImpl())) continue;
      torch::Tensor master = p.detach().to(torch::kFloat, false, true).requires_grad_(true);
      by_parameter_.emplace(p.unsafeGetTensorImpl(), Pair{p, std::move(master)});
    }
  }
  for (int l = 0; l < model.size(); ++l)
    if (model.holds(l)) model.layers[l].ptr()->to(dtype);
}

torch::Tensor madpipe::runtime::MasterWeights::master_of(const torch::Tensor& parameter) const {
  const auto it = by_parameter_.find(parameter.unsafeGetTensorImpl());
  return it == by_parameter_.end() ? parameter : it->second.master;
}

std::vector<torch::Tensor> madpipe::runtime::MasterWeights::masters_of(
    const std::vector<torch::Tensor>& parameters) const {
  std::vector<torch::Tensor> out;
  out.reserve(parameters.size());
  for (const torch::Tensor& p : parameters) out.push_back(master_of(p));
  return out;
}

void madpipe::runtime::MasterWeights::fold_gradients(
    const std::vector<torch::Tensor>& parameters) const {
  torch::NoGradGuard no_grad;
  const double factor = scale_ ? 1.0 / *scale_ : 1.0;
  for (const torch::Tensor& p : parameters) {
    const auto it = by_parameter_.find(p.unsafeGetTensorImpl());
    if (it == by_parameter_.end() || !p.grad().defined()) continue;
    torch::Tensor& grad = it->second.master.mutable_grad();
    if (grad.defined()) {
      grad.add_(p.grad(), factor);
    } else {
      grad = p.grad().to(torch::kFloat);
      if (factor != 1.0) grad.mul_(factor);
    }
    it->second.parameter.mutable_grad() = torch::Tensor();
  }
}

void madpipe::runtime::MasterWeights::fold_all_gradients() const {
  std::vector<torch::Tensor> parameters;
  for (const auto& [key, pair] : by_parameter_) parameters.push_back(pair.parameter);
  fold_gradients(parameters);
}

void madpipe::runtime::MasterWeights::copy_to_layers() const {
  torch::NoGradGuard no_grad;
  for (const auto& [key, pair] : by_parameter_) pair.parameter.copy_(pair.master);
}
