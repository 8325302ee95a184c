#pragma once

#include "core/chain.hpp"
#include "core/platform.hpp"
#include "partition/allocation.hpp"
#include "partition/planner.hpp"
#include "partition/stage_options.hpp"

#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace madpipe::partition {

struct DpResult {
  double period_ms = 0;  // +inf when no allocation fits (or none beats the upper bound)
  Allocation allocation;
  long long states = 0;  // states evaluated, for benchmarks
  bool cut = false;      // out_of_time stopped it: period_ms is +inf
};

// MadPipe-DP (thesis ch. 7.1.2) for a target period T^: T(j, p, t_P, m_P, V) over the first j
// layers, p normal GPUs, the special GPU's load t_P and memory m_P, and the delay V between the
// end of F_j and the start of B_j; the memory of a stage uses the 1F1B* group number
// ceil((V + U) / T^). With allow_special = false it is the contiguous DP (PipeDream-style
// partition with 1F1B* memory estimates) on P normal GPUs. States whose period cannot beat
// `upper_bound_ms` are pruned. With `remat`, a stage that does not fit its GPU runs the fastest
// rematerialization option that does (recorded in the allocation).
// `out_of_time` is asked every few thousand states; true abandons the run.
DpResult madpipe_dp(const ChainCosts& costs, const Platform& platform,
                    const Discretization& discretization, bool allow_special, double target_ms,
                    double upper_bound_ms, StageOptions* remat = nullptr,
                    const std::function<bool()>& out_of_time = {});

// What Algorithm 8 found: distinct allocations, best estimated period first, and the best
// max(T, T^) (for the contiguous DP, a valid upper bound for MadPipe-DP).
struct DpCandidates {
  std::vector<Allocation> allocations;
  double best_period_ms = std::numeric_limits<double>::infinity();
  bool cut = false;  // out_of_time stopped it after its first DP run (or during it)
};

// Algorithm 8: the modified binary search on T^ with K iterations, then the extra targets.
// `upper_bound_ms` is a known achievable max(T, T^) (e.g. from the contiguous DP); it starts the
// search and prunes the DP. `out_of_time` is asked between DP runs and within them.
DpCandidates dp_candidates(const ChainCosts& costs, const Platform& platform,
                           const Discretization& discretization, bool allow_special,
                           const std::function<void(const std::string&)>& progress = {},
                           double upper_bound_ms = std::numeric_limits<double>::infinity(),
                           StageOptions* remat = nullptr,
                           const std::function<bool()>& out_of_time = {});

// dp_candidates(...).allocations.
std::vector<Allocation> madpipe_allocations(
    const ChainCosts& costs, const Platform& platform, const Discretization& discretization,
    bool allow_special, const std::function<void(const std::string&)>& progress = {},
    double upper_bound_ms = std::numeric_limits<double>::infinity(), StageOptions* remat = nullptr);

// dp_candidates(..., allow_special = false, ...).best_period_ms: a valid upper bound for
// MadPipe-DP.
double contiguous_upper_bound(const ChainCosts& costs, const Platform& platform,
                              const Discretization& discretization, StageOptions* remat = nullptr);

}  // namespace madpipe::partition
