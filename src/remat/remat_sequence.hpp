#pragma once

#include "remat/remat_chain.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace madpipe::remat {

// Operations of a rematerialization/offloading sequence (thesis Table 2.1, ch. 3-4).
enum class RematOpKind {
  ForwardAll,         // F^all: forward recording everything B needs; keeps its input
  ForwardCheckpoint,  // F^ck: forward without recording; keeps its input and its output
  ForwardNone,        // F^none: forward without recording; frees its (plain) input
  Backward,           // B: consumes delta_k, abar_k and a plain a_{k-1}; produces delta_{k-1}
  Offload,            // copies the input of stage k to host memory and frees it on the GPU
  Prefetch,           // copies the input of stage k back before B_k needs it
};

struct RematOp {
  RematOpKind kind = RematOpKind::ForwardAll;
  int stage = 1;  // 1..n+1 in the chain; n + 1 is the loss

  bool operator==(const RematOp& other) const noexcept {
    return kind == other.kind && stage == other.stage;
  }
};

using RematSequence = std::vector<RematOp>;

// One token per op, with profile layer indices (stage k of the chain is layer first_layer+k-1):
// "F12all", "F12ck", "F12none", "B12", "O12", "P12"; the loss is "Loss" (forward) and "dLoss"
// (backward). Tokens are separated by one space.
std::string to_string(const RematSequence& sequence, const RematChain& chain);
// Inverse of to_string; throws Error{InvalidInput} naming the token.
RematSequence parse_remat_sequence(const std::string& text, const RematChain& chain);

// F1all .. F(n+1)all B(n+1) .. B1: no rematerialization.
RematSequence store_all_sequence(const RematChain& chain);

// Activations of a stage that runs one sequence with `in_flight` micro-batches in flight: each
// keeps `stored_bytes` between its forward and its backward, and the one running its ops needs
// `transient_bytes` more (the stage term of schedule::StageMemory, with rematerialization).
inline std::int64_t in_flight_bytes(std::int64_t stored_bytes, std::int64_t transient_bytes,
                                    std::int64_t in_flight) noexcept {
  return in_flight * stored_bytes + transient_bytes;
}

// What replaying a sequence on a chain gives, with exact byte sizes (no offloading).
struct SequenceReplay {
  bool valid = false;
  std::string problem;            // first violation when !valid, naming the op
  double forward_ms = 0;          // ops up to and including the loss forward
  double backward_ms = 0;         // the ops after it: backwards and recomputations
  std::int64_t stored_bytes = 0;  // held at the end of the loss forward (a[0] included)
  std::int64_t peak_bytes = 0;    // largest memory during any op, a[0] and overheads included

  double total_ms() const noexcept { return forward_ms + backward_ms; }
  // Transient memory above what is held between forward and backward.
  std::int64_t transient_bytes() const noexcept { return peak_bytes - stored_bytes; }
  std::int64_t in_flight_bytes(std::int64_t in_flight) const noexcept {
    return remat::in_flight_bytes(stored_bytes, transient_bytes(), in_flight);
  }
};

// Replays `sequence` with the semantics of thesis Table 2.1: an op needs its inputs present, F^none
// frees its plain input, B_k frees delta_k, abar_k and a plain a_{k-1}; during an op memory holds
// everything stored plus its outputs and overhead. A sequence is valid when every op finds its
// inputs and it ends with only delta_0 stored, each backward run once.
SequenceReplay replay_sequence(const RematChain& chain, const RematSequence& sequence);

}  // namespace madpipe::remat
