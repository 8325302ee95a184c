#include "remat/remat_graph.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

static std::string node_field(int v, const char* key) {
  return "/nodes/" + std::to_string(v) + "/" + key;
}

void madpipe::remat::check_remat_graph(const RematGraph& graph) {
  if (graph.nodes.empty()) throw_invalid("", "/nodes", "the graph has no nodes");
  std::unordered_map<std::string, int> index_of_name;
  for (int v = 0; v < graph.size(); ++v) {
    const RematNode& node = graph.nodes[static_cast<std::size_t>(v)];
    if (node.name.empty()) throw_invalid("", node_field(v, "name"), "must not be empty");
    const auto [it, added] = index_of_name.emplace(node.name, v);
    if (!added)
      throw_invalid(
          "", node_field(v, "name"),
          "'" + node.name + "' is already the name of node " + std::to_string(it->second));
    if (!std::isfinite(node.duration_ms) || node.duration_ms < 0)
      throw_invalid("", node_field(v, "duration_ms"),
                    "must be >= 0, got " + std::to_string(node.duration_ms));
    if (node.size_bytes < 0)
      throw_invalid("", node_field(v, "size_bytes"),
                    "must be >= 0, got " + std::to_string(node.size_bytes));
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      const int u = node.inputs[i];
      const std::string field = "/nodes/" + std::to_string(v) + "/inputs/" + std::to_string(i);
      if (u < 0 || u >= graph.size())
        throw_invalid("", field, "node " + std::to_string(u) + " does not exist");
      if (u >= v)
        throw_invalid("", field,
                      "input " + std::to_string(u) + " must come before node " + std::to_string(v) +
                          " in the input order (a topological order)");
      if (std::find(node.inputs.begin(), node.inputs.begin() + static_cast<std::ptrdiff_t>(i), u) !=
          node.inputs.begin() + static_cast<std::ptrdiff_t>(i))
        throw_invalid("", field, "input " + std::to_string(u) + " is listed twice");
    }
  }
}

std::vector<std::vector<int>> madpipe::remat::consumers_of(const RematGraph& graph) {
  std::vector<std::vector<int>> consumers(graph.nodes.size());
  for (int v = 0; v < graph.size(); ++v)
    for (int u : graph.nodes[static_cast<std::size_t>(v)].inputs)
      consumers[static_cast<std::size_t>(u)].push_back(v);
  return consumers;
}

double madpipe::remat::base_duration_ms(const RematGraph& graph) {
  double sum = 0;
  for (const RematNode& node : graph.nodes) sum += node.duration_ms;
  return sum;
}

static std::string quoted(const madpipe::remat::RematGraph& graph, int v) {
  return "'" + graph.nodes[static_cast<std::size_t>(v)].name + "'";
}

madpipe::remat::GraphReplay madpipe::remat::simulate_remat(const RematGraph& graph,
                                                           const GraphSequence& sequence) {
  GraphReplay replay;
  const std::size_t n = graph.nodes.size();
  replay.computations.assign(n, 0);
  std::vector<bool> resident(n, false);
  std::int64_t memory = 0;
  auto fail = [&](std::size_t step, const std::string& problem) {
    replay.problem = "step " + std::to_string(step + 1) + ": " + problem;
    return replay;
  };
  for (std::size_t s = 0; s < sequence.size(); ++s) {
    const int v = sequence[s].node;
    if (v < 0 || v >= graph.size()) return fail(s, "node " + std::to_string(v) + " does not exist");
    const RematNode& node = graph.nodes[static_cast<std::size_t>(v)];
    for (int u : node.inputs)
      if (!resident[static_cast<std::size_t>(u)])
        return fail(s, "node " + quoted(graph, v) + " needs " + quoted(graph, u) +
                           ", which is not resident");
    if (resident[static_cast<std::size_t>(v)])
      return fail(s,
                  "node " + quoted(graph, v) + " is computed while its output is still resident");
    if (!node.recomputable && replay.computations[static_cast<std::size_t>(v)] > 0)
      return fail(s, "node " + quoted(graph, v) + " cannot be recomputed");
    resident[static_cast<std::size_t>(v)] = true;
    memory += node.size_bytes;
    ++replay.computations[static_cast<std::size_t>(v)];
    replay.total_ms += node.duration_ms;
    if (replay.peak_step < 0 || memory > replay.peak_bytes) {
      replay.peak_bytes = memory;
      replay.peak_step = static_cast<int>(s);
    }
    for (int f : sequence[s].freed) {
      if (f < 0 || f >= graph.size())
        return fail(s, "frees node " + std::to_string(f) + ", which does not exist");
      if (!resident[static_cast<std::size_t>(f)])
        return fail(s, "frees " + quoted(graph, f) + ", which is not resident");
      resident[static_cast<std::size_t>(f)] = false;
      memory -= graph.nodes[static_cast<std::size_t>(f)].size_bytes;
    }
  }
  for (std::size_t v = 0; v < n; ++v)
    if (replay.computations[v] == 0) {
      replay.problem = "node " + quoted(graph, static_cast<int>(v)) + " is never computed";
      return replay;
    }
  replay.valid = true;
  return replay;
}

madpipe::remat::GraphSequence madpipe::remat::with_earliest_frees(const RematGraph& graph,
                                                                  const std::vector<int>& nodes) {
  GraphSequence sequence(nodes.size());
  // last_use[p]: the last step reading the output computed at step p before its node runs again.
  std::vector<std::size_t> last_use(nodes.size());
  std::vector<int> current_step(graph.nodes.size(), -1);  // the step of each node's live copy
  for (std::size_t p = 0; p < nodes.size(); ++p) {
    const int v = nodes[p];
    sequence[p].node = v;
    last_use[p] = p;
    if (v < 0 || v >= graph.size()) continue;
    for (int u : graph.nodes[static_cast<std::size_t>(v)].inputs) {
      const int q = current_step[static_cast<std::size_t>(u)];
      if (q >= 0) last_use[static_cast<std::size_t>(q)] = p;
    }
    current_step[static_cast<std::size_t>(v)] = static_cast<int>(p);
  }
  for (std::size_t p = 0; p < nodes.size(); ++p)
    if (nodes[p] >= 0 && nodes[p] < graph.size()) sequence[last_use[p]].freed.push_back(nodes[p]);
  return sequence;
}

std::vector<int> madpipe::remat::computed_nodes(const GraphSequence& sequence) {
  std::vector<int> nodes;
  nodes.reserve(sequence.size());
  for (const RematStep& step : sequence) nodes.push_back(step.node);
  return nodes;
}

std::vector<int> madpipe::remat::input_order(const RematGraph& graph) {
  std::vector<int> order(graph.nodes.size());
  std::iota(order.begin(), order.end(), 0);
  return order;
}

std::int64_t madpipe::remat::no_remat_peak_bytes(const RematGraph& graph) {
  return simulate_remat(graph, with_earliest_frees(graph, input_order(graph))).peak_bytes;
}

std::string madpipe::remat::to_string(const RematGraph& graph, const std::vector<int>& nodes) {
  std::string text;
  for (int v : nodes) {
    if (!text.empty()) text += ' ';
    text += v >= 0 && v < graph.size() ? graph.nodes[static_cast<std::size_t>(v)].name
                                       : "#" + std::to_string(v);
  }
  return text;
}
