#pragma once

#include "remat/remat_graph.hpp"
#include "solver/solve.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace madpipe::remat {

// Rematerialization on general graphs (Moccasin): the fastest sequence that computes every node
// of a RematGraph at least once, each node at most C times, with at most `budget_bytes` resident at
// every computation (inputs, retained outputs and the new output).
//
// Each computation of v opens a retention interval of its output; the model bounds the intervals
// of v by C_v (1 for a node that is not recomputable), charges the budget for every output over
// its interval and requires every input of a computation to be retained at that event. CP-SAT's
// cumulative and reservoir constraints are not available in a MILP, so both variants index
// retention by event with binaries (docs/planner.md):
//   Staged     the paper's stage variant for the graph's input order: stage k has k events,
//              event j of stage k belongs to the node of rank j, the last one computes node k
//              for the first time; retained-into-stage and free-after-use binaries, O(n^2 + n m).
//   OrderFree  no input order: Σ C_v events, any node at any event (one per event), a retained
//              binary per node and event, O(n · Σ C_v). Finds orders the stage variant misses.
enum class MoccasinVariant { Auto, Staged, OrderFree };
const char* to_string(MoccasinVariant variant);  // "auto", "staged", "order-free"

// Event numbers of the stage variant, 1-based: event `rank` of stage `stage`, that is
// stage(stage - 1)/2 + rank for 1 <= rank <= stage. The first computation of the node of rank r
// is event r(r + 1)/2.
int staged_event(int rank, int stage);
int staged_event_count(int nodes);  // n(n + 1)/2

struct MoccasinOptions {
  int max_computations = 2;  // C: computations of a node at most, the first included (>= 1)
  MoccasinVariant variant = MoccasinVariant::Auto;
  int order_free_max_nodes = 8;  // Auto solves OrderFree up to this many nodes, else Staged
  std::string backend;           // "cbc", "glpk"; empty: the first built
  solver::SolveOptions solve{10.0, 1e-4, 1, false};
};

// Why no sequence fits `budget_bytes` whatever the order and recomputation, or "" when this
// cheap check finds nothing: a node with its inputs and its output over the budget
// ("node 'c' (3) needs its 2 inputs and its output: 3 > 2").
std::string infeasible_budget_reason(const RematGraph& graph, std::int64_t budget_bytes);

struct MoccasinResult {
  // Optimal: proven fastest within the variant (or the input order fits without recomputation,
  // the fastest there is). Feasible: a plan without that proof (the solver's incumbent, or the
  // heuristic when the solver had nothing better). Infeasible: the pre-check, or the solver proved
  // that no sequence fits. Timeout, Error: no plan; `note` says why.
  solver::Status status = solver::Status::Error;
  MoccasinVariant variant = MoccasinVariant::Staged;  // the one solved
  std::string method;             // what made the plan: "no remat", "milp", "rotor", "greedy (...)"
  GraphSequence sequence;         // empty without a plan; frees as early as possible
  std::vector<int> computations;  // per node
  double total_ms = 0;
  double base_ms = 0;   // every node once: the lower bound
  double bound_ms = 0;  // best lower bound known on total_ms in the variant
  std::int64_t peak_bytes = 0;
  std::int64_t budget_bytes = 0;
  std::int64_t no_remat_peak_bytes = 0;  // the input order without recomputation
  double seconds = 0;                    // the whole call
  double solver_seconds = 0;             // of which the MILP
  std::string note;                      // the solver's outcome, fallbacks and why

  bool has_plan() const noexcept { return !sequence.empty(); }
  // total_ms / base_ms - 1 (0 when base_ms is 0).
  double overhead() const noexcept { return base_ms > 0 ? total_ms / base_ms - 1 : 0; }
};

// Solves the graph for the budget: the pre-check; the input order without recomputation when it
// fits; else best_remat_hint() (ROTOR on a training chain, the greedy otherwise), then the
// variant's MILP with the hint as MIP start. OrderFree first solves Staged (much faster) and starts
// from its plan when it beats the hint; the time limit applies to each solve. Every plan, the
// solver's and the hint, is replayed by simulate_remat() and kept only when valid, within the
// budget and the caps. On a timeout without a solution, a solver error, an invalid decode or no
// backend built, the hint is kept (status Feasible) with a note. Throws Error{InvalidInput} for an
// invalid graph or options.
MoccasinResult moccasin_remat(const RematGraph& graph, std::int64_t budget_bytes,
                              const MoccasinOptions& options);

// The variant Auto stands for on `graph`.
MoccasinVariant resolved_variant(const RematGraph& graph, const MoccasinOptions& options);

// The MILP of a variant (not Auto) and its MIP start from `hint` (no hint when empty or when the
// hint does not fit the variant): for inspection and MPS export.
solver::Model moccasin_model(const RematGraph& graph, std::int64_t budget_bytes,
                             const MoccasinOptions& options, MoccasinVariant variant,
                             const std::vector<int>& hint = {});

}  // namespace madpipe::remat
