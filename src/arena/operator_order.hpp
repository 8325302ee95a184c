#pragma once

#include "arena/tensor_graph.hpp"
#include "solver/solve.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace madpipe::arena {

// OLLA's operator-order problem, solved with OLLA's time-indexed lifetime ILP: the node order
// of a TensorGraph is only one valid topological order; choose the one with the smallest
// resident peak. Addresses are planned afterwards on the resulting lifetimes (address_plan.hpp):
// the split of ordering and addressing.

// The resident peak of running the nodes in `order` (indices into graph.nodes): at each step, the
// bytes of the tensors made at or before it (stage inputs: from the first step) and used at or
// after it (a tensor without consumers: only at its producer's step). Computed from the order
// alone, as an independent check of the ILP and of buffers_of.
std::int64_t resident_peak_bytes(const TensorGraph& graph, const std::vector<int>& order);

// Why `order` is not an execution order of the graph ("" when it is): not a permutation of the
// nodes, or a consumer or order edge before its producer.
std::string order_problem(const TensorGraph& graph, const std::vector<int>& order);

// The graph with its nodes in `order`, tensors and order edges renumbered. Throws
// Error{InvalidInput} with order_problem's reason.
TensorGraph reorder(const TensorGraph& graph, const std::vector<int>& order);

// max over nodes of the bytes of its inputs and outputs: no order does better.
std::int64_t op_lower_bound_bytes(const TensorGraph& graph);

struct OrderIlpOptions {
  std::string backend;  // "cbc", "glpk"; empty: the first built
  solver::SolveOptions solve{10.0, 5e-3, 1, false};
  // Timesteps of the time-indexed model; 0: one per node, and parts in sequence solved one by
  // one. Given, the whole graph is one model; fewer than the nodes is faster but may miss the
  // optimum (the diamond graph of tests/arena/operator_order_test.cpp: 150 bytes at 6
  // timesteps, 130 at 7).
  int horizon = 0;
  // Skip the solve when the given order meets op_lower_bound_bytes or is the only order.
  bool skip_when_given_optimal = true;
};

enum class OrderOutcome {
  Reordered,     // the ILP's order (possibly the given one again, then proven or not)
  OnlyOrder,     // the graph has one execution order: nothing solved
  AtLowerBound,  // the given order meets op_lower_bound_bytes: nothing solved
  Kept,          // the given order after a failure: no backend, no incumbent, a bad decode
};

struct OperatorOrder {
  std::vector<int> order;              // node indices in execution order
  std::int64_t peak_bytes = 0;         // resident_peak_bytes of `order`
  std::int64_t given_peak_bytes = 0;   // of the graph's own node order
  std::int64_t lower_bound_bytes = 0;  // op_lower_bound_bytes
  // Of the whole graph; for parts in sequence, the first of Reordered, Kept, AtLowerBound,
  // OnlyOrder that some part had.
  OrderOutcome outcome = OrderOutcome::Kept;
  std::string note;  // what happened, and why the given order was kept
  // When a solve ran: its status (for parts, Feasible if any part stopped at the limit), and
  // the seconds of all solves.
  solver::Status solver_status = solver::Status::Error;
  double solver_seconds = 0;
  // Size of the model built (0 without one): execution variables X_{v,t} (one per node and
  // timestep of its SPAN; OLLA's C_{e,t}, e created at t, are X of e's producer) and preserve
  // variables P_{e,t} (one per tensor and timestep of its MUL), and the pairs that may coexist
  // (OLLA's joint model would need an order binary for each; the split one needs none).
  int execute_vars = 0;
  int preserve_vars = 0;
  int coexisting_pairs = 0;
};

// The lifetime ILP on lifetime_windows(graph, horizon): binaries X_{v,t} (node v runs at t) and
// P_{e,t} (tensor e resident at t, already made), a continuous peak, minimize the peak subject to
//   sum_t X_{v,t} = 1; P_{e,t} + X_{src e,t} <= 1; P_{e,t} <= P_{e,t-1} + X_{src e,t-1};
//   X_{v,t} <= P_{f,t} for every input f of v; order edges u->v: sum t X_{v,t} >= sum t X_{u,t} +
//   1; sum_v out(v) X_{v,t} + sum_e S_e P_{e,t} <= peak for every t,
// with P fixed to 1 on PRES, sizes divided by their GCD and the given order as MIP start. Nodes
// sharing a timestep run in index order (never worse: each step holds a subset of the shared
// one). The decoded order is checked with order_problem and its peak recomputed with
// resident_peak_bytes; on no backend, a timeout without incumbent, a solver error, an invalid or
// worse decode, returns the given order with a note. A graph with sequential_cuts (and horizon 0)
// is solved part by part, each with what is left of the time limit: the peak is the largest of
// the parts', so the parts' optima make the optimum, with far smaller models.
OperatorOrder ilp_operator_order(const TensorGraph& graph, const OrderIlpOptions& options);

}  // namespace madpipe::arena
