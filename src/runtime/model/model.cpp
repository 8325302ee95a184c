#include "runtime/model/model.hpp"

#include "core/error.hpp"
#include "runtime/model/script_model.hpp"
#include "runtime/model/weight_gradients.hpp"

#include <cmath>
#include <limits>

namespace {
using madpipe::runtime::deferrable_conv2d;
using madpipe::runtime::deferrable_embedding;
using madpipe::runtime::deferrable_linear;

// Token and position embeddings: [B, T] token ids -> [B, T, C].
struct EmbeddingImpl : torch::nn::Module {
  EmbeddingImpl(int vocab, int context, int width)
      : tokens(register_module("tokens", torch::nn::Embedding(vocab, width))),
        positions(register_module("positions", torch::nn::Embedding(context, width))) {}
  torch::Tensor forward(const torch::Tensor& ids) {
    const auto t = ids.size(1);
    return deferrable_embedding(tokens, ids) +
           deferrable_embedding(positions, torch::arange(t, ids.options().dtype(torch::kLong)));
  }
  torch::nn::Embedding tokens, positions;
};
TORCH_MODULE(Embedding);

// Pre-norm transformer block with causal self-attention.
struct BlockImpl : torch::nn::Module {
  BlockImpl(int width, int num_heads)
      : heads(num_heads),
        ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})))),
        qkv(register_module("qkv", torch::nn::Linear(width, 3 * width))),
        proj(register_module("proj", torch::nn::Linear(width, width))),
        fc1(register_module("fc1", torch::nn::Linear(width, 4 * width))),
        fc2(register_module("fc2", torch::nn::Linear(4 * width, width))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    const auto b = x.size(0), t = x.size(1), c = x.size(2);
    const auto head = c / heads;
    auto parts =
        deferrable_linear(qkv, ln1(x)).view({b, t, 3, heads, head}).permute({2, 0, 3, 1, 4});
    auto q = parts[0], k = parts[1], v = parts[2];
    // Causal attention scaled by 1/sqrt(head): on a GPU scaled_dot_product_attention (flash or
    // memory-efficient kernels, which never hold the scores); on the CPU the scores, mask and
    // softmax written out, whose memory a layer-by-layer profile measures as a stage holds it
    // (the CPU's fused kernel keeps scratch it misses).
    // The scores and mask stay alive to the block's end, as the plans of CPU runs assume.
    torch::Tensor y, scores, mask;
    if (x.is_cuda()) {
      y = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true)
              .transpose(1, 2)
              .reshape({b, t, c});
    } else {
      scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head));
      mask = torch::ones({t, t}, x.options().dtype(torch::kBool)).triu(1);
      scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
      y = torch::matmul(torch::softmax(scores, -1), v).transpose(1, 2).reshape({b, t, c});
    }
    auto h = x + deferrable_linear(proj, y);
    return h + deferrable_linear(fc2, torch::gelu(deferrable_linear(fc1, ln2(h))));
  }

  int heads;
  torch::nn::LayerNorm ln1, ln2;
  torch::nn::Linear qkv, proj, fc1, fc2;
};
TORCH_MODULE(Block);

// Final norm and projection to the vocabulary: [B, T, C] -> [B, T, V] logits.
struct HeadImpl : torch::nn::Module {
  HeadImpl(int width, int vocab)
      : ln(register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})))),
        out(register_module("out", torch::nn::Linear(width, vocab))) {}
  torch::Tensor forward(const torch::Tensor& x) { return deferrable_linear(out, ln(x)); }
  torch::nn::LayerNorm ln;
  torch::nn::Linear out;
};
TORCH_MODULE(Head);

// Linear layer followed by ReLU (MLP hidden layer).
struct DenseImpl : torch::nn::Module {
  DenseImpl(int in, int out, bool with_relu)
      : linear(register_module("linear", torch::nn::Linear(in, out))), relu(with_relu) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = deferrable_linear(linear, x);
    return relu ? torch::relu(y) : y;
  }
  torch::nn::Linear linear;
  bool relu;
};
TORCH_MODULE(Dense);
// 3x3 convolution, batch norm and ReLU: [B, 3, H, W] images -> [B, C, H, W].
struct StemImpl : torch::nn::Module {
  explicit StemImpl(int channels)
      : conv(register_module(
            "conv",
            torch::nn::Conv2d(torch::nn::Conv2dOptions(3, channels, 3).padding(1).bias(false)))),
        bn(register_module("bn", torch::nn::BatchNorm2d(channels))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::relu(bn(deferrable_conv2d(conv, x)));
  }
  torch::nn::Conv2d conv;
  torch::nn::BatchNorm2d bn;
};
TORCH_MODULE(Stem);

// Basic residual block (two 3x3 convolutions); with stride 2 it halves the resolution and
// doubles the channels, with a 1x1 convolution on the shortcut.
struct ResidualImpl : torch::nn::Module {
  ResidualImpl(int in, int out, int stride)
      : conv1(register_module(
            "conv1",
            torch::nn::Conv2d(
                torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(out))),
        conv2(register_module(
            "conv2",
            torch::nn::Conv2d(torch::nn::Conv2dOptions(out, out, 3).padding(1).bias(false)))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out)
      shortcut = register_module(
          "shortcut",
          torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = bn2(deferrable_conv2d(conv2, torch::relu(bn1(deferrable_conv2d(conv1, x)))));
    return torch::relu(y + (shortcut ? deferrable_conv2d(shortcut, x) : x));
  }
  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Conv2d shortcut{nullptr};
};
TORCH_MODULE(Residual);

// Global average pooling and a linear classifier: [B, C, H, W] -> [B, classes].
struct ClassifierImpl : torch::nn::Module {
  ClassifierImpl(int channels, int classes)
      : fc(register_module("fc", torch::nn::Linear(channels, classes))) {}
  torch::Tensor forward(const torch::Tensor& x) { return deferrable_linear(fc, x.mean({2, 3})); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Classifier);
}  // namespace

namespace {
// The seed of one layer's initial weights: a mix of the model's seed and the layer's index, so
// that a layer's weights do not depend on which other layers a process builds.
std::uint64_t layer_seed(std::uint64_t seed, int layer) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ULL * static_cast<std::uint64_t>(layer + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return (z ^ (z >> 31)) >> 1;  // manual_seed takes any 64-bit value; keep it readable in logs
}

void check_held(const madpipe::runtime::ChainModel& model, int first, int last) {
  for (int l = first; l <= last; ++l)
    if (!model.holds(l))
      throw madpipe::Error(madpipe::ErrorKind::Internal, "", "layer " + model.names.at(l),
                           "this process does not hold the layer");
}
}  // namespace

void madpipe::runtime::ChainModel::materialize(int layer, const torch::Device& device) {
  if (holds(layer)) return;
  if (!build_layer)
    throw Error(ErrorKind::Unsupported, "", "layer " + names.at(layer),
                "this model cannot rebuild a layer it does not hold");
  torch::nn::AnyModule module = build_layer(layer);
  module.ptr()->to(device);
  layers.at(layer) = std::move(module);
}

void madpipe::runtime::ChainModel::drop(int layer) { layers.at(layer) = torch::nn::AnyModule(); }

std::vector<torch::Tensor> madpipe::runtime::ChainModel::parameters(int first, int last) const {
  check_held(*this, first, last);
  std::vector<torch::Tensor> out;
  for (int l = first; l <= last; ++l)
    for (const torch::Tensor& p : layers[l].ptr()->parameters()) out.push_back(p);
  return out;
}

std::vector<torch::Tensor> madpipe::runtime::ChainModel::buffers(int first, int last) const {
  check_held(*this, first, last);
  std::vector<torch::Tensor> out;
  for (int l = first; l <= last; ++l)
    for (const torch::Tensor& b : layers[l].ptr()->buffers()) out.push_back(b);
  return out;
}

namespace {
std::vector<std::string> keys_of(const madpipe::runtime::ChainModel& model, int first, int last,
                                 bool buffers) {
  std::vector<std::string> out;
  const auto& originals = buffers ? model.original_buffer_names : model.original_parameter_names;
  for (int l = first; l <= last; ++l) {
    const std::string prefix = model.names[l] + ".";
    if (static_cast<std::size_t>(l) < originals.size() && !originals[l].empty()) {
      for (const std::string& name : originals[l]) out.push_back(prefix + name);
      continue;
    }
    const torch::nn::Module& layer = *model.layers[l].ptr();
    for (const auto& item : buffers ? layer.named_buffers() : layer.named_parameters())
      out.push_back(prefix + item.key());
  }
  return out;
}
}  // namespace

std::vector<std::string> madpipe::runtime::ChainModel::parameter_keys(int first, int last) const {
  check_held(*this, first, last);
  return keys_of(*this, first, last, false);
}

std::vector<std::string> madpipe::runtime::ChainModel::buffer_keys(int first, int last) const {
  check_held(*this, first, last);
  return keys_of(*this, first, last, true);
}

madpipe::runtime::ChainModel madpipe::runtime::build_model(const ModelConfig& config,
                                                           const LayerFilter& keep,
                                                           const torch::Device& device) {
  ChainModel model;
  std::vector<std::function<torch::nn::AnyModule()>> makers;
  auto add = [&](std::string name, std::function<torch::nn::AnyModule()> make) {
    model.names.push_back(std::move(name));
    makers.push_back(std::move(make));
  };
  switch (config.kind) {
    case ModelKind::Gpt: {
      if (config.width % config.heads != 0)
        throw Error(ErrorKind::InvalidInput, "", "model.width",
                    "must be a multiple of model.heads (" + std::to_string(config.heads) + ")");
      add("embed",
          [c = config] { return torch::nn::AnyModule(Embedding(c.vocab, c.context, c.width)); });
      for (int b = 0; b < config.layers; ++b)
        add("block" + std::to_string(b),
            [c = config] { return torch::nn::AnyModule(Block(c.width, c.heads)); });
      add("head", [c = config] { return torch::nn::AnyModule(Head(c.width, c.vocab)); });
      const int vocab = config.vocab;
      model.loss = [vocab](const torch::Tensor& logits, const torch::Tensor& target) {
        return torch::nn::functional::cross_entropy(logits.reshape({-1, vocab}),
                                                    target.reshape({-1}));
      };
      break;
    }
    case ModelKind::Mlp: {
      int in = config.inputs;
      for (int l = 0; l < config.layers; ++l) {
        add("dense" + std::to_string(l),
            [in, width = config.width] { return torch::nn::AnyModule(Dense(in, width, true)); });
        in = config.width;
      }
      add("out", [in, outputs = config.outputs] {
        return torch::nn::AnyModule(Dense(in, outputs, false));
      });
      model.loss = [](const torch::Tensor& output, const torch::Tensor& target) {
        return torch::mse_loss(output, target);
      };
      break;
    }
    case ModelKind::Cnn: {
      add("stem", [width = config.width] { return torch::nn::AnyModule(Stem(width)); });
      int channels = config.width;
      for (int b = 0; b < config.layers; ++b) {
        // Every other block from the second on halves the resolution and doubles the channels.
        const bool down = b % 2 == 1;
        add("res" + std::to_string(b), [channels, down] {
          return torch::nn::AnyModule(
              Residual(channels, down ? 2 * channels : channels, down ? 2 : 1));
        });
        if (down) channels *= 2;
      }
      add("classifier", [channels, outputs = config.outputs] {
        return torch::nn::AnyModule(Classifier(channels, outputs));
      });
      model.loss = [](const torch::Tensor& logits, const torch::Tensor& target) {
        return torch::nn::functional::cross_entropy(logits, target);
      };
      break;
    }
    case ModelKind::Script: {
      ChainModel script = script_chain_model(config.script, config.loss);
      for (int l = 0; l < script.size(); ++l)
        if (!keep || keep(l)) script.materialize(l, device);
      return script;
    }
  }
  model.build_layer = [makers, seed = config.seed](int layer) {
    torch::manual_seed(layer_seed(seed, layer));
    return makers.at(static_cast<std::size_t>(layer))();
  };
  model.layers.resize(model.names.size());
  for (int l = 0; l < model.size(); ++l)
    if (!keep || keep(l)) model.materialize(l, device);
  return model;
}

void madpipe::runtime::move_model(ChainModel& model, const torch::Device& device) {
  for (auto& layer : model.layers)
    if (!layer.is_empty()) layer.ptr()->to(device);
}
