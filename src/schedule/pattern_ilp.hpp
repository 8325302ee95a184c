#pragma once

#include "core/platform.hpp"
#include "schedule/pattern.hpp"
#include "schedule/stage.hpp"
#include "solver/linear_expr.hpp"
#include "solver/model.hpp"

#include <optional>
#include <vector>

namespace madpipe::schedule {

// The integer linear program of thesis ch. 6 over a chain of blocks: a 1-periodic pattern of
// minimum period T in which every block's F and B, and every transfer between blocks on different
// GPUs, runs once per period. Blocks are layers (the full ILP, ch. 6) or the stages of a fixed
// partition (ch. 7.2). With a fixed allocation the GPU of each block is given, and each transfer
// takes its link's time; otherwise the program also chooses it: blocks on one GPU form an
// equivalence class of at most P classes, and transfers take the slowest link's time (on a
// multi-node platform, the program does not know which classes share a node).
//
// Memory is that of evaluate_memory(), exactly: C * weights, send/receive buffers of every cut,
// the largest workspace, and at the start of every F, sum over the blocks of its GPU of
// stored_bytes times the micro-batches in flight (from the start of F to the end of B). A block's
// micro-batches in flight at the start of the GPU's window are the period shifts accumulated on
// the chain from its F to its B, each dependency contributing 0, 1 or 2 (thesis Lemma 17).
// Blocks may split their backward (Stage::splits_backward): B is then the input gradient, on the
// chain, and a W node off the chain follows it on the block's GPU, shifted 0, 1 or 2 periods;
// such a block holds weight_kept_bytes per micro-batch from the end of B to the end of W, counted
// at the start of every F and, as evaluate_memory() probes them, at the end of every split B.
class PatternIlp {
 public:
  struct Spec {
    std::vector<Stage> blocks;  // in chain order; gpu is read only with a fixed allocation
    bool fixed_allocation = true;
    double period_upper_bound_ms = 0;  // T <= this (> 0); also scales the big-M constants
  };

  struct Decoded {
    std::vector<Stage> stages;  // the blocks with their GPUs
    Pattern pattern;            // 1-periodic, retimed
  };

  PatternIlp(Spec spec, const Platform& platform);

  const solver::Model& model() const noexcept { return model_; }
  solver::Var period() const noexcept { return period_; }
  const Platform& platform() const noexcept { return platform_; }

  // Sets a MIP start from a 1-periodic pattern of the blocks placed as in `stages` (same length
  // and costs as the blocks). Returns false, setting nothing, when the pattern cannot be written
  // in the program's variables (k > 1, a dependency spanning more than two periods, GPUs that
  // differ from a fixed allocation).
  bool set_start(const std::vector<Stage>& stages, const Pattern& pattern);

  // The pattern of a solution; throws Error(Internal) if the values are inconsistent.
  Decoded decode(const std::vector<double>& values) const;

 private:
  // A node of the micro-batch chain: F or B of a block, or the transfer after it; after the
  // chain, the W nodes of split blocks.
  struct Node {
    OpKind kind = OpKind::F;
    int block = 0;  // for transfers: the boundary (block, block + 1)
    solver::Var start;
  };
  struct Edge {  // dependency node -> next node, shift v + v2 periods
    int from = 0, to = 0;
    solver::Var v, v2;
  };

  solver::LinearExpr same_gpu(int a, int b) const;  // 1 if blocks a and b share a GPU
  solver::LinearExpr cut(int boundary) const { return 1.0 - same_gpu(boundary, boundary + 1); }
  solver::LinearExpr duration(int node) const;
  double transfer_time(int boundary) const;  // of a transfer at `boundary`, when it is cut
  void add_variables();
  void add_dependencies();
  void add_compute_exclusivity();
  void add_link_exclusivity();
  void add_allocation_rules();
  void add_memory();
  // 1 if `first` runs before `second` in their common window (both on one resource); 0 if they
  // are not on one resource (free allocation). Same node: 1.
  solver::LinearExpr before(int first, int second) const;
  solver::LinearExpr shifts_between(int from_node, int to_node) const;

  // Adds "helper - rest >= lb", a row whose only job is to bound a continuous helper variable
  // (first, sigma, buffer, workspace) from below; set_start() gives helpers their least value.
  void add_helper_row(solver::Var helper, const solver::LinearExpr& rest, double lb,
                      std::string name);

  Spec spec_;
  Platform platform_;
  solver::Model model_;
  int n_ = 0;
  double big_ = 0;  // 2 * T_max
  solver::Var period_;
  std::vector<Node> nodes_;  // chain order, transfers of uncut boundaries included when free
  int chain_nodes_ = 0;      // nodes_[0, chain_nodes_) are the chain, the W nodes follow
  std::vector<Edge> edges_;  // edges_[x]: chain node x -> x + 1
  std::vector<int> f_node_, b_node_, w_node_;                       // per block (W: -1 if whole)
  std::vector<std::optional<Edge>> weight_edges_;                   // per split block: B -> W
  std::vector<int> act_node_, grad_node_;                           // per boundary, -1 when absent
  std::vector<std::vector<solver::Var>> same_;                      // free allocation: z, a < b
  std::vector<std::vector<std::optional<solver::Var>>> order_;      // node pairs on one GPU/link
  std::vector<std::vector<std::optional<solver::Var>>> link_same_;  // free: boundary pairs
  std::vector<std::pair<solver::Var, solver::Row>> helper_rows_;
};

}  // namespace madpipe::schedule
