#include "runtime/script_model.hpp"

#include "core/error.hpp"

#include <sstream>

#include <torch/script.h>

namespace {
// One child of a TorchScript module as an nn::Module: forward calls the child, and the child's
// tensors are registered (with '.' made '_') so that parameters() and buffers() see them.
struct ScriptLayerImpl : torch::nn::Module {
  explicit ScriptLayerImpl(torch::jit::Module child) : module(std::move(child)) {
    for (const auto& p : module.named_parameters(/*recurse=*/true))
      register_parameter(safe_name(p.name), p.value, p.value.requires_grad());
    for (const auto& b : module.named_buffers(/*recurse=*/true))
      register_buffer(safe_name(b.name), b.value);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::IValue y = module.forward({x});
    if (!y.isTensor())
      throw madpipe::Error(
          madpipe::ErrorKind::InvalidInput, "", "",
          "a layer of the TorchScript chain returned a " + y.tagKind() + ", not one tensor");
    return y.toTensor();
  }
  void train(bool on) override {
    torch::nn::Module::train(on);
    module.train(on);
  }
  static std::string safe_name(std::string name) {
    for (char& c : name)
      if (c == '.') c = '_';
    return name;
  }
  torch::jit::Module module;
};
TORCH_MODULE(ScriptLayer);
}  // namespace

std::vector<std::int64_t> madpipe::runtime::parse_shape(const std::string& text,
                                                        const std::string& field) {
  std::vector<std::int64_t> shape;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    std::size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != part.size() || value < 1)
      throw Error(ErrorKind::InvalidInput, "", field,
                  "'" + text +
                      "' is not a shape: positive integers separated by commas, "
                      "batch first (e.g. 8,3,224,224)");
    shape.push_back(value);
  }
  if (shape.empty())
    throw Error(ErrorKind::InvalidInput, "", field, "empty shape (e.g. 8,3,224,224)");
  return shape;
}

madpipe::runtime::ScriptChain madpipe::runtime::load_script_chain(const std::string& path,
                                                                  const ScriptInput& input,
                                                                  const torch::Device& device) {
  if (input.dtype != "float32" && input.dtype != "int64")
    throw Error(ErrorKind::InvalidInput, "", "input-dtype",
                "unknown input dtype '" + input.dtype + "' (valid: float32, int64)");
  if (input.loss != "mse" && input.loss != "cross-entropy")
    throw Error(ErrorKind::InvalidInput, "", "loss",
                "unknown loss '" + input.loss + "' (valid: mse, cross-entropy)");
  if (input.shape.empty())
    throw Error(ErrorKind::InvalidInput, "", "input-shape",
                "a TorchScript model needs the shape of one micro-batch of input");
  torch::jit::Module module;
  try {
    module = torch::jit::load(path, device);
  } catch (const c10::Error& e) {
    throw Error(ErrorKind::Io, path, "",
                "cannot load a TorchScript module: " + std::string(e.what_without_backtrace()));
  }
  module.train(true);
  ScriptChain chain;
  for (const auto& child : module.named_children()) {
    chain.model.names.push_back(child.name);
    chain.model.layers.emplace_back(ScriptLayer(child.value));
  }
  if (chain.model.layers.empty())
    throw Error(ErrorKind::InvalidInput, path, "",
                "the module has no submodules: its top-level children form the chain of layers");
  chain.sample.input = input.dtype == "int64"
                           ? torch::zeros(input.shape, torch::dtype(torch::kLong).device(device))
                           : torch::randn(input.shape, torch::dtype(torch::kFloat).device(device));
  torch::Tensor x = chain.sample.input;
  {
    torch::NoGradGuard no_grad;
    for (std::size_t l = 0; l < chain.model.layers.size(); ++l) {
      try {
        x = chain.model.layers[l].forward(x);
      } catch (const std::exception& e) {
        throw Error(ErrorKind::InvalidInput, path, chain.model.names[l],
                    std::string("this layer fails on the output of the previous one (input of "
                                "shape given by --input-shape): ") +
                        e.what());
      }
    }
  }
  if (input.loss == "mse") {
    chain.sample.target = torch::zeros_like(x);
    chain.model.loss = [](const torch::Tensor& output, const torch::Tensor& target) {
      return torch::mse_loss(output, target);
    };
  } else {
    if (x.dim() < 2)
      throw Error(ErrorKind::InvalidInput, path, "loss",
                  "cross-entropy needs an output with classes in its last dimension");
    const std::int64_t classes = x.size(-1);
    std::vector<std::int64_t> target_shape(x.sizes().begin(), x.sizes().end() - 1);
    chain.sample.target = torch::zeros(target_shape, torch::dtype(torch::kLong).device(device));
    chain.model.loss = [classes](const torch::Tensor& logits, const torch::Tensor& target) {
      return torch::nn::functional::cross_entropy(logits.reshape({-1, classes}),
                                                  target.reshape({-1}));
    };
  }
  return chain;
}
