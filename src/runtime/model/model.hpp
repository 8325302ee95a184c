#pragma once

#include "runtime/config/model_settings.hpp"

#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace madpipe::runtime {

// Sizes of the built-in models; one struct for all of them, each model reads its fields.
struct ModelConfig {
  ModelKind kind = ModelKind::Gpt;         // script: a TorchScript chain (script_model.hpp)
  std::string script;                      // script: the TorchScript file
  LossKind loss = LossKind::CrossEntropy;  // script
  int layers = 4;                          // transformer blocks / hidden layers / residual blocks
  int width = 64;                          // embedding / hidden width / channels of the first block
  int heads = 4;                           // attention heads (gpt)
  int context = 32;                        // tokens per sample (gpt)
  int vocab = 96;                          // characters (gpt; set from the corpus)
  int inputs = 16;                         // input features (mlp)
  int outputs = 4;                         // output features (mlp) / classes (cnn)
  int image = 32;                          // image height and width (cnn)
  std::uint64_t seed = 1;                  // initial weights
};

// One use of a parameter that several layers share: the layer, the parameter's index in the
// layer's parameters(), its name within the layer.
struct TiedUse {
  int layer = 0;
  int index = 0;
  std::string name;
};

// A model as the planner sees it: an ordered chain of layers, each a module taking one tensor
// and returning one, and a loss of the last layer's output and the target.
// A process holds only some layers (its stages'): the others are empty modules. Each layer's
// initial weights depend only on the model's seed and the layer's index, so any process builds
// any layer exactly as an unsplit model has it.
struct ChainModel {
  std::vector<std::string> names;
  std::vector<torch::nn::AnyModule> layers;  // empty where this process does not hold the layer
  std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)> loss;
  // Builds layer `layer` with its initial weights on the CPU; null for a model loaded whole
  // (TorchScript), whose layers cannot be rebuilt.
  std::function<torch::nn::AnyModule(int layer)> build_layer;

  int size() const { return static_cast<int>(names.size()); }
  bool holds(int layer) const { return !layers.at(layer).is_empty(); }
  // Builds `layer` on `device` where it is not held (Error{Unsupported} without build_layer).
  void materialize(int layer, const torch::Device& device);
  // Frees the layer's module (its tensors go when nothing else refers to them).
  void drop(int layer);

  // Throws Error{Internal} when a layer of [first, last] is not held.
  std::vector<torch::Tensor> parameters(int first, int last) const;
  // The layers' buffers (batch-norm running statistics), in a fixed order.
  std::vector<torch::Tensor> buffers(int first, int last) const;

  // The state_dict keys of parameters() and buffers(), in their order: the layer's name, a dot,
  // the tensor's name within the layer ("block0.attn.weight"; for an nn.Sequential saved as
  // TorchScript, "3.weight", as its state_dict has it). Throws as parameters() does.
  std::vector<std::string> parameter_keys(int first, int last) const;
  std::vector<std::string> buffer_keys(int first, int last) const;
  // Per layer, the names of its parameters and buffers within it where the module registers
  // them under other names (a TorchScript child's nested "attn.weight" as "attn_weight"); empty:
  // the registered names are the original ones.
  std::vector<std::vector<std::string>> original_parameter_names, original_buffer_names;

  // Parameters that several layers share (a tied embedding and output head), one group each,
  // uses in layer order. Layers of a group held by one process share one tensor; processes that
  // hold layers of one group sum their gradients (TiedGradients) so their copies stay equal.
  std::vector<std::vector<TiedUse>> tied_parameters;
  // Input ids must be below this (the rows of the first layer's embedding); 0: no limit known.
  std::int64_t input_id_limit = 0;
  // The model as its author wrote it (a TorchScript module's own forward), to check the chain
  // against; null: the chain is the model.
  std::function<torch::Tensor(const torch::Tensor&)> reference_forward;
  // Frees what build_layer keeps to build layers (a loaded TorchScript module), once the process
  // holds its layers; building another layer later loads it again. Null: nothing kept.
  std::function<void()> release_source;
};

// Which layers a process builds: all of them by default.
using LayerFilter = std::function<bool(int layer)>;

// Builds a model with deterministic initial weights (the same in every process for the same
// config), holding the layers `keep` selects, each built on the CPU and moved to `device` before
// the next is built.
ChainModel build_model(const ModelConfig& config, const LayerFilter& keep = {},
                       const torch::Device& device = torch::kCPU);

// Moves every layer's parameters and buffers to `device`.
void move_model(ChainModel& model, const torch::Device& device);

}  // namespace madpipe::runtime
