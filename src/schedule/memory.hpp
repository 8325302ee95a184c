#pragma once

#include "core/chain.hpp"
#include "core/platform.hpp"
#include "schedule/pattern.hpp"
#include "schedule/stage.hpp"

#include <cstdint>
#include <optional>
#include <vector>

namespace madpipe::schedule {

// a + b, saturated at the limits of std::int64_t: memory sums of plans read from files (any size,
// any weight_copies) must not overflow.
inline std::int64_t saturated_add(std::int64_t a, std::int64_t b) noexcept {
  std::int64_t sum = 0;
  if (!__builtin_add_overflow(a, b, &sum)) return sum;
  return b > 0 ? INT64_MAX : INT64_MIN;
}

// Memory of one GPU under a pattern (the memory model of README.md, "Concepts").
struct GpuMemory {
  std::int64_t weights = 0;      // C * sum of W of its stages
  std::int64_t activations = 0;  // peak over time of sum_s in-flight(s) * stored_bytes(s)
  std::int64_t buffers = 0;      // send/receive buffers of activations and gradients
  std::int64_t workspace = 0;    // largest transient workspace of its layers

  std::int64_t total() const noexcept {
    return saturated_add(saturated_add(weights, activations), saturated_add(buffers, workspace));
  }
  // What FORMATS.md requires predicted.memory_bytes to be at least.
  std::int64_t lower_bound() const noexcept { return saturated_add(weights, activations); }
};

// The memory model's terms for one stage (README.md, "Concepts"). Every estimate of a stage's or a
// GPU's memory is made of them: the partitioners' DPs, the memory floor and the explanation of a
// refusal through stage_memory(costs, ...), evaluate_memory (hence the plan's prediction and the
// validator) through stage_memory(stages, ...).
struct StageMemory {
  std::int64_t weights = 0;  // weight_copies times its weights
  // Communication buffers for each neighbour on another GPU: the received activation and sent
  // gradient of its input, the sent activation and received gradient of its output (thesis
  // ch. 7.1.1).
  std::int64_t buffers = 0;
  std::int64_t workspace = 0;  // largest transient workspace of its layers
  std::int64_t stored = 0;     // what each micro-batch in flight keeps from forward to backward

  // What the stage holds whatever runs: its weights and buffers.
  std::int64_t fixed() const noexcept { return saturated_add(weights, buffers); }
  // The stage alone on its GPU with `in_flight` micro-batches in flight.
  std::int64_t total(std::int64_t in_flight) const noexcept;
};

// Layers first..last of the chain as one stage, alone on its GPU: its input is received and its
// output sent unless it starts or ends the chain.
StageMemory stage_memory(const ChainCosts& costs, int first, int last, const Platform& platform);

// Layer l with its neighbours on the same GPU (no buffers) and one micro-batch in flight: its
// weights times the copies, what one micro-batch keeps, its workspace. No GPU that holds the
// layer needs less without rematerialization.
std::int64_t layer_alone_bytes(const ChainCosts& costs, int layer, const Platform& platform);

// Stage s of `stages` as it stands (rematerialization applied): buffers for the neighbours on
// other GPUs only.
StageMemory stage_memory(const std::vector<Stage>& stages, int s, const Platform& platform);

// Largest number of micro-batches in flight on each stage (from the start of F to the end of B),
// over the steady state of the periodic schedule: the NCA of the stage.
std::vector<int> concurrent_activations(const Pattern& pattern, int num_stages);

// Exact per-GPU memory of the steady state of `pattern`.
std::vector<GpuMemory> evaluate_memory(const std::vector<Stage>& stages, const Pattern& pattern,
                                       const Platform& platform);

// True when every GPU's full memory estimate fits the platform (stops at the first that does not).
bool fits_memory(const std::vector<Stage>& stages, const Pattern& pattern,
                 const Platform& platform);

// The most micro-batches a 1-periodic pattern keeps in flight on each stage: holding its stored
// bytes (from the start of F to the end of B: concurrent_activations) and its weight_kept_bytes
// (from the end of B to the end of W).
struct InFlightPeaks {
  std::vector<int> stored;
  std::vector<int> kept;
};
InFlightPeaks in_flight_peaks(const Pattern& one_periodic, int num_stages);

// Whether the k-periodic variant (drop_every_kth_plus_one) of the 1-periodic pattern whose peaks
// are `peaks` fits the platform, told without building it where bounds suffice: the micro-batches
// in flight on a stage are consecutive ones, of which the variant drops one in k + 1. Always told
// when every stage has a GPU of its own and keeps nothing for a separate W; nullopt where the
// bounds cannot tell. k = 1 is the 1-periodic pattern itself.
std::optional<bool> k_variant_fits_memory(const std::vector<Stage>& stages,
                                          const InFlightPeaks& peaks, int k,
                                          const Platform& platform);

// Static part of a GPU's memory (everything but activations): the terms of its stages, weights
// and buffers added up, the largest workspace.
GpuMemory static_memory(const std::vector<Stage>& stages, int gpu, const Platform& platform);

std::vector<std::int64_t> totals(const std::vector<GpuMemory>& memory);

}  // namespace madpipe::schedule
