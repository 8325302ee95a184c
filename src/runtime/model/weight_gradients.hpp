#pragma once

// Split backwards (B then W): layers whose weight gradient can wait (Linear, Embedding, Conv2d)
// compute, in their backward, only the gradient of their input, and leave what the weight gradient
// needs (the layer's input and the gradient of its output) to a DeferredWeightGradients, which W
// runs later.
//
// Which forwards defer is decided when they run: a forward run while a DeferWeightGradients
// scope is open on the thread records the scope's collection in its autograd node, and its
// backward (on whatever thread the engine runs it) defers into it. Other forwards, and the layers
// that cannot defer, run the whole backward as usual.

#include <cstdint>
#include <mutex>
#include <vector>

#include <torch/torch.h>

namespace madpipe::runtime {

// The weight gradients deferred by the backward of one micro-batch of one stage.
class DeferredWeightGradients : public torch::CustomClassHolder {
 public:
  struct Deferred {
    enum class Layer { Linear, Embedding, Conv2d } layer = Layer::Linear;
    torch::Tensor input;        // Linear: [..., in]; Embedding: the ids [...]; Conv2d: [B, C, H, W]
    torch::Tensor output_grad;  // [..., out]; Conv2d: [B, out, H', W']
    torch::Tensor weight;       // the parameter (Linear [out, in], Embedding [rows, out], Conv2d
                                // [out, in / groups, kH, kW]): its .grad receives the gradient
    torch::Tensor bias;         // Linear, Conv2d: the parameter [out] (undefined: none)
    struct Convolution {
      std::vector<std::int64_t> stride, padding, dilation;
      std::int64_t groups = 1;
    } convolution;  // Conv2d only
  };

  void add(Deferred deferred);
  // Computes every deferred weight gradient and adds it into its parameter's .grad (as autograd
  // accumulates: the first defines it), in the order the backward deferred them; then forgets
  // them, freeing what they held.
  void run();
  bool empty() const;
  // Bytes of the distinct storages the deferred gradients hold (inputs and output gradients).
  std::int64_t kept_bytes() const;
  // Replaces each held tensor that lives in `storage` (a receive arena, which later messages
  // overwrite) by a copy of its own.
  void copy_out_of(const torch::Tensor& storage);

 private:
  mutable std::mutex mutex_;
  std::vector<Deferred> deferred_;
};

// While alive, the deferrable layers this thread forwards with gradients recorded defer their
// weight gradients to `into`. Scopes nest; the innermost wins.
class DeferWeightGradients {
 public:
  explicit DeferWeightGradients(c10::intrusive_ptr<DeferredWeightGradients> into);
  ~DeferWeightGradients();
  DeferWeightGradients(const DeferWeightGradients&) = delete;
  DeferWeightGradients& operator=(const DeferWeightGradients&) = delete;

 private:
  c10::intrusive_ptr<DeferredWeightGradients> into_;
  DeferredWeightGradients* previous_;
};

// linear->forward(input), whose backward defers the weight and bias gradients when a
// DeferWeightGradients scope is open here (and is the plain Linear otherwise).
torch::Tensor deferrable_linear(const torch::nn::Linear& linear, const torch::Tensor& input);

// conv->forward(input), whose backward defers the weight and bias gradients the same way; a
// convolution padded other than with zeros or by "same"/"valid" is the plain one.
torch::Tensor deferrable_conv2d(torch::nn::Conv2d conv, const torch::Tensor& input);

// embedding->forward(ids), whose backward (it has no input gradient) defers the weight's the
// same way; an embedding with a padding index, a norm limit, gradients scaled by frequency or
// sparse ones is the plain one.
torch::Tensor deferrable_embedding(torch::nn::Embedding embedding, const torch::Tensor& ids);

}  // namespace madpipe::runtime
