#include "schedule/retime.hpp"

#include "schedule/residue_table.hpp"

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
  // (kind, stage) as one row; residue -> the op's index (the last such op), -1 where none.
  constexpr int kKinds = static_cast<int>(OpKind::W) + 1;
  const int num_stages = static_cast<int>(stages.size());
  const auto row = [num_stages](OpKind kind, int stage) {
    return stage < 0 || stage >= num_stages ? -1 : static_cast<int>(kind) * num_stages + stage;
  };
  ResidueTable<int> index(kKinds * num_stages, k, -1);
  for (int i = 0; i < static_cast<int>(ops.size()); ++i)
    index.set(row(ops[i].kind, ops[i].stage), residue(ops[i].shift, k), i);
  // The edge from op (kind u, stage u) to op (kind v, stage v) of each residue, weighted by u.
  const auto link = [&](OpKind from_kind, int from_stage, OpKind to_kind, int to_stage) {
    for (int r = 0; r < k; ++r) {
      const int u = index.get(row(from_kind, from_stage), r);
      const int v = index.get(row(to_kind, to_stage), r);
      if (u < 0 || v < 0) return false;
      edges.push_back({u, v, ops[u].duration_ms, (ops[u].shift - ops[v].shift) / k});
    }
    return true;
  };
  for (std::size_t c = 1; c < chain.size(); ++c) {
    if (!link(chain[c - 1].kind, chain[c - 1].stage, chain[c].kind, chain[c].stage)) {
      *ok = false;
      return {};
    }
  }
  // W of a split stage depends on B of its stage only.
  const std::vector<Op> weights = weight_ops(stages);
  for (const Op& w : weights) {
    if (!link(OpKind::B, w.stage, OpKind::W, w.stage)) {
      *ok = false;
      return {};
    }
  }
  // Cyclic order on each resource; ops starting together (zero-length ones) keep chain order.
  std::map<std::pair<int, int>, int> chain_position;  // (kind, stage) -> position
  for (std::size_t c = 0; c < chain.size(); ++c)
    chain_position[{static_cast<int>(chain[c].kind), chain[c].stage}] = static_cast<int>(c);
  for (std::size_t w = 0; w < weights.size(); ++w)
    chain_position[{static_cast<int>(OpKind::W), weights[w].stage}] =
        static_cast<int>(chain.size() + w);
  std::vector<int> position(ops.size(), 0);  // 0 for an op of no chain position
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const auto it = chain_position.find({static_cast<int>(ops[i].kind), ops[i].stage});
    if (it != chain_position.end()) position[i] = it->second;
  }
  std::map<int, std::vector<int>> by_resource;
  for (int i = 0; i < static_cast<int>(ops.size()); ++i)
    by_resource[resource_of(ops[i], platform.gpus)].push_back(i);
  for (auto& [resource, members] : by_resource) {
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
      if (ops[a].start_ms != ops[b].start_ms) return ops[a].start_ms < ops[b].start_ms;
      return position[a] < position[b];
    });
    for (std::size_t m = 0; m + 1 < members.size(); ++m)
      edges.push_back({members[m], members[m + 1], ops[members[m]].duration_ms, 0});
    // Wrap: the first op of the next period comes after the last one of this period.
    edges.push_back({members.back(), members.front(), ops[members.back()].duration_ms, 1});
  }
  return edges;
}

// The edges ordered by a topological order of their sources in the edges within one period
// (periods == 0; ops on a cycle of them come last): Bellman-Ford then needs about as many rounds
// as a longest path crosses period boundaries, not as many as it has edges. The potentials do not
// depend on the order.
static std::vector<Edge> in_topological_order(std::vector<Edge> edges, int n) {
  std::vector<int> unmet(n, 0);
  std::vector<std::vector<int>> next(n);
  for (const Edge& e : edges)
    if (e.periods == 0) {
      ++unmet[e.to];
      next[e.from].push_back(e.to);
    }
  std::vector<int> rank(n, n), ready;
  for (int u = 0; u < n; ++u)
    if (unmet[u] == 0) ready.push_back(u);
  int placed = 0;
  while (!ready.empty()) {
    const int u = ready.back();
    ready.pop_back();
    rank[u] = placed++;
    for (int v : next[u])
      if (--unmet[v] == 0) ready.push_back(v);
  }
  std::stable_sort(edges.begin(), edges.end(),
                   [&rank](const Edge& a, const Edge& b) { return rank[a.from] < rank[b.from]; });
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

// The maximum cycle ratio sum(weight) / sum(periods) of the graph by Howard's policy iteration
// (Cochet-Terrasson et al., 1998): each op follows one of its edges; the cycles of that choice
// give each op a ratio and a potential, and an op switches to an edge that reaches a larger ratio,
// or the same ratio with a larger potential, until none does. Usually a handful of rounds, where
// bisecting on the period costs a Bellman-Ford pass per step. nullopt when a cycle of the policy
// has no positive period count or the rounds run out: the caller bisects then.
// The first policy follows, from each op, the tightest edge of a feasible schedule `t` at period
// T (the earliest one at the pattern's period): its critical cycle is usually close to the answer.
static std::optional<double> max_cycle_ratio(const std::vector<Edge>& edges, int n,
                                             const std::vector<double>& t, double T) {
  std::vector<std::vector<int>> out(n);
  for (int e = 0; e < static_cast<int>(edges.size()); ++e) out[edges[e].from].push_back(e);
  std::vector<int> policy(n, -1);
  const auto slack = [&](int e) {
    return t[edges[e].to] - t[edges[e].from] - (edges[e].weight - edges[e].periods * T);
  };
  for (int u = 0; u < n; ++u) {
    if (out[u].empty()) return std::nullopt;  // every op has its resource's cyclic edge
    policy[u] = out[u].front();
    for (int e : out[u])
      if (slack(e) < slack(policy[u])) policy[u] = e;
  }
  double scale = 1;
  for (const Edge& e : edges) scale = std::max(scale, std::abs(e.weight));
  const double eps = 1e-12 * scale * std::max(1, n);
  std::vector<double> ratio(n), value(n);
  std::vector<int> state(n), path;
  for (int round = 0; round < 10 * n + 100; ++round) {
    // Ratios and potentials of the policy: value[u] = w - ratio * p + value[next].
    std::fill(state.begin(), state.end(), 0);  // 0 new, 1 on the current walk, 2 done
    for (int start = 0; start < n; ++start) {
      if (state[start] != 0) continue;
      path.clear();
      int u = start;
      while (state[u] == 0) {
        state[u] = 1;
        path.push_back(u);
        u = edges[policy[u]].to;
      }
      std::size_t done = path.size();  // path[done..] lie on a new cycle
      if (state[u] == 1) {
        double w = 0;
        long long p = 0;
        done = static_cast<std::size_t>(std::find(path.begin(), path.end(), u) - path.begin());
        for (std::size_t i = done; i < path.size(); ++i) {
          w += edges[policy[path[i]]].weight;
          p += edges[policy[path[i]]].periods;
        }
        if (p <= 0) return std::nullopt;
        const double r = w / static_cast<double>(p);
        ratio[u] = r;
        value[u] = 0;
        state[u] = 2;
        for (std::size_t i = path.size(); i-- > done + 1;) {
          const Edge& e = edges[policy[path[i]]];
          ratio[path[i]] = r;
          value[path[i]] = e.weight - r * e.periods + value[e.to];
          state[path[i]] = 2;
        }
      }
      for (std::size_t i = done; i-- > 0;) {
        const Edge& e = edges[policy[path[i]]];
        ratio[path[i]] = ratio[e.to];
        value[path[i]] = e.weight - ratio[e.to] * e.periods + value[e.to];
        state[path[i]] = 2;
      }
    }
    // Improvement: first towards larger ratios, then towards larger potentials.
    bool changed = false;
    for (int u = 0; u < n; ++u)
      for (int e : out[u])
        if (ratio[edges[e].to] > ratio[edges[policy[u]].to] + eps) {
          policy[u] = e;
          changed = true;
        }
    if (changed) continue;
    for (int u = 0; u < n; ++u) {
      double best = value[u];
      for (int e : out[u]) {
        const Edge& edge = edges[e];
        if (std::abs(ratio[edge.to] - ratio[u]) > eps) continue;
        const double candidate = edge.weight - ratio[u] * edge.periods + value[edge.to];
        if (candidate > best + eps) {
          best = candidate;
          policy[u] = e;
          changed = true;
        }
      }
    }
    if (!changed) return *std::max_element(ratio.begin(), ratio.end());
  }
  return std::nullopt;
}

std::optional<madpipe::schedule::Pattern> madpipe::schedule::retime(
    const Pattern& pattern, const std::vector<Stage>& stages, const Platform& platform) {
  if (pattern.ops.empty() || pattern.period_ms <= 0) return std::nullopt;
  bool ok = false;
  const int n = static_cast<int>(pattern.ops.size());
  const std::vector<Edge> edges =
      in_topological_order(constraint_edges(pattern, stages, platform, &ok), n);
  if (!ok) return std::nullopt;
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
  // The ratio is exact up to rounding: checked, then checked a hair above.
  const std::optional<double> ratio = max_cycle_ratio(edges, n, t, pattern.period_ms);
  const double exact = ratio ? std::max(*ratio, lo) : hi;
  if (ratio && exact >= hi) {
    // The pattern is as tight as its order allows.
  } else if (ratio && potentials(edges, n, exact, trial)) {
    hi = exact;
  } else if (ratio && potentials(edges, n, exact * (1 + 1e-10), trial)) {
    hi = exact * (1 + 1e-10);
  } else if (potentials(edges, n, lo, trial)) {
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

madpipe::schedule::Pattern madpipe::schedule::with_earliest_shifts(const Pattern& pattern,
                                                                   const std::vector<Stage>& stages,
                                                                   const Platform& platform) {
  if (pattern.k != 1 || !(pattern.period_ms > 0)) return pattern;
  Pattern out = pattern;
  std::map<std::pair<OpKind, int>, Op*> op_of;
  for (Op& op : out.ops) op_of[{op.kind, op.stage}] = &op;
  const auto find = [&op_of](const Op& wanted) -> Op* {
    const auto it = op_of.find({wanted.kind, wanted.stage});
    return it == op_of.end() ? nullptr : it->second;
  };
  const double T = out.period_ms;
  const double eps = 1e-9 * T;  // the validator's tolerance for dependencies
  // Micro-batch 0 runs an op of shift x in period -x: `next` waits the fewest periods after
  // `before` ends.
  const auto follow = [&](const Op& before, Op& next) {
    const double wait = before.start_ms + before.duration_ms - next.start_ms - eps;
    next.shift = before.shift - std::max(0, static_cast<int>(std::ceil(wait / T)));
  };
  const std::vector<Op> chain = micro_batch_chain(stages, platform);
  std::vector<Op*> ops;
  for (const Op& c : chain) ops.push_back(find(c));
  for (const Op& w : weight_ops(stages)) ops.push_back(find(w));
  if (std::find(ops.begin(), ops.end(), nullptr) != ops.end()) return pattern;
  for (std::size_t c = 1; c < chain.size(); ++c) follow(*ops[c - 1], *ops[c]);
  for (std::size_t w = chain.size(); w < ops.size(); ++w)
    follow(*find({OpKind::B, ops[w]->stage}), *ops[w]);
  normalize(out);
  sort_ops(out);
  return out;
}
