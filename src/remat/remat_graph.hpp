#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace madpipe::remat {

// A compute graph for rematerialization on general DAGs (Moccasin's graph model). Every node
// is an op with one output tensor; v reads the outputs of `inputs`, which must all be resident
// when v runs. Nodes are listed in a topological "input order": every input of a node comes
// before it. Execution is sequential.
struct RematNode {
  std::string name;
  double duration_ms = 0;
  std::int64_t size_bytes = 0;  // of the output
  std::vector<int> inputs;      // indices of earlier nodes, no repeats
  // False for a tensor that arrives from outside (a stage input, a received gradient): it is
  // "computed" exactly once and cannot be rebuilt later.
  bool recomputable = true;

  bool operator==(const RematNode& o) const {
    return name == o.name && duration_ms == o.duration_ms && size_bytes == o.size_bytes &&
           inputs == o.inputs && recomputable == o.recomputable;
  }
};

struct RematGraph {
  std::vector<RematNode> nodes;  // in the input order

  int size() const noexcept { return static_cast<int>(nodes.size()); }
  bool operator==(const RematGraph& o) const { return nodes == o.nodes; }
};

// Throws Error{InvalidInput} with field "/nodes/<i>/<key>" at the first problem: no nodes, an
// empty or repeated name, a negative or non-finite duration, a negative size, an input out of
// range, repeated, or not before its node in the input order.
void check_remat_graph(const RematGraph& graph);

// consumers[u]: the nodes reading u's output, in increasing order.
std::vector<std::vector<int>> consumers_of(const RematGraph& graph);

// Sum of the durations: every node computed once, the least any sequence takes.
double base_duration_ms(const RematGraph& graph);

// One computation of a sequence and the outputs freed right after it (its own included). In
// Moccasin's memory model a computation opens a retention interval of its node's output and the
// free closes it: the output occupies memory from its computation to its free.
struct RematStep {
  int node = -1;
  std::vector<int> freed;

  bool operator==(const RematStep& o) const { return node == o.node && freed == o.freed; }
};
using GraphSequence = std::vector<RematStep>;

// What replaying a sequence gives.
struct GraphReplay {
  bool valid = false;
  std::string problem;  // the first violation when !valid, naming the step and the nodes
  double total_ms = 0;
  // Largest memory during a computation: the resident outputs plus the one being computed.
  std::int64_t peak_bytes = 0;
  int peak_step = -1;
  std::vector<int> computations;  // per node
};

// Replays `sequence` (Moccasin's memory model). A step is valid when its node's inputs are
// resident, its own output is not (retention intervals of a node never overlap), it is not a
// second computation of a node that is not recomputable, and it frees only resident outputs.
// The sequence is valid when every step is and every node is computed at least once. Nothing needs
// to be freed at the end.
GraphReplay simulate_remat(const RematGraph& graph, const GraphSequence& sequence);

// The sequence computing `nodes` in this order with every output freed as early as possible:
// right after its last use before its node runs again (after its own step when nothing uses it).
// No placement of the frees takes less memory for that order of computations.
GraphSequence with_earliest_frees(const RematGraph& graph, const std::vector<int>& nodes);

// The nodes of the steps, in order.
std::vector<int> computed_nodes(const GraphSequence& sequence);

// Every node once, in the input order, frees as early as possible.
std::vector<int> input_order(const RematGraph& graph);
// The peak of that sequence: the memory needed without recomputation in the input order.
std::int64_t no_remat_peak_bytes(const RematGraph& graph);

// Node names separated by spaces ("a b a c").
std::string to_string(const RematGraph& graph, const std::vector<int>& nodes);

}  // namespace madpipe::remat
