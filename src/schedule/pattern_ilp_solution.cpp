// Reading a pattern out of a solution of PatternIlp, and writing a known pattern in as a MIP start.

#include "core/error.hpp"
#include "schedule/pattern_ilp.hpp"
#include "schedule/retime.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>

namespace madpipe::schedule {

using solver::LinearExpr;

PatternIlp::Decoded PatternIlp::decode(const std::vector<double>& values) const {
  if (static_cast<int>(values.size()) != model_.num_vars())
    throw Error(ErrorKind::Internal, "", "", "PatternIlp::decode: wrong number of values");
  auto value = [&](solver::Var v) { return values[static_cast<std::size_t>(v.index)]; };
  auto is_one = [&](const LinearExpr& e) { return e.evaluate(values) > 0.5; };

  Decoded out;
  out.stages = spec_.blocks;
  if (!spec_.fixed_allocation) {
    std::vector<int> gpu(n_, -1);
    int classes = 0;
    for (int b = 0; b < n_; ++b) {
      for (int a = 0; a < b && gpu[b] < 0; ++a)
        if (is_one(same_gpu(a, b))) gpu[b] = gpu[a];
      if (gpu[b] < 0) gpu[b] = classes++;
    }
    if (classes > platform_.gpus)
      throw Error(ErrorKind::Internal, "", "",
                  "PatternIlp::decode: more GPUs than the platform has");
    for (int b = 0; b < n_; ++b) out.stages[b].gpu = gpu[b];
  }
  for (int b = 0; b < n_; ++b) out.stages[b].id = b;

  // Absolute start of micro-batch 0 at every node: its start in the window plus the periods
  // accumulated along the chain.
  const double period = value(period_);
  std::vector<double> absolute(nodes_.size());
  std::vector<long long> periods(nodes_.size(), 0);
  auto shift_of = [&](const Edge& e) {
    return std::llround(value(e.v)) + std::llround(value(e.v2));
  };
  for (int x = 0; x < static_cast<int>(nodes_.size()); ++x) {
    if (x >= chain_nodes_) {  // a W node: after the B of its block
      const Edge& e = *weight_edges_[nodes_[x].block];
      periods[x] = periods[e.from] + shift_of(e);
    } else if (x > 0) {
      periods[x] = periods[x - 1] + shift_of(edges_[x - 1]);
    }
    absolute[x] = value(nodes_[x].start) + static_cast<double>(periods[x]) * period;
  }
  std::vector<Op> ops = micro_batch_chain(out.stages, platform_);
  for (const Op& w : weight_ops(out.stages)) ops.push_back(w);
  for (Op& op : ops) {
    int node = -1;
    switch (op.kind) {
      case OpKind::F:
        node = f_node_[op.stage];
        break;
      case OpKind::B:
        node = b_node_[op.stage];
        break;
      case OpKind::SendAct:
        node = act_node_[op.stage];
        break;
      case OpKind::SendGrad:
        node = grad_node_[op.stage];
        break;
      case OpKind::W:
        node = w_node_[op.stage];
        break;
    }
    if (node < 0)
      throw Error(ErrorKind::Internal, "", "", "PatternIlp::decode: an op without a node");
    op.start_ms = absolute[static_cast<std::size_t>(node)];
  }
  out.pattern = pattern_from_absolute_times(std::move(ops), period);
  // Solver tolerances leave times a hair off; retiming keeps the order and shifts and returns
  // exact times with the smallest period they allow. Where the solver's period is a hair below
  // what they allow, retiming starts from a slightly longer one.
  for (const double slack : {1.0, 1 + 1e-6}) {
    Pattern longer = out.pattern;
    longer.period_ms *= slack;
    if (auto exact = retime(longer, out.stages, platform_)) {
      out.pattern = *exact;
      break;
    }
  }
  // The period is the objective: the solver may leave a micro-batch waiting whole periods between
  // two of its ops, which costs memory and nothing else.
  out.pattern = with_earliest_shifts(out.pattern, out.stages, platform_);
  return out;
}

bool PatternIlp::set_start(const std::vector<Stage>& stages, const Pattern& pattern) {
  if (pattern.k != 1 || static_cast<int>(stages.size()) != n_ || !(pattern.period_ms > 0))
    return false;
  const double period = pattern.period_ms;
  if (period > spec_.period_upper_bound_ms * (1 + 1e-9)) return false;
  for (int b = 0; b < n_; ++b)
    if (spec_.fixed_allocation && stages[b].gpu != spec_.blocks[b].gpu) return false;

  std::map<std::pair<OpKind, int>, const Op*> op_of;
  for (const Op& op : pattern.ops) op_of[{op.kind, op.stage}] = &op;
  const auto f0 = op_of.find({OpKind::F, 0});
  if (f0 == op_of.end()) return false;
  const double origin = f0->second->start_ms - f0->second->shift * period;

  std::vector<double> values(static_cast<std::size_t>(model_.num_vars()), 0.0);
  auto set = [&](solver::Var v, double x) { values[static_cast<std::size_t>(v.index)] = x; };
  if (!spec_.fixed_allocation)
    for (int a = 0; a < n_; ++a)
      for (int b = a + 1; b < n_; ++b) set(same_[a][b], stages[a].gpu == stages[b].gpu ? 1 : 0);
  auto cut_at = [&](int boundary) { return stages[boundary].gpu != stages[boundary + 1].gpu; };

  // Start of each node in its window (end in (0, T]) and the period it falls in.
  const int m = static_cast<int>(nodes_.size());
  std::vector<double> start(m), length(m);
  std::vector<long long> period_of(m);
  double previous_end = 0;
  for (int x = 0; x < m; ++x) {
    const Node& node = nodes_[x];
    const bool transfer = is_transfer(node.kind);
    double absolute = 0;
    length[x] = 0;
    const auto it = op_of.find({node.kind, node.block});
    if (it != op_of.end()) {
      absolute = it->second->start_ms - it->second->shift * period - origin;
      length[x] = it->second->duration_ms;
    } else if (transfer && !cut_at(node.block)) {
      absolute = previous_end;  // a transfer that does not happen: zero length, right after x - 1
    } else {
      return false;
    }
    const double end = absolute + length[x];
    double in_window = end - period * std::floor(end / period);
    if (in_window <= 1e-9 * period) in_window += period;
    start[x] = x == f_node_[0] ? 0.0 : in_window - length[x];
    period_of[x] = std::llround((absolute - start[x]) / period);
    set(node.start, start[x]);
    previous_end = end;
  }
  // Each dependency takes the smallest shift it allows (at most 2 with every op ending in
  // [0, T]): the same ops at the same times, with fewer micro-batches in flight when the given
  // pattern waited longer than it had to.
  const double eps = 1e-9 * period;
  auto set_edge = [&](const Edge& e) {
    const int x = e.from, y = e.to;
    long long shift = 0;
    while (shift <= 2 && start[y] + shift * period < start[x] + length[x] - eps) ++shift;
    if (shift > 2 || shift > period_of[y] - period_of[x]) return false;
    set(e.v, shift >= 1 ? 1 : 0);
    set(e.v2, shift >= 2 ? 1 : 0);
    return true;
  };
  for (const Edge& e : edges_)
    if (!set_edge(e)) return false;
  for (const std::optional<Edge>& e : weight_edges_)
    if (e && !set_edge(*e)) return false;
  for (int i = 0; i < m; ++i)
    for (int j = i + 1; j < m; ++j)
      if (order_[i][j]) set(*order_[i][j], start[i] + length[i] <= start[j] + eps ? 1 : 0);
  if (!spec_.fixed_allocation) {
    const int boundaries = n_ - 1;
    for (int j = 0; j < boundaries; ++j)
      for (int k = j + 1; k < boundaries; ++k) {
        const bool shared = cut_at(j) && cut_at(k) &&
                            std::minmax(stages[j].gpu, stages[j + 1].gpu) ==
                                std::minmax(stages[k].gpu, stages[k + 1].gpu);
        set(*link_same_[j][k], shared ? 1 : 0);
      }
    // Orders of ops on different resources are 0 (o <= share).
    for (int i = 0; i < m; ++i)
      for (int j = i + 1; j < m; ++j) {
        if (!order_[i][j]) continue;
        const Node &a = nodes_[i], &b = nodes_[j];
        const bool shared = !is_transfer(a.kind)
                                ? stages[a.block].gpu == stages[b.block].gpu
                                : cut_at(a.block) && cut_at(b.block) &&
                                      std::minmax(stages[a.block].gpu, stages[a.block + 1].gpu) ==
                                          std::minmax(stages[b.block].gpu, stages[b.block + 1].gpu);
        if (!shared) set(*order_[i][j], 0);
      }
  }
  set(period_, period);
  // Continuous helpers (first, sigma, buffers, workspaces) take their smallest feasible values:
  // the largest requirement over the rows that bound them.
  for (const auto& [helper, row] : helper_rows_) {
    double rest = 0;
    for (const solver::Term& t : model_.row_terms(row.index))
      if (t.var != helper.index) rest += t.coeff * values[static_cast<std::size_t>(t.var)];
    double& slot = values[static_cast<std::size_t>(helper.index)];
    const double needed = model_.row_lb(row.index) - rest;  // the helper's coefficient is 1
    slot = std::min(model_.var_ub(helper.index),
                    std::max({slot, needed, model_.var_lb(helper.index)}));
  }
  for (int v = 0; v < model_.num_vars(); ++v)
    model_.set_hint(solver::Var{v}, values[static_cast<std::size_t>(v)]);
  return true;
}

}  // namespace madpipe::schedule
