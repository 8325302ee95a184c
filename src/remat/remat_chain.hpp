#pragma once

#include "core/profile.hpp"

#include <cstdint>
#include <vector>

namespace madpipe::remat {

// The chain model of rematerialization and offloading (thesis ch. 2-4): stages 1..n of a chain
// plus the loss n + 1. Vectors are indexed like the thesis, entry 0 unused where the thesis has
// no stage 0.
//   a[k]     output of stage k (a[0] is the chain input); what F^ck keeps
//   abar[k]  what F^all keeps for B_k, a[k] included, a[k-1] excluded; abar[0] = a[0]
//   delta[k] gradient of a[k], input of B_k and output of B_{k+1}
//   o_f[k], o_b[k]  transient overheads of F_k and B_k beyond their inputs and outputs
struct RematChain {
  int first_layer = 0;                          // profile index of stage 1, for printing sequences
  std::vector<double> forward_ms, backward_ms;  // [1..n+1]
  std::vector<std::int64_t> a, abar, delta;     // [0..n+1]
  std::vector<std::int64_t> forward_overhead, backward_overhead;  // [1..n+1]

  // Stages including the loss: n + 1.
  int length() const noexcept { return static_cast<int>(forward_ms.size()) - 1; }
  double sequential_ms() const noexcept;  // sum of u_F + u_B: every forward once
};

// An empty chain of n stages plus the loss, every value 0, for callers that fill it.
RematChain make_remat_chain(int stages);

// The chain of a pipeline stage holding layers [first, last] of `profile`. The "loss" is the
// hand-off to the next stage (free). The stage's output and the gradient it receives live in the
// communication buffers, as does the gradient it sends, so a[n], delta[n] and delta[0] are 0 and
// storing everything keeps exactly the stage's plain stored_bytes.
RematChain stage_remat_chain(const Profile& profile, int first, int last);

// Whether two chains have the same costs (every value but first_layer): what any DP over a chain
// computes from one holds for the other. Ranges [i, j] and [i + k, j + k] within a run of
// identical layers have the same costs.
bool same_costs(const RematChain& x, const RematChain& y) noexcept;
// A hash of the costs, consistent with same_costs.
std::uint64_t costs_hash(const RematChain& chain) noexcept;

}  // namespace madpipe::remat
