#pragma once

#include "arena/tensor_graph.hpp"

#include <utility>
#include <vector>

namespace madpipe::arena {

// Where ops may run and tensors may live when a TensorGraph's order is free (two of OLLA's
// scaling techniques: time windows per node and tensor, and pruning the pairs of tensors that
// never coexist): the time-indexed order ILP creates variables only inside these windows.
// Timesteps are 0-based; a node's dependencies are the tensors it consumes and the order edges
// into it.

// Timesteps first..last, both included; empty when last < first.
struct TimeWindow {
  int first = 0;
  int last = -1;

  bool empty() const noexcept { return last < first; }
  int size() const noexcept { return empty() ? 0 : last - first + 1; }
  bool contains(int t) const noexcept { return first <= t && t <= last; }
  bool operator==(const TimeWindow& o) const noexcept { return first == o.first && last == o.last; }
};

struct LifetimeWindows {
  int horizon = 0;  // timesteps 0..horizon-1
  // Per node: SPAN = [ASAP, ALAP], the timesteps where it may run. ASAP is the longest path (in
  // edges) from a node without dependencies, ALAP = horizon - 1 - the longest path to a node
  // nothing depends on.
  std::vector<TimeWindow> span;
  // Per tensor: MUL, the maximum useful lifetime, where it may be resident:
  // [ASAP(producer), max ALAP(consumers)]; a stage input (no producer) starts at 0; a tensor
  // without consumers lives only while its producer may run.
  std::vector<TimeWindow> mul;
  // Per tensor: PRES, where it must be resident whatever the order:
  // [ALAP(producer) + 1, max ASAP(consumers)]; from 0 for a stage input; empty without consumers.
  std::vector<TimeWindow> pres;
};

// Windows on `horizon` timesteps (0: one per node, which never loses the optimum; fewer is
// OLLA's horizon shrinking, which may). Throws Error{InvalidInput} when the horizon is shorter
// than the longest dependency path.
LifetimeWindows lifetime_windows(const TensorGraph& graph, int horizon = 0);

// The pairs of tensors (i < j) that may be live together in some order: their MUL windows
// intersect and neither precedes the other. Tensor a precedes b when every last user of a (its
// consumers, or its producer when it has none) is a strict ancestor of b's producer: a is dead
// before b is made. An input and an output of the same node always may coexist.
std::vector<std::pair<int, int>> may_coexist_pairs(const TensorGraph& graph,
                                                   const LifetimeWindows& windows);

// The positions i (0 < i < nodes) where the graph splits into parts that run one after the other
// in every order: each node before i is an ancestor of each node from i on (the barriers between
// the micro-batch parts of a stage graph). Reordering never moves a node across them, and the
// resident memory inside a part depends only on the order of that part.
std::vector<int> sequential_cuts(const TensorGraph& graph);

}  // namespace madpipe::arena
