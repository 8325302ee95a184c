#pragma once

#include "core/names.hpp"

#include <optional>
#include <string>

namespace madpipe::runtime {

// Which chain model a run trains (--model).
enum class ModelKind {
  Gpt,     // character-level (or token-file) transformer
  Mlp,     // multi-layer perceptron on synthetic regression data
  Cnn,     // ResNet-style convolutional network on synthetic images
  Script,  // a TorchScript chain (--script)
};
inline constexpr Named<ModelKind> kModelKindNames[] = {{ModelKind::Gpt, "gpt"},
                                                       {ModelKind::Mlp, "mlp"},
                                                       {ModelKind::Cnn, "cnn"},
                                                       {ModelKind::Script, "script"}};

// The loss after a TorchScript chain's last layer (--loss).
enum class LossKind {
  CrossEntropy,  // logits over the last dimension against int64 class ids
  Mse,           // mean squared error against float targets
};
inline constexpr Named<LossKind> kLossNames[] = {{LossKind::CrossEntropy, "cross-entropy"},
                                                 {LossKind::Mse, "mse"}};

// [model]: a built-in model's sizes, or a TorchScript chain (`script`).
struct ModelSettings {
  ModelKind model = ModelKind::Gpt;
  std::string script;            // script: the TorchScript file (torch.jit.save)
  std::optional<LossKind> loss;  // script: none given means cross-entropy (training)
  int layers = 4;
  int width = 64;
  int heads = 4;
  int context = 32;
  int inputs = 16;  // mlp
  int outputs = 4;  // mlp outputs, cnn classes
  int image = 32;   // cnn
  // gpt on token files: the embedding's ids (0: the largest id in the files + 1); text: its
  // characters, always.
  int vocab = 0;
};

}  // namespace madpipe::runtime
