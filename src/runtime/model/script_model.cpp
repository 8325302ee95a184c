#include "runtime/model/script_model.hpp"

#include "core/error.hpp"
#include "runtime/device/memory_meter.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/script.h>

namespace {
using madpipe::runtime::LossKind;

// Statements of the module's forward between two child calls, as a function of one tensor (what
// the previous child returned) to one tensor (what the next child takes); null: none.
using Glue = std::shared_ptr<torch::jit::GraphFunction>;

torch::Tensor run_glue(const Glue& glue, torch::Tensor x) {
  if (!glue) return x;
  torch::jit::Stack stack{std::move(x)};
  glue->run(stack);
  return stack.back().toTensor();
}

// One child of a TorchScript module as an nn::Module: forward runs the forward's statements before
// the child (first layer only), the child, and the statements after it up to the next child. The
// child's tensors are registered (with '.' made '_') so that parameters() and buffers() see them.
struct ScriptLayerImpl : torch::nn::Module {
  ScriptLayerImpl(torch::jit::Module child, Glue before, Glue after)
      : module(std::move(child)), before_(std::move(before)), after_(std::move(after)) {
    for (const auto& p : module.named_parameters(/*recurse=*/true))
      register_parameter(safe_name(p.name), p.value, p.value.requires_grad());
    for (const auto& b : module.named_buffers(/*recurse=*/true))
      register_buffer(safe_name(b.name), b.value);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::IValue y = module.forward({run_glue(before_, x)});
    if (!y.isTensor())
      throw madpipe::Error(
          madpipe::ErrorKind::InvalidInput, "", "",
          "a layer of the TorchScript chain returned a " + y.tagKind() + ", not one tensor");
    return run_glue(after_, y.toTensor());
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
  Glue before_, after_;
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

std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> loss_function(
    LossKind loss) {
  if (loss == LossKind::Mse)
    return [](const torch::Tensor& output, const torch::Tensor& target) {
      return torch::mse_loss(output, target);
    };
  return [](const torch::Tensor& logits, const torch::Tensor& target) {
    return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                                target.reshape({-1}));
  };
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

namespace {
using torch::jit::Node;
using torch::jit::Value;

// What a refusal of the forward adds: the rule it breaks.
constexpr const char* kChainRule =
    " (madpipe trains a module's forward as a chain: each child called once, on what the "
    "statements after the previous child computed from its output alone)";

// "'h = h + self.mlp(h)' (model.py:18)": the source line of a statement of the module's forward.
std::string statement(const Node* node) {
  // A loaded module's code is TorchScript's serialized form; where the file kept the debug
  // records, the range it was generated from is the author's own source.
  torch::jit::SourceRange range = node->sourceRange();
  if (const auto original = range.findSourceRangeThatGenerated()) range = *original;
  std::string text;
  if (const std::shared_ptr<torch::jit::Source>& source = range.source()) {
    text = source->get_line(source->lineno_for_offset(range.start())).str();
    text = text.substr(0, text.find('\n'));
    const std::size_t comment = text.find('#');
    if (comment != std::string::npos) text = text.substr(0, comment);
    const std::size_t first = text.find_first_not_of(" \t");
    text = first == std::string::npos
               ? ""
               : text.substr(first, text.find_last_not_of(" \t") + 1 - first);
  }
  if (text.empty()) {
    std::ostringstream out;
    out << *node;
    text = out.str();
    text = text.substr(0, text.find('\n'));
  }
  std::string where;
  if (const auto place = range.file_line_col()) {
    std::string file = std::get<0>(*place);
    file = file.substr(file.find_last_of('/') + 1);
    where = " (" + file + ":" + std::to_string(std::get<1>(*place)) + ")";
  }
  return "'" + text + "'" + where;
}

// The statements `nodes` of a forward graph as a function from `in` to `out`; constants they use
// are copied along.
Glue make_glue(const std::vector<Node*>& nodes, Value* in, Value* out) {
  if (out == in) return nullptr;
  auto graph = std::make_shared<torch::jit::Graph>();
  std::unordered_map<Value*, Value*> copy_of;
  copy_of[in] = graph->addInput()->setType(in->type());
  std::function<Value*(Value*)> lookup = [&](Value* v) -> Value* {
    auto it = copy_of.find(v);
    if (it != copy_of.end()) return it->second;
    Node* constant = graph->createClone(v->node(), lookup);  // checked: a constant
    graph->insertNode(constant);
    return copy_of[v] = constant->output();
  };
  for (Node* node : nodes) {
    Node* copy = graph->createClone(node, lookup);
    graph->insertNode(copy);
    for (std::size_t o = 0; o < node->outputs().size(); ++o)
      copy_of[node->outputs()[o]] = copy->outputs()[o];
  }
  graph->registerOutput(copy_of.at(out));
  return std::make_shared<torch::jit::GraphFunction>("madpipe_glue", graph, nullptr,
                                                     torch::jit::ExecutorExecutionMode::SIMPLE);
}

// The module's forward as a chain of its children, in the order it calls them, with the
// statements between the calls; throws Error{InvalidInput} naming the first statement that does
// not fit a chain.
struct ForwardChain {
  std::vector<std::string> children;  // in call order
  Glue before;                        // statements before the first call
  std::vector<Glue> after;            // per call: the statements up to the next call (or return)
};

ForwardChain forward_chain(const torch::jit::Module& module, const std::string& path) {
  const auto method = module.find_method("forward");
  if (!method) throw invalid(path, "forward", "the module has no forward method");
  const std::shared_ptr<torch::jit::Graph> graph = method->graph();
  if (graph->inputs().size() != 2 || graph->outputs().size() != 1)
    throw invalid(path, "forward",
                  "forward takes " + std::to_string(graph->inputs().size() - 1) +
                      " arguments and returns " + std::to_string(graph->outputs().size()) +
                      " values; a chain takes one tensor and returns one");
  std::set<std::string> children;
  for (const auto& child : module.named_children()) children.insert(child.name);
  Value* const self = graph->inputs()[0];
  Value* current = graph->inputs()[1];
  std::map<Value*, std::string> child_of;
  std::vector<Node*> segment;
  std::set<Value*> produced;  // by the statements since the last call
  auto refuse = [&](const Node* node, const std::string& problem) {
    return invalid(path, "forward", statement(node) + " " + problem + kChainRule);
  };
  auto close_segment = [&](Value* next) {
    Glue glue = make_glue(segment, current, next);
    segment.clear();
    produced.clear();
    return glue;
  };
  ForwardChain chain;
  for (Node* node : graph->nodes()) {
    const c10::Symbol kind = node->kind();
    if (kind == c10::prim::Constant) continue;
    if (kind == c10::prim::GetAttr && node->input(0) == self) {
      const std::string name = node->s(c10::attr::name);
      if (!children.count(name))
        throw refuse(node, "reads self." + name +
                               ", which is not a child module: a layer holds its child's tensors "
                               "only");
      child_of[node->output()] = name;
      continue;
    }
    if (kind == c10::prim::CallMethod && child_of.count(node->input(0))) {
      const std::string& name = child_of[node->input(0)];
      if (node->s(c10::attr::name) != "forward")
        throw refuse(node, "calls " + name + "." + node->s(c10::attr::name) + ", not its forward");
      if (node->inputs().size() != 2)
        throw refuse(node, "calls " + name + " with " + std::to_string(node->inputs().size() - 1) +
                               " arguments; a layer takes one tensor");
      Value* input = node->input(1);
      if (input != current && !produced.count(input))
        throw refuse(node, "calls " + name +
                               " on a value that is not computed from the previous layer's "
                               "output alone");
      if (std::find(chain.children.begin(), chain.children.end(), name) != chain.children.end())
        throw refuse(node, "calls " + name + " a second time");
      Glue glue = close_segment(input);
      if (chain.children.empty())
        chain.before = std::move(glue);
      else
        chain.after.back() = std::move(glue);
      chain.children.push_back(name);
      chain.after.emplace_back();
      current = node->output();
      continue;
    }
    if (!node->blocks().empty())
      throw refuse(node, "is control flow, whose path could depend on the data");
    for (Value* v : node->inputs())
      if (v != current && !produced.count(v) && v->node()->kind() != c10::prim::Constant)
        throw refuse(node, v == self || child_of.count(v)
                               ? "uses the module or a child other than by calling its forward"
                               : "uses a value from before the previous layer's output (a "
                                 "connection that skips a layer belongs inside one child)");
    segment.push_back(node);
    for (Value* v : node->outputs()) produced.insert(v);
  }
  Value* result = graph->outputs()[0];
  if (chain.children.empty())
    throw invalid(path, "forward", "calls no child module: its children form the chain of layers");
  if (result != current && !produced.count(result))
    throw invalid(path, "forward",
                  "returns a value that is not computed from the last layer's output alone" +
                      std::string(kChainRule));
  chain.after.back() = close_segment(result);
  for (const std::string& name : children)
    if (std::find(chain.children.begin(), chain.children.end(), name) == chain.children.end())
      throw invalid(path, "layer " + name,
                    "forward never calls this child, so a chain would not train it; remove it "
                    "from the module" +
                        std::string(kChainRule));
  return chain;
}

// Module `path` loaded once per process: the layers are built from it (a copy of a child each),
// until release() after the process built its own.
struct ScriptSource {
  std::string path;
  std::optional<torch::jit::Module> module;
  ForwardChain chain;
  // Per group of tied parameters: the tensor a held layer uses, shared by every layer of the
  // group built while it lives.
  using WeakTensor = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  std::vector<std::optional<WeakTensor>> live_ties;

  // Host memory that a CPU rank's meter leaves out, as a GPU's does: the module as the file holds
  // it, with its code; the layers a rank trains are copies of its children (build_layer).
  const torch::jit::Module& loaded() {
    if (!module) {
      const madpipe::runtime::UncountedHostAllocations staging;
      module = load_module(path, torch::kCPU);
    }
    return *module;
  }
};

// The module that holds parameter `name` ("attn.weight" -> attn), and the parameter's own name.
std::pair<torch::jit::Module, std::string> owner_of(torch::jit::Module module,
                                                    const std::string& name) {
  std::size_t start = 0;
  for (std::size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', start)) {
    module = module.attr(name.substr(start, dot - start)).toModule();
    start = dot + 1;
  }
  return {module, name.substr(start)};
}

void set_parameter(const torch::jit::Module& module, const std::string& name,
                   const torch::Tensor& value) {
  auto [owner, own_name] = owner_of(module, name);
  owner.setattr(own_name, value);
}

torch::Tensor parameter_of(const torch::jit::Module& module, const std::string& name) {
  auto [owner, own_name] = owner_of(module, name);
  return owner.attr(own_name).toTensor();
}

// Parameters that several layers use (same data: a tied embedding and output head), as groups
// of (layer, index in the layer's parameters, name within the layer).
std::vector<std::vector<madpipe::runtime::TiedUse>> tied_parameters(
    const torch::jit::Module& module, const std::vector<std::string>& layers) {
  std::map<std::pair<const void*, std::vector<std::int64_t>>,
           std::vector<madpipe::runtime::TiedUse>>
      uses;
  for (int l = 0; l < static_cast<int>(layers.size()); ++l) {
    int index = 0;
    for (const auto& p : module.attr(layers[l]).toModule().named_parameters(/*recurse=*/true))
      uses[{p.value.data_ptr(), p.value.sizes().vec()}].push_back({l, index++, p.name});
  }
  std::vector<std::vector<madpipe::runtime::TiedUse>> groups;
  for (auto& [tensor, group] : uses)
    if (group.front().layer != group.back().layer) groups.push_back(std::move(group));
  std::sort(groups.begin(), groups.end(),
            [](const auto& a, const auto& b) { return a.front().layer < b.front().layer; });
  return groups;
}
}  // namespace

madpipe::runtime::ChainModel madpipe::runtime::script_chain_model(const std::string& path,
                                                                  LossKind loss) {
  ChainModel model;
  model.loss = loss_function(loss);
  auto source = std::make_shared<ScriptSource>();
  source->path = path;
  const torch::jit::Module& module = source->loaded();
  if (module.named_children().size() == 0)
    throw invalid(path, "",
                  "the module has no submodules: its top-level children form the chain of layers");
  for (const auto& child : module.named_children())
    check_signature(child.value, path, "layer " + child.name);
  source->chain = forward_chain(module, path);
  for (const std::string& name : source->chain.children) {
    const torch::jit::Module child = module.attr(name).toModule();
    model.names.push_back(name);
    // In the order ScriptLayer registers them, which is the order parameters() lists them.
    std::vector<std::string> parameters, buffers;
    for (const auto& p : child.named_parameters(/*recurse=*/true)) parameters.push_back(p.name);
    for (const auto& b : child.named_buffers(/*recurse=*/true)) buffers.push_back(b.name);
    model.original_parameter_names.push_back(std::move(parameters));
    model.original_buffer_names.push_back(std::move(buffers));
  }
  model.tied_parameters = tied_parameters(module, model.names);
  source->live_ties.resize(model.tied_parameters.size());
  for (const torch::jit::Module& first : module.attr(model.names.front()).toModule().modules()) {
    const auto type = first.type()->name();
    if (type && type->name() == "Embedding" && first.hasattr("num_embeddings")) {
      model.input_id_limit = first.attr("num_embeddings").toInt();
      break;
    }
  }
  // A layer is a copy of its child, with the tensors of its tied parameters shared with the layer
  // of the group that is held, if any.
  model.build_layer = [source, ties = model.tied_parameters, names = model.names](int layer) {
    const torch::jit::Module original = source->loaded().attr(names.at(layer)).toModule();
    torch::jit::Module taken;
    {
      torch::NoGradGuard no_grad;  // copies that are leaves, as the originals
      taken = original.deepcopy();
    }
    for (const auto& p : original.named_parameters(/*recurse=*/true))
      parameter_of(taken, p.name).requires_grad_(p.value.requires_grad());
    std::vector<std::pair<std::size_t, std::string>> fresh;  // groups this layer starts
    for (std::size_t g = 0; g < ties.size(); ++g)
      for (const TiedUse& use : ties[g]) {
        if (use.layer != layer) continue;
        auto live = source->live_ties[g]
                        ? source->live_ties[g]->lock()
                        : c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>();
        if (live)
          set_parameter(taken, use.name, torch::Tensor(std::move(live)));
        else
          fresh.emplace_back(g, use.name);
        break;
      }
    taken.train(true);
    const std::size_t l = static_cast<std::size_t>(layer);
    ScriptLayer built(std::move(taken), l == 0 ? source->chain.before : nullptr,
                      source->chain.after.at(l));
    for (const auto& [g, name] : fresh)
      source->live_ties[g].emplace(parameter_of(built->module, name).getIntrusivePtr());
    return torch::nn::AnyModule(built);
  };
  model.reference_forward = [source](const torch::Tensor& x) {
    torch::jit::Module whole = source->loaded();
    const bool training = whole.is_training();
    whole.eval();
    torch::Tensor y = whole.forward({x}).toTensor();
    whole.train(training);
    return y;
  };
  model.release_source = [source] { source->module.reset(); };
  model.layers.resize(model.names.size());
  return model;
}

void madpipe::runtime::check_script_chain(ChainModel& model, const Batch& sample,
                                          const std::string& path) {
  torch::NoGradGuard no_grad;
  torch::Tensor x = sample.input;
  for (int l = 0; l < model.size(); ++l) {
    const bool borrowed = !model.holds(l);
    if (borrowed) model.materialize(l, x.device());
    torch::nn::Module& layer = *model.layers[l].ptr();
    const bool training = layer.is_training();
    layer.eval();  // no random masks, no batch-norm update: comparable with the module's forward
    const std::string given = shape_of(x);
    try {
      x = model.layers[l].forward(x);
      layer.train(training);
    } catch (const std::exception& e) {
      layer.train(training);
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
  if (!model.reference_forward) return;
  const torch::Tensor expected = model.reference_forward(sample.input);
  if (expected.sizes() != x.sizes() || !torch::allclose(x, expected, 1e-4, 1e-5))
    throw invalid(path, "forward",
                  "the chain of layers computes another function than the module's forward on a "
                  "sample micro-batch (largest difference " +
                      (expected.sizes() == x.sizes()
                           ? std::to_string((x - expected).abs().max().item<double>())
                           : "in shape: " + shape_of(x) + " vs " + shape_of(expected)) +
                      "); madpipe trains the forward as written or not at all");
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
  if (input.loss == LossKind::Mse) {
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
