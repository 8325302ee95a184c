#pragma once

#include "core/chain.hpp"
#include "core/platform.hpp"
#include "partition/stage_options.hpp"

#include <cstdint>
#include <functional>

namespace madpipe::partition {

// The least memory per GPU with which a contiguous partition fits, found without scheduling.
struct MemoryFloor {
  bool fits = false;  // false: no partition fits with any memory (a stage option is missing)
  // Smallest memory per GPU for which the chain cuts into at most P contiguous stages, stage s on
  // GPU s, each within it with the micro-batches in flight it keeps (weights, buffers, workspace
  // and activations as schedule::evaluate_memory counts them). A cut that fits it exists (the
  // planners find it); without options it is exact to the byte.
  std::int64_t bytes = 0;
  // The floor lies in [at_least_bytes, bytes]: equal without options; with them, within 1/1000
  // of bytes unless `out_of_time` cut the search (`cut`).
  std::int64_t at_least_bytes = 0;
  bool cut = false;
  // The stage that needs `bytes` in the partition found, and whether it rematerializes or
  // offloads to get there.
  int binding_first = 0;
  int binding_last = 0;
  bool binding_saves_memory = false;
  int binding_in_flight = 1;
  // No allocation of any shape (non-contiguous ones included) fits in less; without
  // rematerialization: the largest layer alone, and the whole model spread evenly. <= bytes.
  std::int64_t any_allocation_bytes = 0;
};

// Micro-batches kept by the stage that has q stages from it to the end of the chain (itself
// included): 1 for MadPipe and the contiguous DP, whose patterns go down to one at long periods;
// q for 1F1B and PipeDream; N for GPipe.
using InFlight = std::function<int(int q)>;

// Min-max dynamic program over contiguous partitions (O(P L^2) stage memories). With `remat`,
// a stage may also run its least-memory option (the planner's StageOptions, so work is shared).
// A bisection between the floors of plain stages and of lower bounds of every way to run them
// finds the floor with options, looking at a stage's least-memory option
// (StageOptions::least_bytes) only when its lower bound fits; `out_of_time` may stop it.
MemoryFloor memory_floor(const ChainCosts& costs, const Platform& platform,
                         const InFlight& in_flight, StageOptions* remat = nullptr,
                         const std::function<bool()>& out_of_time = {});

}  // namespace madpipe::partition
