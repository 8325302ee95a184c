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

namespace {
madpipe::Error invalid(const std::string& path, const std::string& field,
                       const std::string& problem) {
  return madpipe::Error(madpipe::ErrorKind::InvalidInput, path, field, problem);
}

// The line of an error that says what went wrong: TorchScript's interpreter puts the operation's
// own message ("RuntimeError: ...") after the code that raised it.
std::string reason_of(const std::exception& e) {
  std::string what = e.what();
  const std::size_t raised = what.rfind("RuntimeError: ");
  if (raised != std::string::npos) what = what.substr(raised + 14);
  return what.substr(0, what.find('\n'));
}

std::string shape_of(const torch::Tensor& t) {
  std::string out = "[";
  for (std::int64_t i = 0; i < t.dim(); ++i) out += (i ? ", " : "") + std::to_string(t.size(i));
  return out + "] " + std::string(c10::toString(t.scalar_type()));
}

// The child's forward, from its schema: one tensor in (besides self), one tensor out.
void check_signature(const torch::jit::Module& child, const std::string& path,
                     const std::string& name) {
  const auto method = child.find_method("forward");
  if (!method)
    throw invalid(path, name,
                  "this child has no forward method: each child of the chain is a layer");
  const c10::FunctionSchema& schema = method->function().getSchema();
  const auto& arguments = schema.arguments();
  const auto& returns = schema.returns();
  const bool one_tensor_in =
      arguments.size() == 2 && arguments[1].type()->kind() == c10::TypeKind::TensorType;
  const bool one_tensor_out =
      returns.size() == 1 && returns[0].type()->kind() == c10::TypeKind::TensorType;
  if (one_tensor_in && one_tensor_out) return;
  std::string signature = "(";
  for (std::size_t i = 1; i < arguments.size(); ++i)
    signature += (i > 1 ? ", " : "") + arguments[i].type()->str();
  signature += ") -> ";
  for (std::size_t i = 0; i < returns.size(); ++i)
    signature += (i > 0 ? ", " : "") + returns[i].type()->str();
  throw invalid(path, name,
                "forward is " + signature +
                    "; each child of the chain must take one tensor and return one tensor");
}

std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> loss_named(
    const std::string& loss) {
  if (loss == "mse")
    return [](const torch::Tensor& output, const torch::Tensor& target) {
      return torch::mse_loss(output, target);
    };
  if (loss == "cross-entropy")
    return [](const torch::Tensor& logits, const torch::Tensor& target) {
      return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                                  target.reshape({-1}));
    };
  throw invalid("", "loss", "unknown loss '" + loss + "' (valid: cross-entropy, mse)");
}

torch::jit::Module load_module(const std::string& path, const torch::Device& device) {
  try {
    return torch::jit::load(path, device);
  } catch (const c10::Error& e) {
    throw madpipe::Error(
        madpipe::ErrorKind::Io, path, "",
        "cannot load a TorchScript module (torch.jit.save of a scripted or traced module): " +
            std::string(e.what_without_backtrace()));
  }
}
}  // namespace

madpipe::runtime::ChainModel madpipe::runtime::script_chain_model(const std::string& path,
                                                                  const std::string& loss) {
  ChainModel model;
  model.loss = loss_named(loss);
  {
    torch::jit::Module module = load_module(path, torch::kCPU);
    for (const auto& child : module.named_children()) {
      check_signature(child.value, path, "layer " + child.name);
      model.names.push_back(child.name);
      // In the order ScriptLayer registers them, which is the order parameters() lists them.
      std::vector<std::string> parameters, buffers;
      for (const auto& p : child.value.named_parameters(/*recurse=*/true))
        parameters.push_back(p.name);
      for (const auto& b : child.value.named_buffers(/*recurse=*/true)) buffers.push_back(b.name);
      model.original_parameter_names.push_back(std::move(parameters));
      model.original_buffer_names.push_back(std::move(buffers));
    }
  }
  if (model.names.empty())
    throw invalid(path, "",
                  "the module has no submodules: its top-level children form the chain of layers");
  // A layer is its child taken from the file, loaded again for each build: a process holds only
  // the layers it builds (its stages', and one at a time for a measurement), never the rest.
  model.build_layer = [path](int layer) {
    torch::jit::Module module = load_module(path, torch::kCPU);
    const auto children = module.children();
    auto child = children.begin();
    for (int l = 0; l < layer; ++l) ++child;
    torch::jit::Module taken = *child;
    taken.train(true);
    return torch::nn::AnyModule(ScriptLayer(std::move(taken)));
  };
  model.layers.resize(model.names.size());
  return model;
}

std::int64_t madpipe::runtime::script_embedding_rows(const std::string& path) {
  const torch::jit::Module module = load_module(path, torch::kCPU);
  for (const torch::jit::Module& first : module.children()) {
    for (const torch::jit::Module& inner : first.modules()) {
      const auto name = inner.type()->name();
      if (name && name->name() == "Embedding" && inner.hasattr("num_embeddings"))
        return inner.attr("num_embeddings").toInt();
    }
    break;
  }
  return 0;
}

void madpipe::runtime::check_script_chain(ChainModel& model, const Batch& sample,
                                          const std::string& path) {
  torch::NoGradGuard no_grad;
  torch::Tensor x = sample.input;
  for (int l = 0; l < model.size(); ++l) {
    const bool borrowed = !model.holds(l);
    if (borrowed) model.materialize(l, x.device());
    const std::string given = shape_of(x);
    try {
      x = model.layers[l].forward(x);
    } catch (const std::exception& e) {
      if (borrowed) model.drop(l);
      throw invalid(
          path, "layer " + model.names[l],
          "fails on its input of shape " + given +
              (l == 0 ? " (the data's)" : " (what layer " + model.names[l - 1] + " gives)") + ": " +
              reason_of(e));
    }
    if (borrowed) model.drop(l);
  }
  try {
    model.loss(x, sample.target);
  } catch (const std::exception& e) {
    throw invalid(path, "loss",
                  "the loss does not fit the last layer's output " + shape_of(x) +
                      " and the targets " + shape_of(sample.target) + ": " + reason_of(e));
  }
}

madpipe::runtime::ScriptChain madpipe::runtime::load_script_chain(const std::string& path,
                                                                  const ScriptInput& input,
                                                                  const torch::Device& device) {
  if (input.dtype != "float32" && input.dtype != "int64")
    throw invalid("", "input-dtype",
                  "unknown input dtype '" + input.dtype + "' (valid: float32, int64)");
  if (input.shape.empty())
    throw invalid("", "input-shape",
                  "a TorchScript model needs the shape of one micro-batch of input");
  ScriptChain chain;
  chain.model = script_chain_model(path, input.loss);
  chain.sample.input = input.dtype == "int64"
                           ? torch::zeros(input.shape, torch::dtype(torch::kLong).device(device))
                           : torch::randn(input.shape, torch::dtype(torch::kFloat).device(device));
  torch::Tensor x = chain.sample.input;
  {
    torch::NoGradGuard no_grad;
    for (int l = 0; l < chain.model.size(); ++l) {
      chain.model.materialize(l, device);
      try {
        x = chain.model.layers[l].forward(x);
      } catch (const std::exception& e) {
        throw invalid(path, "layer " + chain.model.names[l],
                      std::string("fails on the output of the previous one (input of shape "
                                  "given by --input-shape): ") +
                          reason_of(e));
      }
    }
  }
  if (input.loss == "mse") {
    chain.sample.target = torch::zeros_like(x);
  } else {
    if (x.dim() < 2)
      throw invalid(path, "loss",
                    "cross-entropy needs an output with classes in its last dimension");
    std::vector<std::int64_t> target_shape(x.sizes().begin(), x.sizes().end() - 1);
    chain.sample.target = torch::zeros(target_shape, torch::dtype(torch::kLong).device(device));
  }
  return chain;
}
