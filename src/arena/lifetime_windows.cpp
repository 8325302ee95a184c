#include "arena/lifetime_windows.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

// predecessors[v]: the nodes v depends on (producers of its inputs, order edges into it).
static std::vector<std::vector<int>> predecessors_of(const madpipe::arena::TensorGraph& graph) {
  std::vector<std::vector<int>> predecessors(graph.nodes.size());
  for (const madpipe::arena::Tensor& tensor : graph.tensors) {
    if (tensor.producer < 0) continue;
    for (int consumer : tensor.consumers)
      predecessors[static_cast<std::size_t>(consumer)].push_back(tensor.producer);
  }
  for (const madpipe::arena::OrderEdge& edge : graph.order_edges)
    predecessors[static_cast<std::size_t>(edge.after)].push_back(edge.before);
  return predecessors;
}

madpipe::arena::LifetimeWindows madpipe::arena::lifetime_windows(const TensorGraph& graph,
                                                                 int horizon) {
  check_tensor_graph(graph);
  const int n = static_cast<int>(graph.nodes.size());
  if (horizon < 0) throw_invalid("", "horizon", "must be >= 0, got " + std::to_string(horizon));
  if (horizon == 0) horizon = n;
  const std::vector<std::vector<int>> predecessors = predecessors_of(graph);
  // The node order is topological (check_tensor_graph), so one pass each way gives the paths.
  std::vector<int> asap(static_cast<std::size_t>(n), 0), height(static_cast<std::size_t>(n), 0);
  for (int v = 0; v < n; ++v)
    for (int p : predecessors[static_cast<std::size_t>(v)])
      asap[static_cast<std::size_t>(v)] =
          std::max(asap[static_cast<std::size_t>(v)], asap[static_cast<std::size_t>(p)] + 1);
  for (int v = n - 1; v >= 0; --v)
    for (int p : predecessors[static_cast<std::size_t>(v)])
      height[static_cast<std::size_t>(p)] =
          std::max(height[static_cast<std::size_t>(p)], height[static_cast<std::size_t>(v)] + 1);
  int longest = 0;
  for (int v = 0; v < n; ++v)
    longest = std::max(longest,
                       asap[static_cast<std::size_t>(v)] + height[static_cast<std::size_t>(v)] + 1);
  if (horizon < longest)
    throw_invalid("", "horizon",
                  "must be >= " + std::to_string(longest) +
                      ", the number of nodes on the longest dependency path, got " +
                      std::to_string(horizon));

  LifetimeWindows windows;
  windows.horizon = horizon;
  for (int v = 0; v < n; ++v)
    windows.span.push_back(
        {asap[static_cast<std::size_t>(v)], horizon - 1 - height[static_cast<std::size_t>(v)]});
  for (const Tensor& tensor : graph.tensors) {
    const bool input = tensor.producer < 0;
    const TimeWindow made =
        input ? TimeWindow{0, -1} : windows.span[static_cast<std::size_t>(tensor.producer)];
    if (tensor.consumers.empty()) {
      windows.mul.push_back(input ? TimeWindow{0, 0} : made);
      windows.pres.push_back(input ? TimeWindow{0, 0} : TimeWindow{});
      continue;
    }
    int latest_use = 0, earliest_last_use = 0;
    for (int consumer : tensor.consumers) {
      latest_use = std::max(latest_use, windows.span[static_cast<std::size_t>(consumer)].last);
      earliest_last_use =
          std::max(earliest_last_use, windows.span[static_cast<std::size_t>(consumer)].first);
    }
    windows.mul.push_back({input ? 0 : made.first, latest_use});
    windows.pres.push_back({input ? 0 : made.last + 1, earliest_last_use});
  }
  return windows;
}

namespace {
// Strict ancestors of every node, as bit sets over the nodes.
class Ancestry {
 public:
  explicit Ancestry(const madpipe::arena::TensorGraph& graph)
      : words_((graph.nodes.size() + 63) / 64), bits_(graph.nodes.size() * words_, 0) {
    const std::vector<std::vector<int>> predecessors = predecessors_of(graph);
    for (std::size_t v = 0; v < graph.nodes.size(); ++v) {
      for (int p : predecessors[v]) {
        for (std::size_t w = 0; w < words_; ++w)
          bits_[v * words_ + w] |= bits_[static_cast<std::size_t>(p) * words_ + w];
        bits_[v * words_ + static_cast<std::size_t>(p) / 64] |= std::uint64_t{1} << (p % 64);
      }
    }
  }
  // The first node before `node` that is not its ancestor (`node` when all are).
  int first_non_ancestor(int node) const {
    for (std::size_t w = 0; w < words_; ++w) {
      const std::uint64_t missing = ~bits_[static_cast<std::size_t>(node) * words_ + w];
      if (missing == 0) continue;
      return std::min(node, static_cast<int>(w * 64) + __builtin_ctzll(missing));
    }
    return node;
  }
  // True when `ancestor` must run before `node`.
  bool before(int ancestor, int node) const {
    return (bits_[static_cast<std::size_t>(node) * words_ +
                  static_cast<std::size_t>(ancestor) / 64] >>
            (ancestor % 64)) &
           1u;
  }

 private:
  std::size_t words_;
  std::vector<std::uint64_t> bits_;
};
}  // namespace

std::vector<std::pair<int, int>> madpipe::arena::may_coexist_pairs(const TensorGraph& graph,
                                                                   const LifetimeWindows& windows) {
  const Ancestry ancestry(graph);
  auto precedes = [&](const Tensor& a, const Tensor& b) {
    if (b.producer < 0) return false;  // b is there from the start
    if (a.consumers.empty()) return a.producer >= 0 && ancestry.before(a.producer, b.producer);
    return std::all_of(a.consumers.begin(), a.consumers.end(),
                       [&](int user) { return ancestry.before(user, b.producer); });
  };
  std::vector<std::pair<int, int>> pairs;
  const int m = static_cast<int>(graph.tensors.size());
  for (int i = 0; i < m; ++i) {
    const TimeWindow& a = windows.mul[static_cast<std::size_t>(i)];
    for (int j = i + 1; j < m; ++j) {
      const TimeWindow& b = windows.mul[static_cast<std::size_t>(j)];
      if (a.last < b.first || b.last < a.first) continue;
      const Tensor& ti = graph.tensors[static_cast<std::size_t>(i)];
      const Tensor& tj = graph.tensors[static_cast<std::size_t>(j)];
      if (precedes(ti, tj) || precedes(tj, ti)) continue;
      pairs.emplace_back(i, j);
    }
  }
  return pairs;
}

std::vector<int> madpipe::arena::sequential_cuts(const TensorGraph& graph) {
  check_tensor_graph(graph);
  const Ancestry ancestry(graph);
  const int n = static_cast<int>(graph.nodes.size());
  // A cut at i holds when no node from i on misses an ancestor before i.
  std::vector<int> cuts;
  int lowest_gap = n;
  std::vector<int> gap_from(static_cast<std::size_t>(n) + 1, n);
  for (int v = n - 1; v >= 0; --v) {
    lowest_gap = std::min(lowest_gap, ancestry.first_non_ancestor(v));
    gap_from[static_cast<std::size_t>(v)] = lowest_gap;
  }
  for (int i = 1; i < n; ++i)
    if (gap_from[static_cast<std::size_t>(i)] >= i) cuts.push_back(i);
  return cuts;
}
