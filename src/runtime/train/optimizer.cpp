#include "runtime/train/optimizer.hpp"

#include "core/error.hpp"
#include "runtime/config/training_settings.hpp"

#include <cmath>
#include <sstream>
#include <type_traits>

namespace {
// The optimizer keys its state by parameter: a string of the TensorImpl address in LibTorch 1.x,
// the address itself in later versions.
template <class StateMap>
typename StateMap::key_type state_key(const StateMap&, const torch::Tensor& p) {
  using Key = typename StateMap::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;
    text << p.unsafeGetTensorImpl();
    return text.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

torch::Tensor copy_of(const torch::Tensor& t) { return t.defined() ? t.detach().clone() : t; }

// torch::optim::AdamW's update with one temporary of a parameter's size where LibTorch's step
// makes two at once (the square root and its quotient), so that an optimizer step stays within
// the workspace the memory model gives its stage (the backward's, which makes each weight
// gradient as a temporary). The same operations on the same values: the same updates, bit for
// bit, and the same state (checkpoints, export_param_state).
class AdamWInPlace final : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;

  torch::Tensor step(LossClosure closure = nullptr) override {
    torch::NoGradGuard no_grad;
    torch::Tensor loss;
    if (closure != nullptr) {
      at::AutoGradMode enable_grad(true);
      loss = closure();
    }
    for (auto& group : param_groups_) {
      const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
      for (auto& p : group.params())
        if (p.grad().defined()) update(p, options);
    }
    return loss;
  }

 private:
  void update(torch::Tensor& p, const torch::optim::AdamWOptions& options) {
    const torch::Tensor& grad = p.grad();
    if (options.weight_decay() != 0) p.mul_(1 - options.lr() * options.weight_decay());
    const auto key = state_key(state_, p);
    auto it = state_.find(key);
    if (it == state_.end()) {
      auto fresh = std::make_unique<torch::optim::AdamWParamState>();
      fresh->step(0);
      fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      if (options.amsgrad())
        fresh->max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      it = state_.emplace(key, std::move(fresh)).first;
    }
    auto& state = static_cast<torch::optim::AdamWParamState&>(*it->second);
    state.step(state.step() + 1);
    const auto [beta1, beta2] = options.betas();
    const double bias_correction1 = 1 - std::pow(beta1, state.step());
    const double bias_correction2 = 1 - std::pow(beta2, state.step());
    state.exp_avg().mul_(beta1).add_(grad, 1 - beta1);
    state.exp_avg_sq().mul_(beta2).addcmul_(grad, grad, 1 - beta2);
    if (options.amsgrad())
      torch::max_out(state.max_exp_avg_sq(), state.exp_avg_sq(), state.max_exp_avg_sq());
    torch::Tensor denom = (options.amsgrad() ? state.max_exp_avg_sq() : state.exp_avg_sq()).sqrt();
    denom.div_(std::sqrt(bias_correction2)).add_(options.eps());
    p.addcdiv_(state.exp_avg(), denom, -options.lr() / bias_correction1);
  }
};
}  // namespace

namespace {
// nanoGPT's rule: weights of two or more dimensions (matrices, embeddings, convolutions) decay;
// biases and norm scales do not. The optimizer's defaults are `kept` (no decay), and the group
// that decays carries its own options: LibTorch fills a group's options that hold their type's
// default value (a weight decay of 0) from the optimizer's defaults.
std::vector<torch::optim::OptimizerParamGroup> decay_groups(
    std::vector<torch::Tensor> parameters, const torch::optim::OptimizerOptions& decayed) {
  std::vector<torch::Tensor> decay, no_decay;
  for (torch::Tensor& p : parameters) (p.dim() >= 2 ? decay : no_decay).push_back(std::move(p));
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!no_decay.empty()) groups.emplace_back(std::move(no_decay));
  if (!decay.empty()) groups.emplace_back(std::move(decay), decayed.clone());
  return groups;
}
}  // namespace

std::unique_ptr<torch::optim::Optimizer> madpipe::runtime::make_optimizer(
    const TrainingSettings& c, std::vector<torch::Tensor> parameters) {
  switch (c.optimizer) {
    case OptimizerKind::AdamW: {
      const auto kept = torch::optim::AdamWOptions(c.learning_rate).weight_decay(0);
      return std::make_unique<AdamWInPlace>(
          decay_groups(std::move(parameters),
                       torch::optim::AdamWOptions(kept).weight_decay(c.weight_decay)),
          kept);
    }
    case OptimizerKind::Sgd: {
      const auto kept = torch::optim::SGDOptions(c.learning_rate).momentum(c.momentum);
      return std::make_unique<torch::optim::SGD>(
          decay_groups(std::move(parameters),
                       torch::optim::SGDOptions(kept).weight_decay(c.weight_decay)),
          kept);
    }
  }
  throw Error(ErrorKind::Internal, "", "optimizer", "an optimizer kind without its optimizer");
}

void madpipe::runtime::set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

std::vector<torch::Tensor> madpipe::runtime::export_param_state(
    const torch::optim::Optimizer& optimizer, const torch::Tensor& parameter) {
  const auto& states = optimizer.state();
  const auto it = states.find(state_key(states, parameter));
  if (it == states.end()) return {};
  if (const auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(it->second.get())) {
    std::vector<torch::Tensor> out{torch::tensor(static_cast<std::int64_t>(adamw->step())),
                                   copy_of(adamw->exp_avg()), copy_of(adamw->exp_avg_sq())};
    if (adamw->max_exp_avg_sq().defined()) out.push_back(copy_of(adamw->max_exp_avg_sq()));
    return out;
  }
  if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(it->second.get())) {
    if (!sgd->momentum_buffer().defined()) return {};
    return {copy_of(sgd->momentum_buffer())};
  }
  throw Error(ErrorKind::Internal, "", "optimizer", "cannot move the state of this optimizer");
}

void madpipe::runtime::import_param_state(torch::optim::Optimizer& optimizer,
                                          const torch::Tensor& parameter,
                                          const std::vector<torch::Tensor>& state) {
  if (state.empty()) return;
  auto& states = optimizer.state();
  const torch::Device device = parameter.device();
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer)) {
    if (state.size() != 3 && state.size() != 4)
      throw Error(ErrorKind::Internal, "", "optimizer", "AdamW state needs 3 or 4 tensors");
    auto adamw = std::make_unique<torch::optim::AdamWParamState>();
    adamw->step(state[0].item<std::int64_t>());
    adamw->exp_avg(state[1].to(device));
    adamw->exp_avg_sq(state[2].to(device));
    if (state.size() == 4) adamw->max_exp_avg_sq(state[3].to(device));
    states[state_key(states, parameter)] = std::move(adamw);
    return;
  }
  if (dynamic_cast<torch::optim::SGD*>(&optimizer)) {
    if (state.size() != 1)
      throw Error(ErrorKind::Internal, "", "optimizer", "SGD state needs 1 tensor");
    auto sgd = std::make_unique<torch::optim::SGDParamState>();
    sgd->momentum_buffer(state[0].to(device));
    states[state_key(states, parameter)] = std::move(sgd);
    return;
  }
  throw Error(ErrorKind::Internal, "", "optimizer", "cannot restore the state of this optimizer");
}
