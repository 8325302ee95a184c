#pragma once

// Fixtures for the tests of the schedule layer and above (compiled into those test binaries only,
// so that the core tests need not link the schedule library).

#include "core/platform.hpp"
#include "core/profile.hpp"
#include "plan/plan.hpp"
#include "plan/validate.hpp"
#include "schedule/one_f_one_b.hpp"
#include "schedule/pattern.hpp"
#include "schedule/stage.hpp"
#include "solver/model.hpp"

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace madpipe::testing {

// One-layer stage `id` (layer `id`) on GPU `gpu`.
schedule::Stage hand_stage(int id, int gpu, double forward_ms, double backward_ms,
                           std::int64_t output_bytes = 0, std::int64_t stored_bytes = 1);

// Stage s = layer s on GPU s, forward f[s], backward b[s], 1 stored byte, no activations.
std::vector<schedule::Stage> chain_stages(const std::vector<double>& f,
                                          const std::vector<double>& b);

// `profile` cut randomly into `num_stages` stages, on GPU s if `contiguous`, else random < `gpus`.
std::vector<schedule::Stage> random_stages(std::mt19937& rng, const Profile& profile,
                                           int num_stages, int gpus, bool contiguous);

// random_stages() of a random_chain(rng, layers).
std::vector<schedule::Stage> random_stages(std::mt19937& rng, int layers, int num_stages, int gpus,
                                           bool contiguous);

// Work of the busiest resource (GPU or link) for one micro-batch.
double busiest_load(const std::vector<schedule::Stage>& stages, const Platform& platform);

// Sum of the durations of one micro-batch's ops, transfers included.
double chain_length(const std::vector<schedule::Stage>& stages, const Platform& platform);

// Largest load_ms() of `resources` (0 if none).
double max_load(const std::vector<schedule::PipelineResource>& resources);

// Sum of load_ms() over `resources`.
double sum_of_loads(const std::vector<schedule::PipelineResource>& resources);

// Micro-batch 0's ops, each starting when the one before it ends.
std::vector<schedule::Op> asap_chain(const std::vector<schedule::Stage>& stages,
                                     const Platform& platform);

// Plan "hand" of `stages` running `pattern` on `platform`, predicted fields filled (bound 0).
plan::Plan plan_of(const std::vector<schedule::Stage>& stages, const Platform& platform,
                   const schedule::Pattern& pattern);

// Plan of `profile` on `gpus` repeating asap_chain() every `period_ms` (0: its length), bound T/2.
plan::Plan chain_plan(const Profile& profile, const std::vector<int>& first_layers,
                      const std::vector<int>& gpus, const Platform& platform, double period_ms);

// chain_plan() of two_layer_profile() on small_platform(2) at period 4 (two stages, two GPUs).
plan::Plan pipelined_plan();

// `plan` as a k-periodic pattern: each op k times, one period of `plan` apart.
plan::Plan repeated(const plan::Plan& plan, int k);

// Index in plan.pattern.ops of the op `kind` of `stage` after `skip` others; a failure if none.
std::size_t find_op(const plan::Plan& plan, schedule::OpKind kind, int stage, std::size_t skip = 0);

// One "field: problem" line per violation.
std::string describe(const std::vector<plan::Violation>& violations);

// Names of the bounds, integralities and rows of `model` that `values` violates (tolerance
// relative to each row's terms).
std::vector<std::string> violated_rows(const solver::Model& model,
                                       const std::vector<double>& values);

// The model's MIP start as one value per variable (0 where none is set).
std::vector<double> hint_values(const solver::Model& model);

}  // namespace madpipe::testing
