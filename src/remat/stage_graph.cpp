#include "remat/stage_graph.hpp"

#include "core/error.hpp"

#include <cctype>
#include <cmath>
#include <map>
#include <string>
#include <vector>

static constexpr int kLayerInput = -1;  // in OpSpec::inputs: the layer's input

namespace {
using madpipe::Layer;
using madpipe::Profile;
using madpipe::remat::RematGraph;
using madpipe::remat::RematNode;

// What an op's backward reads from the forward besides the gradient of its output.
enum class Reads { Inputs, Output, InputsAndOutput, Nothing };

// One op of a layer template. Inputs are indices of earlier ops of the layer or kLayerInput.
struct OpSpec {
  const char* name;
  double time_share;  // relative; normalized over the layer
  double size_share;  // relative output size; normalized over the layer's ops but the last
  std::vector<int> inputs;
  Reads reads;
  bool addition = false;  // one gradient buffer serves every input
};

// A forward op once placed in the graph, for its backward node.
struct ForwardOp {
  int node = -1;
  std::vector<int> inputs;  // graph indices
  Reads reads = Reads::Inputs;
  bool addition = false;
  double backward_ms = 0;
};

class StageGraphBuilder {
 public:
  StageGraphBuilder(const Profile& profile, int first, int last)
      : profile_(profile), first_(first), last_(last) {
    const int layers = static_cast<int>(profile.layers.size());
    if (first < 0 || first >= layers)
      madpipe::throw_invalid(
          "", "first_layer",
          "must be in 0.." + std::to_string(layers - 1) + ", got " + std::to_string(first));
    if (last < first || last >= layers)
      madpipe::throw_invalid("", "last_layer",
                             "must be in " + std::to_string(first) + ".." +
                                 std::to_string(layers - 1) + ", got " + std::to_string(last));
    input_ = add("input", 0, madpipe::input_bytes_of_layer(profile, first), {}, false);
    current_ = input_;
  }

  // Appends the ops of layer l; the last one outputs `output_bytes`, of which the next layer's
  // input (what its backward sends a gradient for) is `activation_bytes`.
  void add_layer(int l, const std::vector<OpSpec>& ops, std::int64_t output_bytes,
                 std::int64_t activation_bytes) {
    const Layer& layer = profile_.layers[static_cast<std::size_t>(l)];
    double time_total = 0, size_total = 0;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      time_total += ops[i].time_share;
      if (i + 1 < ops.size()) size_total += ops[i].size_share;
    }
    std::vector<int> local(ops.size());
    double size_before = 0;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const OpSpec& op = ops[i];
      const double share = op.time_share / time_total;
      std::int64_t size = output_bytes;
      if (i + 1 < ops.size()) {  // cumulative rounding: the sizes add up to saved_bytes exactly
        const double saved = static_cast<double>(layer.saved_bytes);
        const double before = std::round(saved * size_before / size_total);
        size_before += op.size_share;
        size = static_cast<std::int64_t>(std::round(saved * size_before / size_total) - before);
      }
      ForwardOp forward;
      for (int in : op.inputs)
        forward.inputs.push_back(in == kLayerInput ? current_
                                                   : local[static_cast<std::size_t>(in)]);
      std::string name = layer.name;
      if (op.name[0] != '\0') name += std::string(".") + op.name;
      forward.node = add(name, layer.forward_ms * share, size, forward.inputs, true);
      forward.reads = op.reads;
      forward.addition = op.addition;
      forward.backward_ms = layer.backward_ms * share;
      local[i] = forward.node;
      ops_.push_back(std::move(forward));
    }
    current_ = local.back();
    activation_bytes_[static_cast<std::size_t>(current_)] = activation_bytes;
  }

  RematGraph finish() {
    const int gradient = add(
        "grad_output", 0, profile_.layers[static_cast<std::size_t>(last_)].output_bytes, {}, false);
    // gradient_node[{w, p}]: the backward node of w making the gradient of its input p.
    std::map<std::pair<int, int>, int> gradient_node;
    std::vector<std::vector<int>> consumers(graph_.nodes.size());
    for (const ForwardOp& op : ops_)
      for (int in : op.inputs) consumers[static_cast<std::size_t>(in)].push_back(op.node);
    for (auto it = ops_.rbegin(); it != ops_.rend(); ++it) {
      const ForwardOp& op = *it;
      std::vector<int> inputs;
      for (int w : consumers[static_cast<std::size_t>(op.node)])
        inputs.push_back(gradient_node.at({w, op.node}));
      if (op.node == current_) inputs.push_back(gradient);
      if (op.reads == Reads::Inputs || op.reads == Reads::InputsAndOutput)
        inputs.insert(inputs.end(), op.inputs.begin(), op.inputs.end());
      if (op.reads == Reads::Output || op.reads == Reads::InputsAndOutput)
        inputs.push_back(op.node);
      const std::string name = "B:" + graph_.nodes[static_cast<std::size_t>(op.node)].name;
      if (op.addition || op.inputs.size() == 1) {
        const std::int64_t size = op.addition ? size_of(op.node) : gradient_size_of(op.inputs[0]);
        const int node = add(name, op.backward_ms, size, inputs, true);
        for (int in : op.inputs) gradient_node[{op.node, in}] = node;
        continue;
      }
      // One node per input gradient: each is a tensor of its own, freed when its consumer is done.
      const double share = op.backward_ms / static_cast<double>(op.inputs.size());
      for (int in : op.inputs)
        gradient_node[{op.node, in}] =
            add(name + ":" + graph_.nodes[static_cast<std::size_t>(in)].name, share,
                gradient_size_of(in), inputs, true);
    }
    return std::move(graph_);
  }

 private:
  int add(std::string name, double duration_ms, std::int64_t size_bytes, std::vector<int> inputs,
          bool recomputable) {
    graph_.nodes.push_back(
        {std::move(name), duration_ms, size_bytes, std::move(inputs), recomputable});
    activation_bytes_.push_back(size_bytes);
    return graph_.size() - 1;
  }
  std::int64_t size_of(int v) const { return graph_.nodes[static_cast<std::size_t>(v)].size_bytes; }
  // The first stage sends no gradient back for the model's input.
  std::int64_t gradient_size_of(int v) const {
    return v == input_ && first_ == 0 ? 0 : activation_bytes_[static_cast<std::size_t>(v)];
  }

  const Profile& profile_;
  int first_, last_;
  RematGraph graph_;
  std::vector<ForwardOp> ops_;
  std::vector<std::int64_t> activation_bytes_;  // per node: the tensor a gradient is sent for
  int input_ = -1;
  int current_ = -1;  // the node holding the output of the layers added so far
};
}  // namespace

// Relative sizes in units of the block's narrowest activation (the bottleneck width w: conv3 and
// the block output have 4w channels); time shares follow FLOPs for the convolutions and bytes
// moved for the element-wise ops.
static std::vector<OpSpec> bottleneck_ops(bool downsample) {
  std::vector<OpSpec> ops = {
      {"conv1", 0.14, 1, {kLayerInput}, Reads::Inputs},
      {"bn1", 0.06, 1, {0}, Reads::Inputs},
      {"relu1", 0.03, 1, {1}, Reads::Output},
      {"conv2", 0.30, 1, {2}, Reads::Inputs},
      {"bn2", 0.06, 1, {3}, Reads::Inputs},
      {"relu2", 0.03, 1, {4}, Reads::Output},
      {"conv3", 0.14, 4, {5}, Reads::Inputs},
      {"bn3", 0.08, 4, {6}, Reads::Inputs},
  };
  int skip = kLayerInput;
  if (downsample) {
    ops.push_back({"downsample.conv", 0.12, 4, {kLayerInput}, Reads::Inputs});
    ops.push_back({"downsample.bn", 0.06, 4, {8}, Reads::Inputs});
    skip = 9;
  }
  const int bn3 = 7;
  ops.push_back({"add", 0.05, 4, {bn3, skip}, Reads::Nothing, true});
  ops.push_back({"relu", 0.04, 4, {static_cast<int>(ops.size()) - 1}, Reads::Output});
  return ops;
}

// Relative sizes in units of one hidden-state tensor (batch x sequence x d_model); the attention
// scores of GPT-2 small (12 heads, 1024 tokens, d_model 768) are 16 of them.
static std::vector<OpSpec> transformer_block_ops() {
  return {
      {"ln1", 0.03, 1, {kLayerInput}, Reads::Inputs},
      {"qkv", 0.17, 3, {0}, Reads::Inputs},
      {"scores", 0.08, 16, {1}, Reads::Inputs},
      {"softmax", 0.06, 16, {2}, Reads::Output},
      {"attn_v", 0.08, 1, {3, 1}, Reads::Inputs},
      {"proj", 0.06, 1, {4}, Reads::Inputs},
      {"add1", 0.02, 1, {kLayerInput, 5}, Reads::Nothing, true},
      {"ln2", 0.03, 1, {6}, Reads::Inputs},
      {"fc1", 0.21, 4, {7}, Reads::Inputs},
      {"gelu", 0.03, 4, {8}, Reads::Inputs},
      {"fc2", 0.21, 1, {9}, Reads::Inputs},
      {"add2", 0.02, 1, {6, 10}, Reads::Nothing, true},
  };
}

static bool is_number(const std::string& text) {
  if (text.empty()) return false;
  for (char c : text)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// "layer3.0" -> true, with *first_block = true for block 0.
static bool is_bottleneck(const std::string& name, bool* first_block) {
  if (name.rfind("layer", 0) != 0) return false;
  const std::size_t dot = name.find('.');
  if (dot == std::string::npos) return false;
  const std::string block = name.substr(dot + 1);
  if (!is_number(name.substr(5, dot - 5)) || !is_number(block)) return false;
  *first_block = block == "0";
  return true;
}

static bool is_transformer_block(const std::string& name) {
  return name.rfind("h.", 0) == 0 && is_number(name.substr(2));
}

static std::vector<OpSpec> generic_ops(const Layer& layer) {
  if (layer.saved_bytes == 0) return {{"", 1.0, 1, {kLayerInput}, Reads::InputsAndOutput}};
  return {{"saved", 0.5, 1, {kLayerInput}, Reads::Inputs},
          {"", 0.5, 1, {0}, Reads::InputsAndOutput}};
}

madpipe::remat::RematGraph madpipe::remat::layer_chain_graph(const Profile& profile, int first,
                                                             int last) {
  StageGraphBuilder builder(profile, first, last);
  for (int l = first; l <= last; ++l) {
    const Layer& layer = profile.layers[static_cast<std::size_t>(l)];
    builder.add_layer(l, {{"", 1.0, 1, {kLayerInput}, Reads::InputsAndOutput}},
                      layer.output_bytes + layer.saved_bytes, layer.output_bytes);
  }
  return builder.finish();
}

madpipe::remat::RematGraph madpipe::remat::stage_graph(const Profile& profile, int first,
                                                       int last) {
  StageGraphBuilder builder(profile, first, last);
  for (int l = first; l <= last; ++l) {
    const Layer& layer = profile.layers[static_cast<std::size_t>(l)];
    bool first_block = false;
    if (is_bottleneck(layer.name, &first_block)) {
      builder.add_layer(l, bottleneck_ops(first_block), layer.output_bytes, layer.output_bytes);
    } else if (is_transformer_block(layer.name)) {
      builder.add_layer(l, transformer_block_ops(), layer.output_bytes, layer.output_bytes);
    } else {
      builder.add_layer(l, generic_ops(layer), layer.output_bytes, layer.output_bytes);
    }
  }
  return builder.finish();
}
