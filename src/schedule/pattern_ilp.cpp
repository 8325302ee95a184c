#include "schedule/pattern_ilp.hpp"

#include "core/error.hpp"
#include "schedule/memory.hpp"
#include "schedule/retime.hpp"
#include "schedule/search.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

namespace madpipe::schedule {

using solver::kInf;
using solver::LinearExpr;
using solver::Var;

static std::string idx(int a) { return std::to_string(a); }
static std::string idx(int a, int b) { return std::to_string(a) + "_" + std::to_string(b); }

PatternIlp::PatternIlp(Spec spec, const Platform& platform)
    : spec_(std::move(spec)), platform_(platform), n_(static_cast<int>(spec_.blocks.size())) {
  if (n_ == 0) throw Error(ErrorKind::Internal, "", "", "PatternIlp: no blocks");
  if (!(spec_.period_upper_bound_ms > 0) || !std::isfinite(spec_.period_upper_bound_ms))
    throw Error(ErrorKind::Internal, "", "",
                "PatternIlp: period upper bound must be finite and > 0");
  big_ = 2 * spec_.period_upper_bound_ms;
  add_variables();
  add_allocation_rules();
  add_dependencies();
  add_compute_exclusivity();
  add_link_exclusivity();
  add_memory();
  model_.set_objective(period_, 1.0);
}

LinearExpr PatternIlp::same_gpu(int a, int b) const {
  if (a == b) return 1.0;
  if (spec_.fixed_allocation) return spec_.blocks[a].gpu == spec_.blocks[b].gpu ? 1.0 : 0.0;
  return same_[std::min(a, b)][std::max(a, b)];
}

LinearExpr PatternIlp::duration(int node) const {
  const Node& x = nodes_[node];
  if (!is_transfer(x.kind)) return compute_op_ms(spec_.blocks[x.block], x.kind);
  const double ms = transfer_time(x.block);
  return spec_.fixed_allocation ? LinearExpr(ms) : ms * cut(x.block);
}

// A fixed allocation knows the link of every cut boundary; a free one does not, and times every
// transfer over the slowest link (the decoded pattern is retimed with the real links).
double PatternIlp::transfer_time(int boundary) const {
  const Stage& block = spec_.blocks[boundary];
  if (!spec_.fixed_allocation) return transfer_ms(block.output_bytes, platform_);
  return transfer_ms(block.output_bytes, platform_, block.gpu, spec_.blocks[boundary + 1].gpu);
}

// The nodes of the chain, their start variables, and the period.
void PatternIlp::add_variables() {
  const double tmax = spec_.period_upper_bound_ms;
  double longest = 0;
  for (const Stage& b : spec_.blocks) longest = std::max({longest, b.forward_ms, b.backward_ms});
  // With a fixed allocation no period is below the busiest GPU's or link's load; as a bound of T
  // it lets the relaxation see it (a free allocation has its load rows).
  if (spec_.fixed_allocation)
    longest = std::max(longest, busiest_resource_ms(spec_.blocks, platform_));
  const double tmin = std::min(tmax, longest);
  period_ = model_.add_var(tmin, tmax, false, "T");

  if (!spec_.fixed_allocation) {
    same_.assign(n_, std::vector<Var>(n_));
    for (int a = 0; a < n_; ++a)
      for (int b = a + 1; b < n_; ++b) same_[a][b] = model_.add_var(0, 1, true, "z" + idx(a, b));
  }
  auto has_transfer = [&](int boundary) {
    return !spec_.fixed_allocation || spec_.blocks[boundary].gpu != spec_.blocks[boundary + 1].gpu;
  };
  auto add_node = [&](OpKind kind, int block, double ms) {
    const std::string name = std::string(to_string(kind)) + idx(block);
    const double lb = -std::min(ms, tmax);
    // Fixing F of block 0 at 0 removes the translation symmetry (thesis (6.19)).
    const bool anchor = kind == OpKind::F && block == 0;
    nodes_.push_back(Node{
        kind, block, model_.add_var(anchor ? 0 : lb, anchor ? 0 : tmax, false, "tau_" + name)});
    return static_cast<int>(nodes_.size()) - 1;
  };
  f_node_.assign(n_, -1);
  b_node_.assign(n_, -1);
  act_node_.assign(std::max(0, n_ - 1), -1);
  grad_node_.assign(std::max(0, n_ - 1), -1);
  for (int b = 0; b < n_; ++b) {
    f_node_[b] = add_node(OpKind::F, b, spec_.blocks[b].forward_ms);
    if (b + 1 < n_ && has_transfer(b))
      act_node_[b] = add_node(OpKind::SendAct, b, transfer_time(b));
  }
  for (int b = n_ - 1; b >= 0; --b) {
    if (b + 1 < n_ && has_transfer(b))
      grad_node_[b] = add_node(OpKind::SendGrad, b, transfer_time(b));
    b_node_[b] = add_node(OpKind::B, b, spec_.blocks[b].backward_input_ms());
  }
  chain_nodes_ = static_cast<int>(nodes_.size());
  w_node_.assign(n_, -1);
  for (int b = n_ - 1; b >= 0; --b)
    if (spec_.blocks[b].splits_backward())
      w_node_[b] = add_node(OpKind::W, b, spec_.blocks[b].backward_weight_ms);
  // Every node ends within [0, T] (thesis (6.17), (6.18)).
  for (int x = 0; x < static_cast<int>(nodes_.size()); ++x)
    add_constraint(model_, LinearExpr(period_) - nodes_[x].start - duration(x), 0, kInf,
                   "end_" + idx(x));
}

// Blocks on one GPU form equivalence classes, at most P of them (thesis (6.1)-(6.3)).
void PatternIlp::add_allocation_rules() {
  if (spec_.fixed_allocation) return;
  for (int a = 0; a < n_; ++a)
    for (int b = a + 1; b < n_; ++b)
      for (int c = b + 1; c < n_; ++c) {
        const LinearExpr ab = same_gpu(a, b), ac = same_gpu(a, c), bc = same_gpu(b, c);
        add_constraint(model_, bc - ab - ac, -1, kInf, "trans_" + idx(a, b) + "_" + idx(c) + "a");
        add_constraint(model_, ac - ab - bc, -1, kInf, "trans_" + idx(a, b) + "_" + idx(c) + "b");
        add_constraint(model_, ab - ac - bc, -1, kInf, "trans_" + idx(a, b) + "_" + idx(c) + "c");
      }
  LinearExpr classes;
  for (int b = 0; b < n_; ++b) {
    // first_b = 1 when b is the lowest block of its GPU; continuous suffices (integral sums).
    const Var first = model_.add_var(0, 1, false, "first" + idx(b));
    LinearExpr partners;
    for (int a = 0; a < b; ++a) partners += same_gpu(a, b);
    add_helper_row(first, -1.0 * partners, 1, "first" + idx(b));
    classes += first;
  }
  add_constraint(model_, classes, -kInf, platform_.gpus, "gpus");
  // Implied by the windows, but the relaxation does not see it: a GPU's work fits in T.
  for (int s = 0; s < n_; ++s) {
    LinearExpr load;
    for (int t = 0; t < n_; ++t) load += spec_.blocks[t].compute_ms() * same_gpu(s, t);
    add_constraint(model_, LinearExpr(period_) - load, 0, kInf, "load" + idx(s));
  }
}

// Each dependency x -> y of the chain holds with a shift of v + v2 periods (thesis (6.23)-(6.30)):
// v = 0 means y starts after x ends in the same period, v2 = 0 that a one-period shift suffices.
void PatternIlp::add_dependencies() {
  auto add_edge = [&](int x, int y, const std::string& name) {
    Edge e{x, y, model_.add_var(0, 1, true, "v" + name), model_.add_var(0, 1, true, "w" + name)};
    const LinearExpr gap = LinearExpr(nodes_[y].start) - nodes_[x].start - duration(x);
    add_constraint(model_, gap + big_ * LinearExpr(e.v), 0, kInf, "dep0_" + name);
    add_constraint(model_, gap + LinearExpr(period_) + big_ * LinearExpr(e.v2), 0, kInf,
                   "dep1_" + name);
    add_constraint(model_, LinearExpr(e.v) - e.v2, 0, kInf, "dep2_" + name);
    return e;
  };
  for (int x = 0; x + 1 < chain_nodes_; ++x) edges_.push_back(add_edge(x, x + 1, idx(x)));
  weight_edges_.assign(n_, std::nullopt);
  for (int b = 0; b < n_; ++b)
    if (w_node_[b] >= 0) weight_edges_[b] = add_edge(b_node_[b], w_node_[b], "W" + idx(b));
}

// Two ops of one resource do not overlap, and all of them fit in one window of length T (thesis
// (6.5)-(6.7), (6.20)). `share` is 1 when both are on the resource.
static void add_disjunction(solver::Model& model, Var period, double big, const LinearExpr& share,
                            Var order, const LinearExpr& start_i, const LinearExpr& dur_i,
                            const LinearExpr& start_j, const LinearExpr& dur_j,
                            const std::string& name) {
  const LinearExpr off = big * (1.0 - share);
  add_constraint(model, start_j - start_i - dur_i + big * (1.0 - LinearExpr(order)), 0, kInf,
                 name + "a");
  add_constraint(model, start_i - start_j - dur_j + off + big * LinearExpr(order), 0, kInf,
                 name + "b");
  add_constraint(model, LinearExpr(period) - start_i - dur_i + start_j + off, 0, kInf, name + "c");
  add_constraint(model, LinearExpr(period) - start_j - dur_j + start_i + off, 0, kInf, name + "d");
  if (!share.terms().empty()) add_constraint(model, share - order, 0, kInf, name + "e");
}

void PatternIlp::add_compute_exclusivity() {
  const int m = static_cast<int>(nodes_.size());
  order_.assign(m, std::vector<std::optional<Var>>(m));
  for (int i = 0; i < m; ++i)
    for (int j = i + 1; j < m; ++j) {
      if (is_transfer(nodes_[i].kind) || is_transfer(nodes_[j].kind)) continue;
      const LinearExpr share = same_gpu(nodes_[i].block, nodes_[j].block);
      if (share.terms().empty() && share.constant() == 0) continue;
      const Var order = model_.add_var(0, 1, true, "o" + idx(i, j));
      order_[i][j] = order;
      add_disjunction(model_, period_, big_, share, order, nodes_[i].start, duration(i),
                      nodes_[j].start, duration(j), "gpu_" + idx(i, j));
    }
}

// Transfers of boundaries j and j2 share a link when both are cut between the same two GPUs
// (thesis (6.8)-(6.13)); a boundary's activation and gradient always do when it is cut.
void PatternIlp::add_link_exclusivity() {
  const int m = static_cast<int>(nodes_.size());
  const int boundaries = std::max(0, n_ - 1);
  if (!spec_.fixed_allocation) {
    link_same_.assign(boundaries, std::vector<std::optional<Var>>(boundaries));
    for (int j = 0; j < boundaries; ++j)
      for (int k = j + 1; k < boundaries; ++k) {
        const Var s = model_.add_var(0, 1, true, "zl" + idx(j, k));
        link_same_[j][k] = s;
        const std::string name = "zl_" + idx(j, k);
        const LinearExpr cj = cut(j), ck = cut(k);
        add_constraint(model_, LinearExpr(s) - same_gpu(j, k) - same_gpu(j + 1, k + 1) - cj, -2,
                       kInf, name + "a");
        add_constraint(model_, LinearExpr(s) - same_gpu(j, k + 1) - same_gpu(j + 1, k) - cj, -2,
                       kInf, name + "b");
        add_constraint(model_, cj - s, 0, kInf, name + "c");
        add_constraint(model_, ck - s, 0, kInf, name + "d");
        add_constraint(model_, same_gpu(j, k) + same_gpu(j + 1, k) - s, 0, kInf, name + "e");
        add_constraint(model_, same_gpu(j, k + 1) + same_gpu(j + 1, k + 1) - s, 0, kInf,
                       name + "f");
      }
  }
  auto link_of = [&](int boundary) {
    const int a = spec_.blocks[boundary].gpu, b = spec_.blocks[boundary + 1].gpu;
    return std::make_pair(std::min(a, b), std::max(a, b));
  };
  for (int i = 0; i < m; ++i)
    for (int j = i + 1; j < m; ++j) {
      if (!is_transfer(nodes_[i].kind) || !is_transfer(nodes_[j].kind)) continue;
      const int bi = nodes_[i].block, bj = nodes_[j].block;
      LinearExpr share;
      if (bi == bj) {
        share = spec_.fixed_allocation ? LinearExpr(1.0) : cut(bi);
      } else if (spec_.fixed_allocation) {
        if (link_of(bi) != link_of(bj)) continue;
        share = 1.0;
      } else {
        share = *link_same_[std::min(bi, bj)][std::max(bi, bj)];
      }
      // duration() is 0 for a transfer that does not happen: the big-M bounds assume that every
      // op, real or not, ends within [0, T].
      const Var order = model_.add_var(0, 1, true, "o" + idx(i, j));
      order_[i][j] = order;
      add_disjunction(model_, period_, big_, share, order, nodes_[i].start, duration(i),
                      nodes_[j].start, duration(j), "link_" + idx(i, j));
    }
}

void PatternIlp::add_helper_row(Var helper, const LinearExpr& rest, double lb, std::string name) {
  helper_rows_.emplace_back(
      helper, add_constraint(model_, LinearExpr(helper) - rest, lb, kInf, std::move(name)));
}

LinearExpr PatternIlp::before(int first, int second) const {
  if (first == second) return 1.0;
  if (first < second) {
    const auto& order = order_[first][second];
    return order ? LinearExpr(*order) : LinearExpr(0.0);
  }
  const auto& order = order_[second][first];
  if (!order) return 0.0;
  return same_gpu(nodes_[first].block, nodes_[second].block) - *order;
}

LinearExpr PatternIlp::shifts_between(int from_node, int to_node) const {
  LinearExpr sum;
  for (int x = from_node; x < to_node; ++x) sum += LinearExpr(edges_[x].v) + edges_[x].v2;
  return sum;
}

// At the start of every F, and at the end of every split B, the memory of its GPU fits (rows
// scaled by 1/M). At a probe (node `at`), block t holds stored_bytes for each micro-batch whose F
// has started and whose B has not ended, and weight_kept_bytes for each whose B has ended and
// whose W has not: the shifts between the two nodes, plus one when the first ran by the probe in
// the window, minus one when the second did (before(at, at) is 1: an F starts, a B ends there).
void PatternIlp::add_memory() {
  const double scale = 1.0 / static_cast<double>(platform_.memory_bytes);
  std::vector<int> probes = f_node_;
  for (int b = 0; b < n_; ++b)
    if (w_node_[b] >= 0) probes.push_back(b_node_[b]);
  for (int at : probes) {
    const int s = nodes_[at].block;
    LinearExpr used;
    const std::string suffix = nodes_[at].kind == OpKind::F ? "" : "B";
    const std::string name = "mem" + suffix + idx(s);
    if (spec_.fixed_allocation) {
      used +=
          static_cast<double>(static_memory(spec_.blocks, spec_.blocks[s].gpu, platform_).total());
    } else {
      const Var workspace = model_.add_var(0, kInf, false, "ws" + suffix + idx(s));
      used += LinearExpr(workspace);
      for (int t = 0; t < n_; ++t) {
        const Stage& other = spec_.blocks[t];
        used += static_cast<double>(platform_.weight_copies * other.weight_bytes) * same_gpu(s, t);
        add_helper_row(workspace, static_cast<double>(other.workspace_bytes) * same_gpu(s, t), 0,
                       name + "_ws" + idx(t));
      }
      for (int j = 0; j + 1 < n_; ++j) {
        const Var buffer = model_.add_var(0, 1, false, "buf" + suffix + idx(s, j));
        const LinearExpr diff = same_gpu(s, j) - same_gpu(s, j + 1);
        add_helper_row(buffer, diff, 0, name + "_bufa" + idx(j));
        add_helper_row(buffer, -1.0 * diff, 0, name + "_bufb" + idx(j));
        used += 2.0 * static_cast<double>(spec_.blocks[j].output_bytes) * LinearExpr(buffer);
      }
    }
    for (int t = 0; t < n_; ++t) {
      const LinearExpr share = same_gpu(s, t);
      if (share.terms().empty() && share.constant() == 0) continue;
      const Stage& block = spec_.blocks[t];
      if (block.stored_bytes > 0) {
        LinearExpr in_flight = shifts_between(f_node_[t], b_node_[t]);
        if (!share.terms()
                 .empty()) {  // sigma >= shifts when t shares s's GPU (thesis (6.31)-(6.32))
          const double most = 2.0 * (b_node_[t] - f_node_[t]);
          const Var sigma = model_.add_var(0, most, false, "sigma" + suffix + idx(s, t));
          add_helper_row(sigma, in_flight - most * (1.0 - share), 0, name + "_sigma" + idx(t));
          in_flight = sigma;
        }
        used += static_cast<double>(block.stored_bytes) *
                (in_flight + before(f_node_[t], at) - before(b_node_[t], at));
      }
      if (const std::optional<Edge>& edge = weight_edges_[t]; edge && block.weight_kept_bytes > 0) {
        LinearExpr kept = LinearExpr(edge->v) + edge->v2;
        if (!share.terms().empty()) {  // as sigma: kappa >= shifts when t shares s's GPU
          const Var kappa = model_.add_var(0, 2, false, "kappa" + suffix + idx(s, t));
          add_helper_row(kappa, kept - 2.0 * (1.0 - share), 0, name + "_kappa" + idx(t));
          kept = kappa;
        }
        used += static_cast<double>(block.weight_kept_bytes) *
                (kept + before(b_node_[t], at) - before(w_node_[t], at));
      }
    }
    add_constraint(model_, scale * used, -kInf, 1.0, name);
  }
}

}  // namespace madpipe::schedule
