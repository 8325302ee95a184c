#pragma once

#include <functional>
#include <optional>

#include "core/chain.hpp"
#include "core/platform.hpp"
#include "partition/allocation.hpp"

namespace madpipe::partition {

// Contiguous partition minimising the largest stage or link load, where the stage that has q
// stages from it to the end of the chain (itself included) keeps in_flight(q) micro-batches:
// q for 1F1B (PipeDream-Flush), N for GPipe. Uses at most platform.gpus stages, GPU s for
// stage s. nullopt when no partition fits in memory.
std::optional<Allocation> fixed_in_flight_partition(const ChainCosts& costs,
                                                    const Platform& platform,
                                                    const std::function<int(int)>& in_flight);

}  // namespace madpipe::partition
