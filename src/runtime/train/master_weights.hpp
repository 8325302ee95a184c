#pragma once

#include "runtime/model/model.hpp"

#include <map>
#include <memory>
#include <vector>

#include <torch/torch.h>

namespace madpipe::runtime {

// Mixed precision (--precision bf16, fp16): the layers this rank holds compute with bf16 (fp16)
// weights and buffers, and fp32 copies of the weights (the masters) are what trains: after each
// backward of a micro-batch the layers' bf16 gradients are added into the masters' fp32 gradients
// (and dropped), so gradients accumulate, are averaged over replicas, summed over tied copies,
// clipped and stepped in fp32; after each optimizer step (and a checkpoint's load) the masters are
// cast back into the layers. Checkpoints hold the masters, so a run resumes exactly.
class MasterWeights {
 public:
  // Copies the held layers' floating parameters (fp32, as built) into masters on their device,
  // then casts the layers' parameters and buffers to `dtype`. A tensor several held layers share
  // (a tied weight) has one master.
  MasterWeights(ChainModel& model, torch::Dtype dtype);

  // The master of a layer's parameter (a parameter without one is returned as it is).
  torch::Tensor master_of(const torch::Tensor& parameter) const;
  std::vector<torch::Tensor> masters_of(const std::vector<torch::Tensor>& parameters) const;

  // fp16's loss scaling: from now on the layers' gradients are `scale` (its value when they are
  // folded) times the true ones, and fold_gradients divides them by it.
  void unscale_gradients_by(std::shared_ptr<const double> scale) { scale_ = std::move(scale); }
  // Adds the parameters' gradients into their masters' gradients, in fp32, and drops them.
  void fold_gradients(const std::vector<torch::Tensor>& parameters) const;
  // fold_gradients of every parameter with a master (the plain loop, after each micro-batch).
  void fold_all_gradients() const;
  // Every layer parameter takes its master's value, in the layer's dtype.
  void copy_to_layers() const;
  torch::Dtype dtype() const noexcept { return dtype_; }

 private:
  struct Pair {
    torch::Tensor parameter, master;
  };
  std::map<const void*, Pair> by_parameter_;
  torch::Dtype dtype_;
  std::shared_ptr<const double> scale_;  // null: gradients are not scaled
};

}  // namespace madpipe::runtime
