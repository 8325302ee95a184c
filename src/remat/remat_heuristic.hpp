#pragma once

#include "remat/remat_chain.hpp"
#include "remat/remat_graph.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace madpipe::remat {

// Feasible rematerialization sequences found without a solver: moccasin_remat's MIP start and
// fallback. Every sequence here is "staged" (moccasin.hpp): the nodes run for the first time in
// the input order, and what runs between two first computations is increasing in that order.

// A training chain (the shape ROTOR solves): a source f0 -> f1 -> ... -> fL where each f_k reads
// only f_{k-1}, backward nodes b_L .. b_1 where b_k reads b_{k+1} (b_L: the optional source g)
// and nothing but f_{k-1} and f_k besides. Node indices in the graph.
struct TrainingChain {
  std::vector<int> forward;   // f0 .. fL
  std::vector<int> backward;  // b1 .. bL (backward[k - 1] is b_k)
  int gradient = -1;          // g, or -1
};
std::optional<TrainingChain> as_training_chain(const RematGraph& graph);

// The ROTOR chain of a training chain: stage k is (f_k, b_k), a[k] = abar[k] = f_k's size,
// delta[k - 1] = b_k's size, delta[L] = g's size.
RematChain rotor_chain_of(const RematGraph& graph, const TrainingChain& chain);

// ROTOR's optimal sequence for the chain (optimal_remat(), 500 slots) as graph nodes: F_k -> f_k,
// B_k -> b_k, f0 first and g right before b_L. Empty when ROTOR finds none. ROTOR holds delta_L
// from the start, so it is conservative by g's size during the forward.
std::vector<int> rotor_remat_nodes(const RematGraph& graph, const TrainingChain& chain,
                                   std::int64_t budget_bytes);

// Which retained output the greedy drops when a stage does not fit.
enum class EvictionRule {
  CheapestPerByte,  // least duration per byte first
  FarthestNextUse,  // the one whose next first-time consumer comes last (Belady)
  LargestFirst,
};

// The greedy: nodes in the input order; before node k runs, the inputs it misses are recomputed
// (recursively, in the input order); an output is freed as soon as no node still to be computed
// for the first time reads it; when a stage exceeds `budget_bytes`, outputs resident at its peak
// and not needed there are dropped (freed at their last use in the stage) by `rule`. Empty when
// it finds no sequence: a node over `max_computations` (1 for nodes that are not recomputable)
// or nothing left to drop. A non-zero `seed` multiplies each node's key by a fixed random factor
// in [0.7, 1.3], for diversified runs.
std::vector<int> greedy_remat_nodes(const RematGraph& graph, std::int64_t budget_bytes,
                                    int max_computations, EvictionRule rule, unsigned seed = 0);

// The best heuristic sequence that the simulator accepts within the budget and the cap: ROTOR's
// optimal sequence when the graph is a training chain, and the greedy with each eviction rule,
// plain and with 15 perturbed keys (deterministic seeds).
struct RematHint {
  GraphSequence sequence;  // empty when none was found
  double total_ms = 0;
  std::int64_t peak_bytes = 0;
  std::string method;  // "rotor", "greedy (cheapest per byte)", ...
};
RematHint best_remat_hint(const RematGraph& graph, std::int64_t budget_bytes, int max_computations);

}  // namespace madpipe::remat
