#pragma once

#include "remat/offload_replay.hpp"
#include "remat/remat_chain.hpp"
#include "remat/remat_sequence.hpp"

#include <cstdint>

namespace madpipe::remat {

// Best sequence the offloading DP found, and its replay with exact sizes.
struct OffloadResult {
  bool feasible = false;
  RematSequence sequence;   // F/B ops plus O_k right after the op of stage k that decided it and
                            // every P_k right after the loss forward, in decreasing k
  double predicted_ms = 0;  // the DP's makespan (infinity when infeasible); >= replay.total_ms
                            // up to rounding, equal when the discretization is exact
  OffloadReplay replay;
};

// pofo (thesis ch. 4, "Persistent with Offloading during Forward Only"): rematerialization and
// offloading of stage inputs to the host, under Assumptions 4 (persistent, offloads only before
// the loss, synchronized at the loss, each tensor prefetched once, whole transfers that free and
// allocate memory progressively). Memory is cut into `steps` steps of budget_bytes (a[0]
// included); sizes round up and transferred amounts round down, so the sequence fits the real
// budget. With host_bytes_per_ms -> 0 it is ROTOR's persistent DP (optimal_remat).
OffloadResult optimal_offload_remat(const RematChain& chain, std::int64_t budget_bytes,
                                    double host_bytes_per_ms, int steps = 50);

// The same DP without recomputation: every forward is F^all (thesis ch. 3 in the pofo model).
OffloadResult optimal_offload_only(const RematChain& chain, std::int64_t budget_bytes,
                                   double host_bytes_per_ms, int steps = 50);

}  // namespace madpipe::remat
