#include "runtime/weight_gradients.hpp"

#include <unordered_set>
#include <utility>

namespace {
thread_local madpipe::runtime::DeferredWeightGradients* open_scope = nullptr;

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// [..., features] as a matrix of rows.
torch::Tensor rows(const torch::Tensor& t) { return t.reshape({-1, t.size(-1)}); }

void accumulate(const torch::Tensor& parameter, torch::Tensor gradient) {
  if (!parameter.grad().defined())
    parameter.mutable_grad() = std::move(gradient);
  else
    parameter.mutable_grad().add_(gradient);
}

// y = x W^T + b. Its backward yields the input gradient, and the weight and bias gradients
// unless the forward ran in a DeferWeightGradients scope: those then wait in the scope's
// collection, with the input and the output gradient they are computed from.
struct DeferredLinearFunction : torch::autograd::Function<DeferredLinearFunction> {
  static torch::Tensor forward(
      AutogradContext* ctx, const torch::Tensor& input, const torch::Tensor& weight,
      const torch::Tensor& bias,
      const c10::intrusive_ptr<madpipe::runtime::DeferredWeightGradients>& into) {
    ctx->save_for_backward({input, weight});
    // The parameters themselves (autograd's saved copies of leaves are other tensor objects on
    // some versions): their .grad is where W adds.
    ctx->saved_data["weight"] = weight;
    ctx->saved_data["bias"] = bias;
    ctx->saved_data["into"] = c10::IValue::make_capsule(into);
    return torch::nn::functional::linear(input, weight, bias);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& input = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& output_grad = grad_outputs[0];
    torch::Tensor input_grad;
    if (ctx->needs_input_grad(0)) input_grad = output_grad.matmul(weight);
    auto into = c10::static_intrusive_pointer_cast<madpipe::runtime::DeferredWeightGradients>(
        ctx->saved_data["into"].toCapsule());
    into->add({input, output_grad, ctx->saved_data["weight"].toTensor(),
               ctx->saved_data["bias"].toTensor()});
    return {input_grad, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};
}  // namespace

void madpipe::runtime::DeferredWeightGradients::add(Linear linear) {
  std::lock_guard<std::mutex> lock(mutex_);
  linears_.push_back(std::move(linear));
}

void madpipe::runtime::DeferredWeightGradients::run() {
  std::vector<Linear> linears;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    linears.swap(linears_);
  }
  torch::NoGradGuard no_grad;
  for (Linear& l : linears) {
    const torch::Tensor g = rows(l.output_grad);
    if (l.weight.requires_grad()) accumulate(l.weight, g.t().mm(rows(l.input)));
    if (l.bias.defined() && l.bias.requires_grad()) accumulate(l.bias, g.sum(0));
    l = Linear{};  // frees what it held as soon as it is done
  }
}

bool madpipe::runtime::DeferredWeightGradients::empty() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return linears_.empty();
}

std::int64_t madpipe::runtime::DeferredWeightGradients::kept_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::unordered_set<const void*> seen;
  std::int64_t bytes = 0;
  for (const Linear& l : linears_)
    for (const torch::Tensor* t : {&l.input, &l.output_grad})
      if (t->defined() && seen.insert(t->storage().unsafeGetStorageImpl()).second)
        bytes += static_cast<std::int64_t>(t->storage().nbytes());
  return bytes;
}

void madpipe::runtime::DeferredWeightGradients::copy_out_of(const torch::Tensor& storage) {
  if (!storage.defined()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (Linear& l : linears_)
    for (torch::Tensor* t : {&l.input, &l.output_grad})
      if (t->defined() && t->storage().is_alias_of(storage.storage())) *t = t->clone();
}

madpipe::runtime::DeferWeightGradients::DeferWeightGradients(
    c10::intrusive_ptr<DeferredWeightGradients> into)
    : into_(std::move(into)), previous_(open_scope) {
  open_scope = into_.get();
}

madpipe::runtime::DeferWeightGradients::~DeferWeightGradients() { open_scope = previous_; }

torch::Tensor madpipe::runtime::deferrable_linear(const torch::nn::Linear& linear,
                                                  const torch::Tensor& input) {
  if (open_scope == nullptr || !torch::GradMode::is_enabled() || !linear->weight.requires_grad())
    return torch::nn::functional::linear(input, linear->weight, linear->bias);
  return DeferredLinearFunction::apply(
      input, linear->weight, linear->bias,
      c10::intrusive_ptr<DeferredWeightGradients>::unsafe_reclaim_from_nonowning(open_scope));
}
