#pragma once

#include "core/chain.hpp"
#include "core/platform.hpp"
#include "partition/allocation.hpp"
#include "partition/stage_options.hpp"

#include <functional>
#include <optional>

namespace madpipe::partition {

// Contiguous partition minimising the largest stage or link load, where the stage that has q
// stages from it to the end of the chain (itself included) keeps in_flight(q) micro-batches:
// q for 1F1B (PipeDream-Flush), N for GPipe. Uses at most platform.gpus stages, GPU s for
// stage s. nullopt when no partition fits in memory. With `remat`, a stage that does not fit runs
// the fastest rematerialization option that does.
std::optional<Allocation> fixed_in_flight_partition(const ChainCosts& costs,
                                                    const Platform& platform,
                                                    const std::function<int(int)>& in_flight,
                                                    StageOptions* remat = nullptr);

}  // namespace madpipe::partition
