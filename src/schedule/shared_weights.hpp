#pragma once

#include "core/platform.hpp"
#include "schedule/stage.hpp"

#include <cstdint>
#include <vector>

namespace madpipe::schedule {

// Latency of one step of a collective (a ring's send and receive), in ms.
inline constexpr double kCollectiveStepLatencyMs = 0.01;

// Time of a ring all-reduce of `bytes` over `replicas` GPUs at `bandwidth_bytes_per_ms`:
// 2 (n - 1) steps, each moving bytes / n and paying `latency_ms`. 0 for one replica.
double ring_all_reduce_ms(std::int64_t bytes, int replicas, double bandwidth_bytes_per_ms,
                          double latency_ms);

// Bytes of tied weights that the weight_bytes of the stages on `gpu` count more than once: a GPU
// holds each tied weight once, however many of its stages use it.
std::int64_t repeated_shared_bytes(const std::vector<Stage>& stages, int gpu);

// The GPUs holding each tied weight used by the stages, by group (ascending GPU ids).
struct SharedWeightPlacement {
  int group = 0;
  std::int64_t bytes = 0;
  std::vector<int> gpus;
};
std::vector<SharedWeightPlacement> shared_weight_placements(const std::vector<Stage>& stages);

// Per training step, the time to sum the gradients of each tied weight over the GPUs that hold a
// copy (a ring all-reduce over the slowest link between them; the groups one after the other):
// the gradient is complete only after the step's last backward on each of them, so nothing hides
// it. 0 when every tied weight sits on one GPU.
double tied_exchange_ms(const std::vector<Stage>& stages, const Platform& platform);

}  // namespace madpipe::schedule
