#pragma once

#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace madpipe::runtime {

// Sizes of the built-in models; one struct for all of them, each model reads its fields.
struct ModelConfig {
  std::string name = "gpt";  // "gpt" (character-level transformer), "mlp" or "cnn" (ResNet-style)
  int layers = 4;            // transformer blocks / hidden layers / residual blocks
  int width = 64;            // embedding / hidden width / channels of the first block
  int heads = 4;             // attention heads (gpt)
  int context = 32;          // tokens per sample (gpt)
  int vocab = 96;            // characters (gpt; set from the corpus)
  int inputs = 16;           // input features (mlp)
  int outputs = 4;           // output features (mlp) / classes (cnn)
  int image = 32;            // image height and width (cnn)
  std::uint64_t seed = 1;    // initial weights
};

// A model as the planner sees it: an ordered chain of layers, each a module taking one tensor
// and returning one, and a loss of the last layer's output and the target.
struct ChainModel {
  std::vector<std::string> names;
  std::vector<torch::nn::AnyModule> layers;
  std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)> loss;

  std::vector<torch::Tensor> parameters(int first, int last) const;
  // The layers' buffers (batch-norm running statistics), in a fixed order.
  std::vector<torch::Tensor> buffers(int first, int last) const;
};

// Builds a model with deterministic initial weights (same on every rank for the same config).
ChainModel build_model(const ModelConfig& config);

}  // namespace madpipe::runtime
