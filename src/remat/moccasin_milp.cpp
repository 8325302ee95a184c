#include "remat/moccasin_milp.hpp"

#include <algorithm>
#include <optional>
#include <string>

madpipe::remat::RematMilp::~RematMilp() = default;

namespace {
using madpipe::remat::GraphSequence;
using madpipe::remat::RematGraph;
using madpipe::remat::RematMilp;
using madpipe::remat::RematNode;
namespace solver = madpipe::solver;
}  // namespace

static constexpr solver::Var kNone{};  // a variable fixed to 0 and left out of the model

static std::string tag(int a, int b) { return std::to_string(a) + "_" + std::to_string(b); }

// Bytes per model unit: the largest output becomes about 1024 units.
static double size_unit(const RematGraph& graph) {
  std::int64_t largest = 0;
  for (const RematNode& node : graph.nodes) largest = std::max(largest, node.size_bytes);
  return std::max(1.0, static_cast<double>(largest) / 1024.0);
}

static int cap_of(const RematNode& node, int max_computations) {
  return node.recomputable ? max_computations : 1;
}

// One row lb <= Σ coeff·var <= ub over the variables that exist.
static void add_row(solver::Model& model, double lb, double ub, const std::string& name,
                    const std::vector<std::pair<solver::Var, double>>& terms) {
  const solver::Row row = model.add_row(lb, ub, name);
  for (const auto& [var, coeff] : terms)
    if (var.index >= 0) model.add_term(row, var, coeff);
}

// Stage k's computations (increasing ranks ending with k) when `nodes` is staged.
static std::optional<std::vector<std::vector<int>>> split_into_stages(const std::vector<int>& nodes,
                                                                      int n) {
  std::vector<std::vector<int>> stages(static_cast<std::size_t>(n));
  int stage = 0;
  for (int v : nodes) {
    if (stage >= n || v < 0 || v > stage) return std::nullopt;
    std::vector<int>& current = stages[static_cast<std::size_t>(stage)];
    if (!current.empty() && current.back() >= v) return std::nullopt;
    current.push_back(v);
    if (v == stage) ++stage;
  }
  if (stage != n) return std::nullopt;
  return stages;
}

namespace {
class StagedMilp : public RematMilp {
 public:
  StagedMilp(const RematGraph& graph, std::int64_t budget_bytes, int max_computations)
      : graph_(graph),
        n_(graph.size()),
        unit_(size_unit(graph)),
        consumers_(madpipe::remat::consumers_of(graph)) {
    const double budget = static_cast<double>(budget_bytes) / unit_;
    const std::size_t n = static_cast<std::size_t>(n_);
    r_.assign(n, {});
    s_.assign(n, {});
    u_.assign(n, {});
    f_.assign(n, {});
    for (int k = 0; k < n_; ++k) {
      for (int j = 0; j <= k; ++j) {
        const bool first = j == k;
        const bool useful = node(j).recomputable && !consumers(j).empty();
        r_[idx(k)].push_back(
            first || useful ? model_.add_var(first ? 1 : 0, 1, true, "R_" + tag(k, j)) : kNone);
        if (!first && !consumers(j).empty()) {
          s_[idx(k)].push_back(model_.add_var(0, 1, true, "S_" + tag(k, j)));
        } else {
          s_[idx(k)].push_back(kNone);
        }
        u_[idx(k)].push_back(model_.add_var(0, budget, false, "U_" + tag(k, j)));
        f_[idx(k)].emplace_back();
        if (r(k, j).index < 0) continue;
        model_.set_objective(r(k, j), node(j).duration_ms);
        for (int i : freeable(j))
          f_[idx(k)][idx(j)].push_back(
              model_.add_var(0, 1, true, "F_" + tag(k, j) + "_" + std::to_string(i)));
      }
    }
    for (int j = 0; j < n_; ++j) add_node_rows(j, max_computations);
    for (int k = 0; k < n_; ++k) add_stage_rows(k);
  }

  bool set_start(const std::vector<int>& nodes) override {
    const auto stages = split_into_stages(nodes, n_);
    if (!stages) return false;
    const GraphSequence sequence = madpipe::remat::with_earliest_frees(graph_, nodes);
    std::vector<std::pair<solver::Var, double>> values;
    for (int v = 0; v < model_.num_vars(); ++v) values.emplace_back(solver::Var{v}, 0.0);
    auto set = [&](solver::Var var, double value) {
      if (var.index < 0) return value == 0;
      values[static_cast<std::size_t>(var.index)].second = value;
      return true;
    };
    std::vector<bool> resident(static_cast<std::size_t>(n_), false);
    std::int64_t memory = 0;
    std::size_t step = 0;
    for (int k = 0; k < n_; ++k) {
      for (int i = 0; i < k; ++i)
        if (!set(s(k, i), resident[idx(i)] ? 1 : 0)) return false;
      const std::vector<int>& computed = (*stages)[idx(k)];
      for (int j = 0; j <= k; ++j) {
        const bool runs = std::find(computed.begin(), computed.end(), j) != computed.end();
        if (runs) {
          if (!set(r(k, j), 1)) return false;
          memory += node(j).size_bytes;
        }
        if (!set(u(k, j), static_cast<double>(memory) / unit_)) return false;
        if (!runs) continue;
        resident[idx(j)] = true;
        const std::vector<int> may_free = freeable(j);
        for (int f : sequence[step].freed) {
          const auto at = std::find(may_free.begin(), may_free.end(), f);
          if (at == may_free.end()) return false;
          set(f_[idx(k)][idx(j)][static_cast<std::size_t>(at - may_free.begin())], 1);
          resident[idx(f)] = false;
          memory -= node(f).size_bytes;
        }
        ++step;
      }
    }
    for (const auto& [var, value] : values) model_.set_hint(var, value);
    return true;
  }

  std::vector<int> decode(const std::vector<double>& values) const override {
    std::vector<int> nodes;
    for (int k = 0; k < n_; ++k)
      for (int j = 0; j <= k; ++j)
        if (r(k, j).index >= 0 && values[static_cast<std::size_t>(r(k, j).index)] > 0.5)
          nodes.push_back(j);
    return nodes;
  }

 private:
  static std::size_t idx(int i) { return static_cast<std::size_t>(i); }
  const RematNode& node(int v) const { return graph_.nodes[idx(v)]; }
  const std::vector<int>& consumers(int v) const { return consumers_[idx(v)]; }
  solver::Var r(int k, int j) const { return r_[idx(k)][idx(j)]; }
  solver::Var s(int k, int j) const { return k < n_ && j < k ? s_[idx(k)][idx(j)] : kNone; }
  solver::Var u(int k, int j) const { return u_[idx(k)][idx(j)]; }
  double size(int v) const { return static_cast<double>(node(v).size_bytes) / unit_; }
  // What may be freed right after j runs: its inputs and its own output.
  std::vector<int> freeable(int j) const {
    std::vector<int> out = node(j).inputs;
    out.push_back(j);
    return out;
  }

  void add_node_rows(int j, int max_computations) {
    std::vector<std::pair<solver::Var, double>> all;
    for (int k = j; k < n_; ++k) all.emplace_back(r(k, j), 1.0);
    add_row(model_, 1, cap_of(node(j), max_computations), "cap_" + std::to_string(j), all);
    for (int k = j; k + 1 < n_; ++k)
      if (s(k + 1, j).index >= 0)
        add_row(model_, -solver::kInf, 0, "keep_" + tag(k, j),
                {{s(k + 1, j), 1.0}, {s(k, j), -1.0}, {r(k, j), -1.0}});
    for (int k = j + 1; k < n_; ++k)
      if (s(k, j).index >= 0 && r(k, j).index >= 0)
        add_row(model_, -solver::kInf, 1, "overlap_" + tag(k, j), {{r(k, j), 1.0}, {s(k, j), 1.0}});
  }

  void add_stage_rows(int k) {
    for (int j = 0; j <= k; ++j) {
      if (r(k, j).index < 0) continue;
      for (int i : node(j).inputs)
        add_row(model_, -solver::kInf, 0, "needs_" + tag(k, j) + "_" + std::to_string(i),
                {{r(k, j), 1.0}, {r(k, i), -1.0}, {s(k, i), -1.0}});
      const std::vector<int> may_free = freeable(j);
      for (std::size_t p = 0; p < may_free.size(); ++p) {
        const int i = may_free[p];
        const solver::Var f = f_[idx(k)][idx(j)][p];
        const std::string name = tag(k, j) + "_" + std::to_string(i);
        add_row(model_, -solver::kInf, 0, "free_runs_" + name, {{f, 1.0}, {r(k, j), -1.0}});
        if (s(k + 1, i).index >= 0)
          add_row(model_, -solver::kInf, 1, "free_kept_" + name, {{f, 1.0}, {s(k + 1, i), 1.0}});
        for (int w : consumers(i))
          if (w > j && w <= k && r(k, w).index >= 0)
            add_row(model_, -solver::kInf, 1, "free_used_" + name + "_" + std::to_string(w),
                    {{f, 1.0}, {r(k, w), 1.0}});
      }
    }
    std::vector<std::pair<solver::Var, double>> start = {{u(k, 0), 1.0}, {r(k, 0), -size(0)}};
    for (int i = 0; i < k; ++i) start.emplace_back(s(k, i), -size(i));
    add_row(model_, 0, 0, "mem_" + tag(k, 0), start);
    for (int j = 1; j <= k; ++j) {
      std::vector<std::pair<solver::Var, double>> terms = {
          {u(k, j), 1.0}, {u(k, j - 1), -1.0}, {r(k, j), -size(j)}};
      if (r(k, j - 1).index >= 0) {
        const std::vector<int> may_free = freeable(j - 1);
        for (std::size_t p = 0; p < may_free.size(); ++p)
          terms.emplace_back(f_[idx(k)][idx(j - 1)][p], size(may_free[p]));
      }
      add_row(model_, 0, 0, "mem_" + tag(k, j), terms);
    }
  }

  const RematGraph& graph_;
  int n_;
  double unit_;
  std::vector<std::vector<int>> consumers_;
  std::vector<std::vector<solver::Var>> r_, s_, u_;
  std::vector<std::vector<std::vector<solver::Var>>> f_;
};

class OrderFreeMilp : public RematMilp {
 public:
  OrderFreeMilp(const RematGraph& graph, std::int64_t budget_bytes, int max_computations,
                int max_events)
      : graph_(graph), n_(graph.size()), max_computations_(max_computations) {
    const double unit = size_unit(graph);
    for (const RematNode& v : graph.nodes) events_ += cap_of(v, max_computations);
    if (max_events > 0) events_ = std::min(events_, std::max(max_events, n_));
    earliest_ = ancestor_counts();
    z_.resize(static_cast<std::size_t>(n_));
    h_.resize(static_cast<std::size_t>(n_));
    for (int v = 0; v < n_; ++v)
      for (int t = earliest(v); t < events_; ++t) {
        z_[idx(v)].push_back(model_.add_var(0, 1, true, "z_" + tag(v, t)));
        h_[idx(v)].push_back(model_.add_var(0, 1, true, "h_" + tag(v, t)));
        model_.set_objective(z(v, t), node(v).duration_ms);
      }
    for (int v = 0; v < n_; ++v) {
      std::vector<std::pair<solver::Var, double>> count;
      for (int t = earliest(v); t < events_; ++t) {
        count.emplace_back(z(v, t), 1.0);
        add_row(model_, -solver::kInf, 0, "open_" + tag(v, t),
                {{h(v, t), 1.0}, {h(v, t - 1), -1.0}, {z(v, t), -1.0}});
        add_row(model_, -solver::kInf, 0, "holds_" + tag(v, t), {{z(v, t), 1.0}, {h(v, t), -1.0}});
        if (t > earliest(v))
          add_row(model_, -solver::kInf, 1, "overlap_" + tag(v, t),
                  {{z(v, t), 1.0}, {h(v, t - 1), 1.0}});
        for (int u : node(v).inputs)
          add_row(model_, -solver::kInf, 0, "needs_" + tag(v, t) + "_" + std::to_string(u),
                  {{z(v, t), 1.0}, {h(u, t), -1.0}});
      }
      add_row(model_, 1, cap_of(node(v), max_computations), "count_" + std::to_string(v), count);
    }
    for (int t = 0; t < events_; ++t) {
      std::vector<std::pair<solver::Var, double>> one, memory, no_idle;
      for (int v = 0; v < n_; ++v) {
        one.emplace_back(z(v, t), 1.0);
        memory.emplace_back(h(v, t), static_cast<double>(node(v).size_bytes) / unit);
        if (t + 1 < events_) {
          no_idle.emplace_back(z(v, t + 1), 1.0);
          no_idle.emplace_back(z(v, t), -1.0);
        }
      }
      add_row(model_, -solver::kInf, 1, "event_" + std::to_string(t), one);
      add_row(model_, -solver::kInf, static_cast<double>(budget_bytes) / unit,
              "memory_" + std::to_string(t), memory);
      if (t + 1 < events_)
        add_row(model_, -solver::kInf, 0, "no_idle_" + std::to_string(t), no_idle);
    }
  }

  bool set_start(const std::vector<int>& nodes) override {
    if (static_cast<int>(nodes.size()) > events_) return false;
    const GraphSequence sequence = madpipe::remat::with_earliest_frees(graph_, nodes);
    std::vector<double> values(static_cast<std::size_t>(model_.num_vars()), 0.0);
    std::vector<int> opened(static_cast<std::size_t>(n_), -1);  // event of each live copy
    std::vector<int> count(static_cast<std::size_t>(n_), 0);
    for (int t = 0; t < static_cast<int>(sequence.size()); ++t) {
      const int v = sequence[idx(t)].node;
      if (v < 0 || v >= n_ || t < earliest(v) ||
          ++count[idx(v)] > cap_of(node(v), max_computations_))
        return false;
      values[idx(z(v, t).index)] = 1;
      opened[idx(v)] = t;
      for (int f : sequence[idx(t)].freed) {
        for (int e = opened[idx(f)]; e <= t; ++e) values[idx(h(f, e).index)] = 1;
        opened[idx(f)] = -1;
      }
    }
    for (int v = 0; v < model_.num_vars(); ++v) model_.set_hint(solver::Var{v}, values[idx(v)]);
    return true;
  }

  std::vector<int> decode(const std::vector<double>& values) const override {
    std::vector<int> nodes;
    for (int t = 0; t < events_; ++t)
      for (int v = 0; v < n_; ++v)
        if (z(v, t).index >= 0 && values[idx(z(v, t).index)] > 0.5) nodes.push_back(v);
    return nodes;
  }

 private:
  static std::size_t idx(int i) { return static_cast<std::size_t>(i); }
  const RematNode& node(int v) const { return graph_.nodes[idx(v)]; }
  int earliest(int v) const { return earliest_[idx(v)]; }
  solver::Var z(int v, int t) const {
    return t >= earliest(v) && t < events_ ? z_[idx(v)][idx(t - earliest(v))] : kNone;
  }
  solver::Var h(int v, int t) const {
    return t >= earliest(v) && t < events_ ? h_[idx(v)][idx(t - earliest(v))] : kNone;
  }

  // |ancestors(v)|: the computations that must come before v's first one.
  std::vector<int> ancestor_counts() const {
    std::vector<std::vector<bool>> ancestors(idx(n_), std::vector<bool>(idx(n_), false));
    std::vector<int> counts(idx(n_), 0);
    for (int v = 0; v < n_; ++v) {
      for (int u : node(v).inputs) {
        ancestors[idx(v)][idx(u)] = true;
        for (int a = 0; a < u; ++a)
          if (ancestors[idx(u)][idx(a)]) ancestors[idx(v)][idx(a)] = true;
      }
      counts[idx(v)] =
          static_cast<int>(std::count(ancestors[idx(v)].begin(), ancestors[idx(v)].end(), true));
    }
    return counts;
  }

  const RematGraph& graph_;
  int n_;
  int max_computations_;
  int events_ = 0;
  std::vector<int> earliest_;
  std::vector<std::vector<solver::Var>> z_, h_;
};
}  // namespace

std::unique_ptr<madpipe::remat::RematMilp> madpipe::remat::make_staged_milp(
    const RematGraph& graph, std::int64_t budget_bytes, int max_computations) {
  return std::make_unique<StagedMilp>(graph, budget_bytes, max_computations);
}

std::unique_ptr<madpipe::remat::RematMilp> madpipe::remat::make_order_free_milp(
    const RematGraph& graph, std::int64_t budget_bytes, int max_computations, int max_events) {
  return std::make_unique<OrderFreeMilp>(graph, budget_bytes, max_computations, max_events);
}
