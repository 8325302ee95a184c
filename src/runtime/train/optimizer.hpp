#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace madpipe::runtime {

struct TrainingSettings;

// The optimizer of the config (adamw | sgd) over `parameters`, at --learning-rate; weight decay
// applies to the parameters of two or more dimensions only (two parameter groups).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainingSettings& config,
                                                        std::vector<torch::Tensor> parameters);

// Sets the learning rate of every parameter group (the schedule's value for the coming step).
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

// An optimizer's state of one parameter as plain tensors (AdamW: step, exp_avg, exp_avg_sq and,
// with amsgrad, max_exp_avg_sq; SGD: the momentum buffer), so that it can move to another rank
// and into another optimizer. Empty when the optimizer holds none for it yet.
std::vector<torch::Tensor> export_param_state(const torch::optim::Optimizer& optimizer,
                                              const torch::Tensor& parameter);
void import_param_state(torch::optim::Optimizer& optimizer, const torch::Tensor& parameter,
                        const std::vector<torch::Tensor>& state);

// The exported state of every parameter, by parameter (its TensorImpl, which set_data keeps).
using ParamStates = std::map<const void*, std::vector<torch::Tensor>>;
inline const void* param_key(const torch::Tensor& parameter) {
  return parameter.unsafeGetTensorImpl();
}

}  // namespace madpipe::runtime
