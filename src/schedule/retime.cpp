#include "schedule/retime.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

namespace {
// t[to] >= t[from] + weight - periods * T
struct Edge {
  int from = 0;
  int to = 0;
  double weight = 0;
  int periods = 0;
};
}  // namespace

static int residue(int shift, int k) { return ((shift % k) + k) % k; }

static std::vector<Edge> constraint_edges(const madpipe::schedule::Pattern& pattern,
                                          const std::vector<madpipe::schedule::Stage>& stages,
                                          const madpipe::Platform& platform, bool* ok) {
  using namespace madpipe::schedule;
  *ok = true;
  const int k = pattern.k;
  const auto& ops = pattern.ops;
  std::vector<Edge> edges;
  // Dependencies along the chain of one micro-batch.
  const std::vector<Op> chain = micro_batch_chain(stages, platform);
  std::map<std::tuple<int, int, int>, int> index;  // (kind, stage, residue) -> op index
  for (int i = 0; i < static_cast<int>(ops.size()); ++i)
    index[{static_cast<int>(ops[i].kind), ops[i].stage, residue(ops[i].shift, k)}] = i;
  for (std::size_t c = 1; c < chain.size(); ++c) {
    for (int r = 0; r < k; ++r) {
      auto u = index.find({static_cast<int>(chain[c - 1].kind), chain[c - 1].stage, r});
      auto v = index.find({static_cast<int>(chain[c].kind), chain[c].stage, r});
      if (u == index.end() || v == index.end()) {
        *ok = false;
        return {};
      }
      const Op& ou = ops[u->second];
      const Op& ov = ops[v->second];
      edges.push_back({u->second, v->second, ou.duration_ms, (ou.shift - ov.shift) / k});
    }
  }
  // W of a split stage depends on B of its stage only.
  const std::vector<Op> weights = weight_ops(stages);
  for (const Op& w : weights) {
    for (int r = 0; r < k; ++r) {
      auto u = index.find({static_cast<int>(OpKind::B), w.stage, r});
      auto v = index.find({static_cast<int>(OpKind::W), w.stage, r});
      if (u == index.end() || v == index.end()) {
        *ok = false;
        return {};
      }
      const Op& ou = ops[u->second];
      edges.push_back(
          {u->second, v->second, ou.duration_ms, (ou.shift - ops[v->second].shift) / k});
    }
  }
  // Cyclic order on each resource; ops starting together (zero-length ones) keep chain order.
  std::map<std::pair<int, int>, int> chain_position;  // (kind, stage) -> position
  for (std::size_t c = 0; c < chain.size(); ++c)
    chain_position[{static_cast<int>(chain[c].kind), chain[c].stage}] = static_cast<int>(c);
  for (std::size_t w = 0; w < weights.size(); ++w)
    chain_position[{static_cast<int>(OpKind::W), weights[w].stage}] =
        static_cast<int>(chain.size() + w);
  auto position = [&](int i) {
    return chain_position[{static_cast<int>(ops[i].kind), ops[i].stage}];
  };
  std::map<int, std::vector<int>> by_resource;
  for (int i = 0; i < static_cast<int>(ops.size()); ++i)
    by_resource[resource_of(ops[i], platform.gpus)].push_back(i);
  for (auto& [resource, members] : by_resource) {
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
      if (ops[a].start_ms != ops[b].start_ms) return ops[a].start_ms < ops[b].start_ms;
      return position(a) < position(b);
    });
    for (std::size_t m = 0; m + 1 < members.size(); ++m)
      edges.push_back({members[m], members[m + 1], ops[members[m]].duration_ms, 0});
    // Wrap: the first op of the next period comes after the last one of this period.
    edges.push_back({members.back(), members.front(), ops[members.back()].duration_ms, 1});
  }
  return edges;
}

// Longest-path potentials for period T, or false when a positive cycle makes T infeasible.
static bool potentials(const std::vector<Edge>& edges, int n, double T, std::vector<double>& t) {
  t.assign(n, 0.0);
  const double eps = 1e-12 * std::max(1.0, T);
  for (int round = 0; round <= n; ++round) {
    bool changed = false;
    for (const Edge& e : edges) {
      const double candidate = t[e.from] + e.weight - e.periods * T;
      if (candidate > t[e.to] + eps) {
        t[e.to] = candidate;
        changed = true;
      }
    }
    if (!changed) return true;
  }
  return false;
}

std::optional<madpipe::schedule::Pattern> madpipe::schedule::retime(
    const Pattern& pattern, const std::vector<Stage>& stages, const Platform& platform) {
  if (pattern.ops.empty() || pattern.period_ms <= 0) return std::nullopt;
  bool ok = false;
  const std::vector<Edge> edges = constraint_edges(pattern, stages, platform, &ok);
  if (!ok) return std::nullopt;
  const int n = static_cast<int>(pattern.ops.size());
  std::vector<double> t;
  double hi = pattern.period_ms;
  if (!potentials(edges, n, hi, t)) return std::nullopt;
  // No period is below the busiest resource's load.
  std::map<int, double> load;
  for (const Op& op : pattern.ops) load[resource_of(op, platform.gpus)] += op.duration_ms;
  double lo = 0;
  for (const auto& [resource, busy] : load) lo = std::max(lo, busy);
  lo = std::min(lo, hi);
  std::vector<double> trial;
  if (potentials(edges, n, lo, trial)) {
    hi = lo;
  } else {
    for (int iter = 0; iter < 60 && hi - lo > 1e-10 * hi; ++iter) {
      const double mid = 0.5 * (lo + hi);
      if (potentials(edges, n, mid, trial))
        hi = mid;
      else
        lo = mid;
    }
  }
  potentials(edges, n, hi, t);
  Pattern out = pattern;
  out.period_ms = hi;
  for (int i = 0; i < n; ++i) out.ops[i].start_ms = t[i];
  normalize(out);
  sort_ops(out);
  return out;
}
