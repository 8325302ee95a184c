#include "remat/remat_heuristic.hpp"

#include "core/error.hpp"
#include "remat/rotor.hpp"

#include <algorithm>
#include <random>
#include <tuple>

using madpipe::remat::RematGraph;

static const std::vector<int>& inputs_of(const RematGraph& graph, int v) {
  return graph.nodes[static_cast<std::size_t>(v)].inputs;
}

static bool only_reads(const std::vector<int>& inputs, const std::vector<int>& allowed) {
  for (int u : inputs)
    if (std::find(allowed.begin(), allowed.end(), u) == allowed.end()) return false;
  return true;
}

// The forward path from `source`: each next node is the only consumer reading nothing else.
static std::vector<int> forward_path(const RematGraph& graph,
                                     const std::vector<std::vector<int>>& consumers, int source) {
  std::vector<int> path = {source};
  for (;;) {
    int next = -1;
    for (int w : consumers[static_cast<std::size_t>(path.back())]) {
      if (inputs_of(graph, w).size() != 1) continue;
      if (next >= 0) return {};  // a fork: not a chain
      next = w;
    }
    if (next < 0) return path;
    path.push_back(next);
  }
}

static std::optional<madpipe::remat::TrainingChain> chain_from(
    const RematGraph& graph, const std::vector<std::vector<int>>& consumers, int source,
    int gradient) {
  madpipe::remat::TrainingChain chain;
  chain.forward = forward_path(graph, consumers, source);
  chain.gradient = gradient;
  const int length = static_cast<int>(chain.forward.size()) - 1;
  if (length < 1) return std::nullopt;
  std::vector<bool> used(graph.nodes.size(), false);
  for (int f : chain.forward) used[static_cast<std::size_t>(f)] = true;
  if (gradient >= 0) used[static_cast<std::size_t>(gradient)] = true;
  const int backward_count = graph.size() - length - 1 - (gradient >= 0 ? 1 : 0);
  if (backward_count != length) return std::nullopt;
  chain.backward.assign(static_cast<std::size_t>(length), -1);
  int above = gradient;  // b_{k+1}, or g for k = L
  for (int k = length; k >= 1; --k) {
    int found = -1;
    for (int v = 0; v < graph.size(); ++v) {
      if (used[static_cast<std::size_t>(v)]) continue;
      const std::vector<int>& in = inputs_of(graph, v);
      const bool reads_above = above >= 0 && std::find(in.begin(), in.end(), above) != in.end();
      const bool reads_no_backward = std::all_of(in.begin(), in.end(), [&](int u) {
        return used[static_cast<std::size_t>(u)] && u != gradient;
      });
      if (above >= 0 ? !reads_above : !reads_no_backward) continue;
      if (found >= 0) return std::nullopt;
      found = v;
    }
    if (found < 0) return std::nullopt;
    std::vector<int> allowed = {chain.forward[static_cast<std::size_t>(k - 1)],
                                chain.forward[static_cast<std::size_t>(k)]};
    if (above >= 0) allowed.push_back(above);
    if (!only_reads(inputs_of(graph, found), allowed)) return std::nullopt;
    chain.backward[static_cast<std::size_t>(k - 1)] = found;
    used[static_cast<std::size_t>(found)] = true;
    above = found;
  }
  if (gradient >= 0 &&
      consumers[static_cast<std::size_t>(gradient)] != std::vector<int>{chain.backward.back()})
    return std::nullopt;
  return chain;
}

std::optional<madpipe::remat::TrainingChain> madpipe::remat::as_training_chain(
    const RematGraph& graph) {
  std::vector<int> sources;
  for (int v = 0; v < graph.size(); ++v)
    if (inputs_of(graph, v).empty()) sources.push_back(v);
  if (sources.empty() || sources.size() > 2) return std::nullopt;
  const std::vector<std::vector<int>> consumers = consumers_of(graph);
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const int gradient = sources.size() == 2 ? sources[1 - i] : -1;
    if (auto chain = chain_from(graph, consumers, sources[i], gradient)) return chain;
  }
  return std::nullopt;
}

madpipe::remat::RematChain madpipe::remat::rotor_chain_of(const RematGraph& graph,
                                                          const TrainingChain& chain) {
  const int length = static_cast<int>(chain.backward.size());
  RematChain rotor = make_remat_chain(length - 1);
  auto node = [&](int v) -> const RematNode& { return graph.nodes[static_cast<std::size_t>(v)]; };
  rotor.a[0] = rotor.abar[0] = node(chain.forward[0]).size_bytes;
  for (int k = 1; k <= length; ++k) {
    const RematNode& f = node(chain.forward[static_cast<std::size_t>(k)]);
    const RematNode& b = node(chain.backward[static_cast<std::size_t>(k - 1)]);
    rotor.forward_ms[static_cast<std::size_t>(k)] = f.duration_ms;
    rotor.backward_ms[static_cast<std::size_t>(k)] = b.duration_ms;
    rotor.a[static_cast<std::size_t>(k)] = rotor.abar[static_cast<std::size_t>(k)] = f.size_bytes;
    rotor.delta[static_cast<std::size_t>(k - 1)] = b.size_bytes;
  }
  rotor.delta[static_cast<std::size_t>(length)] =
      chain.gradient >= 0 ? node(chain.gradient).size_bytes : 0;
  return rotor;
}

std::vector<int> madpipe::remat::rotor_remat_nodes(const RematGraph& graph,
                                                   const TrainingChain& chain,
                                                   std::int64_t budget_bytes) {
  const RematResult result = optimal_remat(rotor_chain_of(graph, chain), budget_bytes);
  if (!result.feasible) return {};
  std::vector<int> nodes = {chain.forward[0]};
  for (const RematOp& op : result.sequence) {
    const std::size_t k = static_cast<std::size_t>(op.stage);
    if (op.kind == RematOpKind::Backward) {
      if (k == chain.backward.size() && chain.gradient >= 0) nodes.push_back(chain.gradient);
      nodes.push_back(chain.backward[k - 1]);
    } else {
      nodes.push_back(chain.forward[k]);
    }
  }
  return nodes;
}

namespace {
using madpipe::remat::EvictionRule;

// The greedy's state between stages; stage k computes node k for the first time.
class Greedy {
 public:
  Greedy(const RematGraph& graph, std::int64_t budget_bytes, int max_computations,
         EvictionRule rule, unsigned seed)
      : graph_(graph),
        budget_(budget_bytes),
        max_computations_(max_computations),
        rule_(rule),
        n_(graph.size()),
        resident_(static_cast<std::size_t>(n_), false),
        count_(static_cast<std::size_t>(n_), 0),
        consumers_(madpipe::remat::consumers_of(graph)),
        noise_(static_cast<std::size_t>(n_), 1.0) {
    if (seed == 0) return;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> factor(0.7, 1.3);
    for (double& f : noise_) f = factor(rng);
  }

  std::vector<int> run() {
    for (int k = 0; k < n_; ++k)
      if (!run_stage(k)) return {};
    return sequence_;
  }

 private:
  int cap(int v) const { return node(v).recomputable ? max_computations_ : 1; }
  const madpipe::remat::RematNode& node(int v) const {
    return graph_.nodes[static_cast<std::size_t>(v)];
  }
  // Still read by a node computed for the first time after stage k.
  bool live_after(int u, int k) const {
    const std::vector<int>& c = consumers_[static_cast<std::size_t>(u)];
    return !c.empty() && c.back() > k;
  }
  int next_first_use(int u, int k) const {
    for (int w : consumers_[static_cast<std::size_t>(u)])
      if (w > k) return w;
    return n_;
  }

  // Memory of stage k's steps with `evicted` freed at their last use in the stage; the step of
  // the peak in *peak_step.
  std::int64_t stage_peak(int k, const std::vector<int>& steps, const std::vector<int>& last_reader,
                          const std::vector<bool>& evicted, int* peak_step) const {
    auto dropped = [&](int u) { return evicted[static_cast<std::size_t>(u)] || !live_after(u, k); };
    std::int64_t memory = 0;
    for (int u = 0; u < n_; ++u)
      if (resident_[static_cast<std::size_t>(u)] &&
          !(dropped(u) && last_reader[static_cast<std::size_t>(u)] < 0))
        memory += node(u).size_bytes;
    std::int64_t peak = -1;
    for (int i = 0; i < static_cast<int>(steps.size()); ++i) {
      const int r = steps[static_cast<std::size_t>(i)];
      memory += node(r).size_bytes;
      if (memory > peak) {
        peak = memory;
        *peak_step = i;
      }
      for (int u : node(r).inputs)
        if (last_reader[static_cast<std::size_t>(u)] == i && dropped(u))
          memory -= node(u).size_bytes;
      if (last_reader[static_cast<std::size_t>(r)] <= i && dropped(r)) memory -= node(r).size_bytes;
    }
    return peak;
  }

  // Smaller is dropped first.
  std::tuple<double, std::int64_t, int> eviction_key(int u, int k) const {
    const double size = static_cast<double>(node(u).size_bytes);
    const double noise = noise_[static_cast<std::size_t>(u)];
    switch (rule_) {
      case EvictionRule::CheapestPerByte:
        return {noise * node(u).duration_ms / size, -node(u).size_bytes, u};
      case EvictionRule::FarthestNextUse:
        return {-noise * static_cast<double>(next_first_use(u, k)), -node(u).size_bytes, u};
      case EvictionRule::LargestFirst:
        return {-noise * size, 0, u};
    }
    MADPIPE_UNREACHABLE("eviction rule");
  }

  bool run_stage(int k) {
    std::vector<bool> needed(static_cast<std::size_t>(n_), false);
    needed[static_cast<std::size_t>(k)] = true;
    for (int r = k; r >= 0; --r) {
      if (!needed[static_cast<std::size_t>(r)]) continue;
      if (count_[static_cast<std::size_t>(r)] >= cap(r)) return false;
      for (int u : node(r).inputs)
        if (!resident_[static_cast<std::size_t>(u)]) needed[static_cast<std::size_t>(u)] = true;
    }
    std::vector<int> steps;
    for (int r = 0; r <= k; ++r)
      if (needed[static_cast<std::size_t>(r)]) steps.push_back(r);
    std::vector<int> last_reader(static_cast<std::size_t>(n_), -1);  // step index in the stage
    std::vector<int> computed_at(static_cast<std::size_t>(n_), -1);
    for (int i = 0; i < static_cast<int>(steps.size()); ++i) {
      const int r = steps[static_cast<std::size_t>(i)];
      computed_at[static_cast<std::size_t>(r)] = i;
      for (int u : node(r).inputs) last_reader[static_cast<std::size_t>(u)] = i;
    }
    std::vector<bool> evicted(static_cast<std::size_t>(n_), false);
    for (;;) {
      int peak_step = -1;
      if (stage_peak(k, steps, last_reader, evicted, &peak_step) <= budget_) break;
      int victim = -1;
      for (int u = 0; u < n_; ++u) {
        const std::size_t i = static_cast<std::size_t>(u);
        const bool present_before =
            resident_[i] || (computed_at[i] >= 0 && computed_at[i] < peak_step);
        // Dropping u helps only if it is gone at the peak step and must otherwise stay there.
        if (u == k || evicted[i] || !present_before || !live_after(u, k) ||
            last_reader[i] >= peak_step || node(u).size_bytes == 0)
          continue;
        if (count_[i] + (needed[i] ? 1 : 0) >= cap(u)) continue;  // could not come back
        if (victim < 0 || eviction_key(u, k) < eviction_key(victim, k)) victim = u;
      }
      if (victim < 0) return false;
      evicted[static_cast<std::size_t>(victim)] = true;
    }
    for (int r : steps) {
      sequence_.push_back(r);
      ++count_[static_cast<std::size_t>(r)];
    }
    for (int u = 0; u < n_; ++u) {
      const std::size_t i = static_cast<std::size_t>(u);
      resident_[i] = (resident_[i] || needed[i]) && live_after(u, k) && !evicted[i];
    }
    return true;
  }

  const RematGraph& graph_;
  std::int64_t budget_;
  int max_computations_;
  EvictionRule rule_;
  int n_;
  std::vector<bool> resident_;
  std::vector<int> count_;
  std::vector<std::vector<int>> consumers_;
  std::vector<double> noise_;  // per node, multiplies the eviction key (1 without a seed)
  std::vector<int> sequence_;
};
}  // namespace

std::vector<int> madpipe::remat::greedy_remat_nodes(const RematGraph& graph,
                                                    std::int64_t budget_bytes, int max_computations,
                                                    EvictionRule rule, unsigned seed) {
  return Greedy(graph, budget_bytes, max_computations, rule, seed).run();
}

// Greedy runs per rule with perturbed keys, besides the plain one: each takes O(n^2) at most.
static constexpr unsigned kPerturbedRuns = 15;

static bool within_caps(const madpipe::remat::RematGraph& graph,
                        const std::vector<int>& computations, int max_computations) {
  for (std::size_t v = 0; v < computations.size(); ++v)
    if (computations[v] > (graph.nodes[v].recomputable ? max_computations : 1)) return false;
  return true;
}

// Drops recomputations while the sequence stays valid within the budget, most expensive first:
// the greedy recomputes what a later eviction made unnecessary.
static std::vector<int> without_needless_recomputations(const madpipe::remat::RematGraph& graph,
                                                        std::vector<int> nodes,
                                                        std::int64_t budget_bytes) {
  using namespace madpipe::remat;
  for (bool dropped = true; dropped;) {
    dropped = false;
    std::vector<std::size_t> repeats;
    std::vector<bool> seen(graph.nodes.size(), false);
    for (std::size_t p = 0; p < nodes.size(); ++p) {
      if (seen[static_cast<std::size_t>(nodes[p])]) repeats.push_back(p);
      seen[static_cast<std::size_t>(nodes[p])] = true;
    }
    auto duration = [&](std::size_t p) {
      return graph.nodes[static_cast<std::size_t>(nodes[p])].duration_ms;
    };
    std::stable_sort(repeats.begin(), repeats.end(),
                     [&](std::size_t a, std::size_t b) { return duration(a) > duration(b); });
    for (std::size_t p : repeats) {
      std::vector<int> shorter = nodes;
      shorter.erase(shorter.begin() + static_cast<std::ptrdiff_t>(p));
      const GraphReplay replay = simulate_remat(graph, with_earliest_frees(graph, shorter));
      if (!replay.valid || replay.peak_bytes > budget_bytes) continue;
      nodes = std::move(shorter);
      dropped = true;
      break;
    }
  }
  return nodes;
}

madpipe::remat::RematHint madpipe::remat::best_remat_hint(const RematGraph& graph,
                                                          std::int64_t budget_bytes,
                                                          int max_computations) {
  RematHint best;
  auto consider = [&](const std::vector<int>& found, const std::string& method) {
    if (found.empty()) return;
    const std::vector<int> nodes = without_needless_recomputations(graph, found, budget_bytes);
    GraphSequence sequence = with_earliest_frees(graph, nodes);
    const GraphReplay replay = simulate_remat(graph, sequence);
    if (!replay.valid || replay.peak_bytes > budget_bytes ||
        !within_caps(graph, replay.computations, max_computations))
      return;
    if (!best.sequence.empty() && replay.total_ms >= best.total_ms) return;
    best = {std::move(sequence), replay.total_ms, replay.peak_bytes, method};
  };
  if (const std::optional<TrainingChain> chain = as_training_chain(graph))
    consider(rotor_remat_nodes(graph, *chain, budget_bytes), "rotor");
  const std::pair<EvictionRule, const char*> rules[] = {
      {EvictionRule::CheapestPerByte, "greedy (cheapest per byte)"},
      {EvictionRule::FarthestNextUse, "greedy (farthest next use)"},
      {EvictionRule::LargestFirst, "greedy (largest first)"},
  };
  for (const auto& [rule, name] : rules)
    for (unsigned seed = 0; seed <= kPerturbedRuns; ++seed)
      consider(greedy_remat_nodes(graph, budget_bytes, max_computations, rule, seed), name);
  return best;
}
