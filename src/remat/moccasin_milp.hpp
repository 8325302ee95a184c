#pragma once

#include "remat/remat_graph.hpp"
#include "solver/model.hpp"

#include <cstdint>
#include <memory>
#include <vector>

namespace madpipe::remat {

// The MILPs behind moccasin_remat() (moccasin.hpp): each builds its model once, turns a sequence
// of computations into a MIP start and a solution back into a sequence. Sizes are divided by a
// common unit so that coefficients stay near 1..1000; the simulator re-checks exact bytes.
class RematMilp {
 public:
  virtual ~RematMilp();
  const solver::Model& model() const noexcept { return model_; }
  // Sets the MIP start from the computations `nodes` (frees as early as possible); returns false
  // and sets nothing when the sequence does not fit the model (not staged, too long, over a cap).
  virtual bool set_start(const std::vector<int>& nodes) = 0;
  // The computations of a solution, in order.
  virtual std::vector<int> decode(const std::vector<double>& values) const = 0;

 protected:
  solver::Model model_;
};

// Moccasin's stage variant for the graph's input order, per stage k and rank j <= k:
//   R[k][j]  node j computed at event j of stage k (R[k][k] = 1: its first computation)
//   S[k][j]  j's output retained from an earlier stage into stage k (j < k)
//   F[k][j][i]  i's output (an input of j, or j itself) freed right after event j of stage k
//   U[k][j]  memory during event j of stage k (continuous, <= budget)
// rows: Σ_k R[k][j] <= C_j; S[k+1][j] <= S[k][j] + R[k][j]; R[k][j] + S[k][j] <= 1 (intervals of
// a node do not overlap); R[k][j] <= R[k][i] + S[k][i] for each input i of j; F[k][j][i] <=
// R[k][j], <= 1 - S[k+1][i] and <= 1 - R[k][w] for each consumer w of i with j < w <= k;
// U[k][0] = Σ_i m_i S[k][i] + m_0 R[k][0], U[k][j] = U[k][j-1] - Σ_i m_i F[k][j-1][i] + m_j
// R[k][j]. Objective Σ w_j R[k][j].
std::unique_ptr<RematMilp> make_staged_milp(const RematGraph& graph, std::int64_t budget_bytes,
                                            int max_computations);

// No input order, events t = 0 .. T - 1 with T = Σ_v C_v, or `max_events` when smaller and > 0
// (a sequence no slower than a known one has at most n + (its time - Σ w) / min w computations):
//   z[v][t]  v computed at event t;  h[v][t]  v's output retained at event t
// rows: Σ_v z[v][t] <= 1 (one computation per event); 1 <= Σ_t z[v][t] <= C_v; h[v][t] <=
// h[v][t-1] + z[v][t] and z[v][t] <= h[v][t] (an interval starts with a computation);
// z[v][t] + h[v][t-1] <= 1 (no overlap); z[w][t] <= h[u][t] for each input u of w;
// Σ_v m_v h[v][t] <= M; Σ_v z[v][t+1] <= Σ_v z[v][t] (no idle event before a computation).
// v cannot run before its ancestors: no variables before event |ancestors(v)|.
// Objective Σ w_v z[v][t].
std::unique_ptr<RematMilp> make_order_free_milp(const RematGraph& graph, std::int64_t budget_bytes,
                                                int max_computations, int max_events = 0);

}  // namespace madpipe::remat
