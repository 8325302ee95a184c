#include "runtime/model/weight_gradients.hpp"

#include <array>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

namespace {
thread_local madpipe::runtime::DeferredWeightGradients* open_scope = nullptr;

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Deferred = madpipe::runtime::DeferredWeightGradients::Deferred;

c10::intrusive_ptr<madpipe::runtime::DeferredWeightGradients> into_of(AutogradContext* ctx) {
  return c10::static_intrusive_pointer_cast<madpipe::runtime::DeferredWeightGradients>(
      ctx->saved_data["into"].toCapsule());
}

// A bias as a custom function's argument: an undefined tensor is no variable (nullopt).
std::optional<torch::Tensor> optional_parameter(const torch::Tensor& parameter) {
  if (!parameter.defined()) return std::nullopt;
  return parameter;
}

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
      const std::optional<torch::Tensor>& bias,
      const c10::intrusive_ptr<madpipe::runtime::DeferredWeightGradients>& into) {
    ctx->save_for_backward({input, weight});
    // The parameters themselves (autograd's saved copies of leaves are other tensor objects on
    // some versions): their .grad is where W adds.
    ctx->saved_data["weight"] = weight;
    ctx->saved_data["bias"] = bias.value_or(torch::Tensor());
    ctx->saved_data["into"] = c10::IValue::make_capsule(into);
    return torch::nn::functional::linear(input, weight, bias.value_or(torch::Tensor()));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& input = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& output_grad = grad_outputs[0];
    torch::Tensor input_grad;
    if (ctx->needs_input_grad(0)) input_grad = output_grad.matmul(weight);
    into_of(ctx)->add({Deferred::Layer::Linear,
                       input,
                       output_grad,
                       ctx->saved_data["weight"].toTensor(),
                       ctx->saved_data["bias"].toTensor(),
                       {}});
    return {input_grad, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

using Convolution = Deferred::Convolution;

// The gradients of a 2-d convolution that `mask` asks for: (input, weight, bias).
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> convolution_gradients(
    const torch::Tensor& output_grad, const torch::Tensor& input, const torch::Tensor& weight,
    const torch::Tensor& bias, const Convolution& c, std::array<bool, 3> mask) {
  const std::vector<std::int64_t> no_output_padding(c.stride.size(), 0);
  return at::convolution_backward(
      output_grad, input, weight,
      bias.defined() ? at::OptionalIntArrayRef(bias.sizes()) : at::OptionalIntArrayRef(), c.stride,
      c.padding, c.dilation, /*transposed=*/false, no_output_padding, c.groups, mask);
}

// A 2-d convolution, deferring like DeferredLinearFunction.
struct DeferredConv2dFunction : torch::autograd::Function<DeferredConv2dFunction> {
  static torch::Tensor forward(
      AutogradContext* ctx, const torch::Tensor& input, const torch::Tensor& weight,
      const std::optional<torch::Tensor>& bias, const Convolution& convolution,
      const c10::intrusive_ptr<madpipe::runtime::DeferredWeightGradients>& into) {
    ctx->save_for_backward({input, weight});
    ctx->saved_data["weight"] = weight;
    ctx->saved_data["bias"] = bias.value_or(torch::Tensor());
    ctx->saved_data["stride"] = convolution.stride;
    ctx->saved_data["padding"] = convolution.padding;
    ctx->saved_data["dilation"] = convolution.dilation;
    ctx->saved_data["groups"] = convolution.groups;
    ctx->saved_data["into"] = c10::IValue::make_capsule(into);
    return torch::conv2d(input, weight, bias, convolution.stride, convolution.padding,
                         convolution.dilation, convolution.groups);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& input = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& output_grad = grad_outputs[0];
    Convolution convolution;
    convolution.stride = ctx->saved_data["stride"].toIntVector();
    convolution.padding = ctx->saved_data["padding"].toIntVector();
    convolution.dilation = ctx->saved_data["dilation"].toIntVector();
    convolution.groups = ctx->saved_data["groups"].toInt();
    const torch::Tensor bias = ctx->saved_data["bias"].toTensor();
    torch::Tensor input_grad;
    if (ctx->needs_input_grad(0))
      input_grad = std::get<0>(convolution_gradients(output_grad, input, weight, bias, convolution,
                                                     {true, false, false}));
    into_of(ctx)->add({Deferred::Layer::Conv2d, input, output_grad,
                       ctx->saved_data["weight"].toTensor(), bias, std::move(convolution)});
    return {input_grad, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Rows of the weight picked by integer ids. Its backward has no input gradient: the weight's,
// deferred, is all of it.
struct DeferredEmbeddingFunction : torch::autograd::Function<DeferredEmbeddingFunction> {
  static torch::Tensor forward(
      AutogradContext* ctx, const torch::Tensor& ids, const torch::Tensor& weight,
      const c10::intrusive_ptr<madpipe::runtime::DeferredWeightGradients>& into) {
    ctx->saved_data["ids"] = ids;
    ctx->saved_data["weight"] = weight;
    ctx->saved_data["into"] = c10::IValue::make_capsule(into);
    return torch::embedding(weight, ids);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    into_of(ctx)->add({Deferred::Layer::Embedding,
                       ctx->saved_data["ids"].toTensor(),
                       grad_outputs[0],
                       ctx->saved_data["weight"].toTensor(),
                       torch::Tensor(),
                       {}});
    return {torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};
}  // namespace

void madpipe::runtime::DeferredWeightGradients::add(Deferred deferred) {
  // Without their autograd history: an input made by an earlier op would keep that op's node
  // alive until W, and through it the stage's input and its gradient (the graph's leaf holds
  // its .grad), which the memory model frees at the end of B.
  deferred.input = deferred.input.detach();
  deferred.output_grad = deferred.output_grad.detach();
  std::lock_guard<std::mutex> lock(mutex_);
  deferred_.push_back(std::move(deferred));
}

void madpipe::runtime::DeferredWeightGradients::run() {
  std::vector<Deferred> all;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    all.swap(deferred_);
  }
  torch::NoGradGuard no_grad;
  for (Deferred& d : all) {
    const bool weight = d.weight.requires_grad();
    const bool bias = d.bias.defined() && d.bias.requires_grad();
    if (d.layer == Deferred::Layer::Conv2d) {
      auto gradients = convolution_gradients(d.output_grad, d.input, d.weight, d.bias,
                                             d.convolution, {false, weight, bias});
      if (weight) accumulate(d.weight, std::move(std::get<1>(gradients)));
      if (bias) accumulate(d.bias, std::move(std::get<2>(gradients)));
    } else if (d.layer == Deferred::Layer::Embedding) {
      if (weight)
        accumulate(d.weight, torch::zeros_like(d.weight).index_add_(0, d.input.reshape({-1}),
                                                                    rows(d.output_grad)));
    } else {
      const torch::Tensor g = rows(d.output_grad);
      if (weight) accumulate(d.weight, g.t().mm(rows(d.input)));
      if (bias) accumulate(d.bias, g.sum(0));
    }
    d = Deferred{};  // frees what it held as soon as it is done
  }
}

bool madpipe::runtime::DeferredWeightGradients::empty() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return deferred_.empty();
}

std::int64_t madpipe::runtime::DeferredWeightGradients::kept_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::unordered_set<const void*> seen;
  std::int64_t bytes = 0;
  for (const Deferred& d : deferred_)
    for (const torch::Tensor* t : {&d.input, &d.output_grad})
      if (t->defined() && seen.insert(t->storage().unsafeGetStorageImpl()).second)
        bytes += static_cast<std::int64_t>(t->storage().nbytes());
  return bytes;
}

void madpipe::runtime::DeferredWeightGradients::copy_out_of(const torch::Tensor& storage) {
  if (!storage.defined()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  // One copy per view: layers that read the same input (a residual block's branch and its
  // shortcut) share it, as they shared the arena, and as the profile counts their kept bytes.
  using View = std::tuple<const void*, std::vector<std::int64_t>, std::vector<std::int64_t>,
                          c10::ScalarType>;
  std::map<View, torch::Tensor> copies;
  for (Deferred& d : deferred_)
    for (torch::Tensor* t : {&d.input, &d.output_grad}) {
      if (!t->defined() || !t->storage().is_alias_of(storage.storage())) continue;
      const View view{t->data_ptr(), t->sizes().vec(), t->strides().vec(), t->scalar_type()};
      auto copy = copies.find(view);
      if (copy == copies.end()) copy = copies.emplace(view, t->clone()).first;
      *t = copy->second;
    }
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
      input, linear->weight, optional_parameter(linear->bias),
      c10::intrusive_ptr<DeferredWeightGradients>::unsafe_reclaim_from_nonowning(open_scope));
}

torch::Tensor madpipe::runtime::deferrable_conv2d(torch::nn::Conv2d conv,
                                                  const torch::Tensor& input) {
  const auto& options = conv->options;
  const auto* padding = std::get_if<torch::ExpandingArray<2>>(&options.padding());
  if (open_scope == nullptr || !torch::GradMode::is_enabled() || !conv->weight.requires_grad() ||
      padding == nullptr ||
      !std::holds_alternative<torch::enumtype::kZeros>(options.padding_mode()))
    return conv->forward(input);
  Convolution convolution;
  convolution.stride = c10::IntArrayRef(options.stride()).vec();
  convolution.padding = c10::IntArrayRef(*padding).vec();
  convolution.dilation = c10::IntArrayRef(options.dilation()).vec();
  convolution.groups = options.groups();
  return DeferredConv2dFunction::apply(
      input, conv->weight, optional_parameter(conv->bias), convolution,
      c10::intrusive_ptr<DeferredWeightGradients>::unsafe_reclaim_from_nonowning(open_scope));
}

torch::Tensor madpipe::runtime::deferrable_embedding(torch::nn::Embedding embedding,
                                                     const torch::Tensor& ids) {
  const auto& options = embedding->options;
  if (open_scope == nullptr || !torch::GradMode::is_enabled() ||
      !embedding->weight.requires_grad() || options.padding_idx() || options.max_norm() ||
      options.scale_grad_by_freq() || options.sparse())
    return embedding->forward(ids);
  return DeferredEmbeddingFunction::apply(
      ids, embedding->weight,
      c10::intrusive_ptr<DeferredWeightGradients>::unsafe_reclaim_from_nonowning(open_scope));
}
