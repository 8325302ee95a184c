#pragma once

// The tensors autograd saves for a backward, collected while a scope is open, so that a stage
// sequence can move a recorded layer's saved activations (abar_k) to host memory and back.
//
// LibTorch without Python has no saved-tensor hooks of its own: the default autograd engine asks
// for them (Engine::get_default_saved_variable_hooks), and madpipe installs an engine that
// answers while a SavedTensorCollector is open on the thread. Where another engine is already the
// default (PyTorch's Python engine, in a Python process), nothing is collected.

#include <vector>

#include <torch/torch.h>

namespace madpipe::runtime {

// Frees the values of a stage output that has been sent or handed over, keeping its autograd
// node for the backward (an output without one keeps its values: nothing would run from it).
// What the node saved holds its own reference to the storage.
void release_values(torch::Tensor& output);

// output.backward(grad), also for an output whose values were released: the engine checks the
// gradient against the shape its node recorded, not against the tensor's current one.
void backward_from(const torch::Tensor& output, const torch::Tensor& grad);

class SavedTensorCollector {
 public:
  // Appends to `into` an alias (sharing storage) of every tensor autograd saves on this thread
  // while the collector lives, but for leaves that require gradients (parameters, input leaves).
  explicit SavedTensorCollector(std::vector<torch::Tensor>& into);
  ~SavedTensorCollector();
  SavedTensorCollector(const SavedTensorCollector&) = delete;
  SavedTensorCollector& operator=(const SavedTensorCollector&) = delete;

  // Whether collectors see saved tensors in this process (madpipe's engine is the default).
  static bool supported();

 private:
  std::vector<torch::Tensor>* previous_;
};

}  // namespace madpipe::runtime
