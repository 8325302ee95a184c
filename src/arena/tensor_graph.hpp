#pragma once

#include "remat/remat_chain.hpp"
#include "remat/remat_sequence.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace madpipe::arena {

// A dataflow graph for static memory planning (as in OLLA), with its operator order fixed: nodes
// run in the order of `nodes`, one per timestep (timestep = index in `nodes`).
//
// A tensor is a hyperedge: one producer, any number of consumers. It is resident from the
// timestep of its producer to the timestep of its last consumer, both included (the producer's
// outputs and the consumer's inputs are all resident while an op runs). A tensor without a
// producer (-1) is present before the first node (a stage input); a tensor without consumers is
// freed right after its producer (a workspace, or an output handed off at once).
struct TensorNode {
  std::string name;
  double duration_ms = 0;
};

struct Tensor {
  std::string name;
  std::int64_t size_bytes = 0;
  int producer = -1;           // index in TensorGraph::nodes; -1: present from the start
  std::vector<int> consumers;  // indices in TensorGraph::nodes
};

// A dependency without a tensor: node `before` must run before node `after` (a pipeline barrier
// between the parts of two micro-batches, or a hand-off whose bytes live elsewhere).
struct OrderEdge {
  int before = -1;
  int after = -1;
};

struct TensorGraph {
  std::vector<TensorNode> nodes;  // in execution order
  std::vector<Tensor> tensors;
  std::vector<OrderEdge> order_edges;
};

// Builder (b): a graph from an explicit list of edges. Node names are given in execution order;
// each edge names its producer ("" for none) and its consumers. Throws Error{InvalidInput} for an
// unknown node name, a negative size, or a consumer that does not run after the producer.
struct TensorSpec {
  std::string name;
  std::int64_t size_bytes = 0;
  std::string producer;                // "" : present from the start
  std::vector<std::string> consumers;  // empty: freed right after the producer
};
TensorGraph make_tensor_graph(const std::vector<std::string>& node_names,
                              const std::vector<TensorSpec>& tensors);

// Throws Error{InvalidInput} naming the tensor when an index is out of range, a size is negative
// or a consumer runs at or before its producer, and likewise for an order edge going backwards.
void check_tensor_graph(const TensorGraph& graph);

// The graph of one micro-batch on a stage (see stage_tensor_graph for the names and tensors), in
// sequence order: its forward part (the stage input's "recv" and the ops up to the loss forward)
// comes first, then its backward part ("recv_grad" and the rest). Tensors of 0 bytes are kept:
// they carry dependencies.
struct MicroBatchTensorGraph {
  TensorGraph graph;
  int forward_nodes = 0;  // nodes 0..forward_nodes-1 are the forward part
};
MicroBatchTensorGraph micro_batch_tensor_graph(const remat::RematChain& chain,
                                               const remat::RematSequence& sequence);

// Builder (a): the operations of a pipeline stage for `in_flight` micro-batches (its NCA), on the
// chain of stage_remat_chain(). Each op of `sequence` (one micro-batch; empty: store everything)
// becomes one node per micro-batch, named like its remat token plus "@m<i>" ("F12all@m0",
// "B12@m1"). The tensors follow replay_sequence's semantics (remat_sequence.hpp):
//   a<k>     plain output of stage k (a0 is the stage input, present from the start)
//   abar<k>  what F<k>all records for B<k> (its output included)
//   d<k>     the gradient delta_k (B<k+1> makes it, B<k> consumes it)
//   ws:<op>  the op's transient workspace (forward or backward overhead)
// Tensors of 0 bytes (the hand-off to the next stage lives in communication buffers) become order
// edges. Order: the forward parts (ops up to the loss forward) of micro-batches 0..N-1, then their
// backward parts 0..N-1: the window of a pipelined stage in which all N micro-batches hold their
// activations at once, the memory peak of the memory model (README.md, "Concepts"):
// (N-1) * stored + peak. Order edges keep these parts in this order (every op of a part runs before
// every op of the next), so that reordering the graph (operator_order.hpp) moves ops only inside a
// part. Throws Error{InvalidInput} when the sequence is not valid for the chain (replay_sequence).
TensorGraph stage_tensor_graph(const remat::RematChain& chain, const remat::RematSequence& sequence,
                               int in_flight);

}  // namespace madpipe::arena
