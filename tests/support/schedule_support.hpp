#pragma once

// Fixtures for the tests of the schedule layer and above (compiled into those test binaries only,
// so that the core tests need not link the schedule library).

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/platform.hpp"
#include "core/profile.hpp"
#include "schedule/pattern.hpp"
#include "schedule/plan.hpp"
#include "schedule/stage.hpp"
#include "schedule/validate.hpp"

namespace madpipe::testing {

// One-layer stage `id` (layer `id`) on GPU `gpu`.
schedule::Stage hand_stage(int id, int gpu, double forward_ms, double backward_ms,
                           std::int64_t output_bytes = 0, std::int64_t stored_bytes = 1);

// Stage s = layer s on GPU s, forward f[s], backward b[s], 1 stored byte, no activations.
std::vector<schedule::Stage> chain_stages(const std::vector<double>& f,
                                          const std::vector<double>& b);

// `profile` cut at num_stages - 1 random layers; stage s on GPU s if `contiguous`, else on a
// random one of `gpus` GPUs.
std::vector<schedule::Stage> random_stages(std::mt19937& rng, const Profile& profile,
                                           int num_stages, int gpus, bool contiguous);

// random_stages() of a random_chain(rng, layers).
std::vector<schedule::Stage> random_stages(std::mt19937& rng, int layers, int num_stages,
                                           int gpus, bool contiguous);

// Work of the busiest resource (GPU or link) for one micro-batch.
double busiest_load(const std::vector<schedule::Stage>& stages, const Platform& platform);

// Sum of the durations of one micro-batch's ops, transfers included.
double chain_length(const std::vector<schedule::Stage>& stages, const Platform& platform);

// Micro-batch 0's ops, each starting when the one before it ends.
std::vector<schedule::Op> asap_chain(const std::vector<schedule::Stage>& stages,
                                     const Platform& platform);

// Plan "hand" of `stages` running `pattern` on `platform`, predicted fields filled (bound 0).
schedule::Plan plan_of(const std::vector<schedule::Stage>& stages, const Platform& platform,
                       const schedule::Pattern& pattern);

// Plan of `profile` cut at `first_layers` onto `gpus` repeating asap_chain() every `period_ms`
// (0: the chain's length, no overlap at all), predicted lower bound half the period.
schedule::Plan chain_plan(const Profile& profile, const std::vector<int>& first_layers,
                          const std::vector<int>& gpus, const Platform& platform,
                          double period_ms);

// two_layer_profile() on two GPUs (1 MB, 1000 B/ms, 3 copies) at period 4: F0 [0,1) SA [1,1.5)
// F1 [1.5,2.5) B1 [2.5,4.5) SG [4.5,5) B0 [5,7), so stage 0 keeps two micro-batches in flight.
schedule::Plan pipelined_plan();

// `plan` as a k-periodic pattern: each op k times, one period of `plan` apart.
schedule::Plan repeated(const schedule::Plan& plan, int k);

// Index in plan.pattern.ops of the op `kind` of `stage` after `skip` others; a failure if none.
std::size_t find_op(const schedule::Plan& plan, schedule::OpKind kind, int stage,
                    std::size_t skip = 0);

// One "field: problem" line per violation.
std::string describe(const std::vector<schedule::Violation>& violations);

}  // namespace madpipe::testing
