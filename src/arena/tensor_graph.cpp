#include "arena/tensor_graph.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <map>

void madpipe::arena::check_tensor_graph(const TensorGraph& graph) {
  const int nodes = static_cast<int>(graph.nodes.size());
  for (const Tensor& tensor : graph.tensors) {
    auto fail = [&](const std::string& problem) {
      throw Error(ErrorKind::InvalidInput, "", "tensor " + tensor.name, problem);
    };
    if (tensor.size_bytes < 0) fail("size must be >= 0, got " + std::to_string(tensor.size_bytes));
    if (tensor.producer < -1 || tensor.producer >= nodes)
      fail("producer " + std::to_string(tensor.producer) + " is not a node");
    for (int consumer : tensor.consumers) {
      if (consumer < 0 || consumer >= nodes)
        fail("consumer " + std::to_string(consumer) + " is not a node");
      if (consumer <= tensor.producer)
        fail("consumer " + graph.nodes[static_cast<std::size_t>(consumer)].name +
             " does not run after its producer");
    }
  }
  for (const OrderEdge& edge : graph.order_edges) {
    const std::string field =
        "order edge " + std::to_string(edge.before) + "->" + std::to_string(edge.after);
    if (edge.before < 0 || edge.before >= nodes || edge.after < 0 || edge.after >= nodes)
      throw Error(ErrorKind::InvalidInput, "", field, "is not between two nodes");
    if (edge.after <= edge.before)
      throw Error(ErrorKind::InvalidInput, "", field, "does not go forward in the node order");
  }
}

madpipe::arena::TensorGraph madpipe::arena::make_tensor_graph(
    const std::vector<std::string>& node_names, const std::vector<TensorSpec>& tensors) {
  TensorGraph graph;
  std::map<std::string, int> index;
  for (const std::string& name : node_names) {
    if (!index.emplace(name, static_cast<int>(graph.nodes.size())).second)
      throw_invalid("", "node " + name, "appears twice");
    graph.nodes.push_back({name, 0.0});
  }
  auto node_of = [&](const std::string& tensor, const std::string& name) {
    const auto found = index.find(name);
    if (found == index.end()) throw_invalid("", "tensor " + tensor, "unknown node '" + name + "'");
    return found->second;
  };
  for (const TensorSpec& spec : tensors) {
    Tensor tensor{spec.name, spec.size_bytes, -1, {}};
    if (!spec.producer.empty()) tensor.producer = node_of(spec.name, spec.producer);
    for (const std::string& consumer : spec.consumers)
      tensor.consumers.push_back(node_of(spec.name, consumer));
    graph.tensors.push_back(std::move(tensor));
  }
  check_tensor_graph(graph);
  return graph;
}

namespace {
using madpipe::arena::Tensor;
using madpipe::arena::TensorNode;
using madpipe::remat::RematChain;
using madpipe::remat::RematOp;
using madpipe::remat::RematOpKind;

// The nodes and tensors of one micro-batch, in sequence order, each node marked forward or
// backward part; tensors may have 0 bytes.
class MicroBatchGraph {
 public:
  explicit MicroBatchGraph(const madpipe::remat::RematChain& chain)
      : chain_(chain),
        plain_(chain.a.size(), -1),
        recorded_(chain.a.size(), -1),
        gradient_(chain.a.size(), -1) {
    add_node("recv", 0.0);  // the stage input arrives right before the forward part
    plain_[0] = add_tensor("a0", chain.a[0]);
    pending_gradient_ = chain.length();
  }

  void add(const madpipe::remat::RematOp& op, const std::string& token) {
    const int k = op.stage;
    switch (op.kind) {
      case madpipe::remat::RematOpKind::ForwardAll:
      case madpipe::remat::RematOpKind::ForwardCheckpoint:
      case madpipe::remat::RematOpKind::ForwardNone: {
        add_node(token, chain_.forward_ms[static_cast<std::size_t>(k)]);
        if (op.kind == madpipe::remat::RematOpKind::ForwardNone) {
          consume(plain_[k - 1], true);
        } else {
          consume(plain_[k - 1] >= 0 ? plain_[k - 1] : recorded_[k - 1], false);
        }
        if (op.kind == madpipe::remat::RematOpKind::ForwardAll) {
          consume(plain_[k], true);
          recorded_[k] = add_tensor("abar" + std::to_string(k), chain_.abar[k]);
        } else if (plain_[k] < 0) {
          plain_[k] = add_tensor("a" + std::to_string(k), chain_.a[k]);
        }
        workspace(chain_.forward_overhead[k]);
        if (op.kind == madpipe::remat::RematOpKind::ForwardAll && k == chain_.length())
          backward_ = true;
        break;
      }
      case madpipe::remat::RematOpKind::Backward: {
        if (pending_gradient_ >= 0) {  // the received gradient, right before the first backward
          add_node("recv_grad", 0.0);
          gradient_[pending_gradient_] =
              add_tensor("d" + std::to_string(pending_gradient_), chain_.delta[pending_gradient_]);
          pending_gradient_ = -1;
        }
        add_node(token, chain_.backward_ms[static_cast<std::size_t>(k)]);
        consume(gradient_[k], true);
        consume(recorded_[k], true);
        if (plain_[k - 1] >= 0) {
          consume(plain_[k - 1], true);
        } else {
          consume(recorded_[k - 1], false);
        }
        gradient_[k - 1] = add_tensor("d" + std::to_string(k - 1), chain_.delta[k - 1]);
        workspace(chain_.backward_overhead[k]);
        break;
      }
      case madpipe::remat::RematOpKind::Offload:
      case madpipe::remat::RematOpKind::Prefetch:
        MADPIPE_UNREACHABLE("offloading ops are rejected before");
    }
  }

  std::vector<TensorNode> nodes;
  std::vector<bool> backward;  // per node
  std::vector<Tensor> tensors;

 private:
  int current() const { return static_cast<int>(nodes.size()) - 1; }
  void add_node(const std::string& name, double ms) {
    nodes.push_back({name, ms});
    backward.push_back(backward_);
  }
  int add_tensor(const std::string& name, std::int64_t bytes) {
    tensors.push_back({name, bytes, current(), {}});
    return static_cast<int>(tensors.size()) - 1;
  }
  // The current node uses tensor `t` (-1: none); `last` frees the slot holding it.
  void consume(int& t, bool last) {
    if (t < 0) return;
    tensors[static_cast<std::size_t>(t)].consumers.push_back(current());
    if (last) t = -1;
  }
  void workspace(std::int64_t bytes) { add_tensor("ws:" + nodes.back().name, bytes); }

  const madpipe::remat::RematChain& chain_;
  std::vector<int> plain_, recorded_, gradient_;
  bool backward_ = false;
  int pending_gradient_ = -1;
};
}  // namespace

madpipe::arena::MicroBatchTensorGraph madpipe::arena::micro_batch_tensor_graph(
    const madpipe::remat::RematChain& chain, const madpipe::remat::RematSequence& sequence) {
  const madpipe::remat::RematSequence ops = sequence.empty() ? store_all_sequence(chain) : sequence;
  const madpipe::remat::SequenceReplay replay = replay_sequence(chain, ops);
  if (!replay.valid) throw_invalid("", "sequence", replay.problem);
  MicroBatchGraph one(chain);
  for (const madpipe::remat::RematOp& op : ops)
    one.add(op, to_string(madpipe::remat::RematSequence{op}, chain));
  MicroBatchTensorGraph result;
  result.graph.nodes = std::move(one.nodes);
  result.graph.tensors = std::move(one.tensors);
  result.forward_nodes =
      static_cast<int>(std::count(one.backward.begin(), one.backward.end(), false));
  check_tensor_graph(result.graph);
  return result;
}

// Nodes of [begin, end) with no dependency on (`sources`) or from (`!sources`) another node of the
// range, through the tensors of `graph`.
static std::vector<int> part_ends(const madpipe::arena::TensorGraph& graph, int begin, int end,
                                  bool sources) {
  std::vector<bool> linked(static_cast<std::size_t>(end - begin), false);
  auto inside = [&](int node) { return node >= begin && node < end; };
  for (const madpipe::arena::Tensor& tensor : graph.tensors) {
    if (!inside(tensor.producer)) continue;
    for (int consumer : tensor.consumers) {
      if (!inside(consumer)) continue;
      linked[static_cast<std::size_t>((sources ? consumer : tensor.producer) - begin)] = true;
    }
  }
  std::vector<int> ends;
  for (int node = begin; node < end; ++node)
    if (!linked[static_cast<std::size_t>(node - begin)]) ends.push_back(node);
  return ends;
}

madpipe::arena::TensorGraph madpipe::arena::stage_tensor_graph(
    const madpipe::remat::RematChain& chain, const madpipe::remat::RematSequence& sequence,
    int in_flight) {
  if (in_flight < 1)
    throw_invalid("", "in_flight", "must be >= 1, got " + std::to_string(in_flight));
  const MicroBatchTensorGraph one = micro_batch_tensor_graph(chain, sequence);
  const int size = static_cast<int>(one.graph.nodes.size());
  const int forward_count = one.forward_nodes;
  const int backward_count = size - forward_count;
  // Global position of node i of micro-batch m: forward parts first, then backward parts.
  auto position = [&](int m, int i) {
    return i >= forward_count ? in_flight * forward_count + m * backward_count + (i - forward_count)
                              : m * forward_count + i;
  };
  TensorGraph graph;
  graph.nodes.resize(static_cast<std::size_t>(in_flight * size));
  for (int m = 0; m < in_flight; ++m) {
    const std::string suffix = "@m" + std::to_string(m);
    for (int i = 0; i < size; ++i) {
      const TensorNode& node = one.graph.nodes[static_cast<std::size_t>(i)];
      graph.nodes[static_cast<std::size_t>(position(m, i))] = {node.name + suffix,
                                                               node.duration_ms};
    }
    for (const Tensor& tensor : one.graph.tensors) {
      if (tensor.size_bytes == 0) {
        for (int consumer : tensor.consumers)
          if (tensor.producer >= 0)
            graph.order_edges.push_back({position(m, tensor.producer), position(m, consumer)});
        continue;
      }
      Tensor copy{tensor.name + suffix, tensor.size_bytes, position(m, tensor.producer), {}};
      for (int consumer : tensor.consumers) copy.consumers.push_back(position(m, consumer));
      graph.tensors.push_back(std::move(copy));
    }
  }
  // Barriers between consecutive parts: the last ops of one part before the first ops of the next.
  const std::vector<int> forward_sources = part_ends(one.graph, 0, forward_count, true);
  const std::vector<int> forward_sinks = part_ends(one.graph, 0, forward_count, false);
  const std::vector<int> backward_sources = part_ends(one.graph, forward_count, size, true);
  const std::vector<int> backward_sinks = part_ends(one.graph, forward_count, size, false);
  for (int part = 0; part + 1 < 2 * in_flight; ++part) {
    const bool backward = part >= in_flight, next_backward = part + 1 >= in_flight;
    const int m = part % in_flight, next_m = (part + 1) % in_flight;
    for (int sink : backward ? backward_sinks : forward_sinks)
      for (int source : next_backward ? backward_sources : forward_sources)
        graph.order_edges.push_back({position(m, sink), position(next_m, source)});
  }
  check_tensor_graph(graph);
  return graph;
}
