#pragma once

// The placements of today's pipeline schedules, as allocations: Megatron's interleaved 1F1B
// (loop placement) and zero-bubble's ZB-V (V placement). They cut the chain into chunks of
// balanced compute and place the chunks on GPUs in a fixed pattern, whatever the memory; the
// planner then schedules and checks them like any allocation.

#include "core/chain.hpp"
#include "core/platform.hpp"
#include "partition/allocation.hpp"
#include "partition/planner.hpp"

#include <cstdint>
#include <optional>
#include <vector>

namespace madpipe::partition {

// First layer of each of `chunks` contiguous ranges of the chain whose largest compute (F + B)
// or transfer across a cut (link_ms) is the smallest possible; nullopt when the chain has fewer
// layers than chunks.
std::optional<std::vector<int>> balanced_cuts(const ChainCosts& costs, const Platform& platform,
                                              int chunks);

// Loop placement of interleaved 1F1B: `virtual_stages` * P chunks, chunk c on GPU c mod P (each
// GPU holds virtual_stages chunks spread along the chain).
std::optional<Allocation> interleaved_allocation(const ChainCosts& costs, const Platform& platform,
                                                 int virtual_stages);

// V placement of ZB-V: 2P chunks, chunk c on GPU c for c < P and on GPU 2P - 1 - c after (GPU 0
// holds the first and the last chunk).
std::optional<Allocation> v_shape_allocation(const ChainCosts& costs, const Platform& platform);

// The placement of an algorithm that uses one (uses_fixed_placement): interleaved's loop with two
// virtual stages per GPU, zb-v's V; nullopt when the chain has fewer layers than chunks.
std::optional<Allocation> fixed_placement(const ChainCosts& costs, const Platform& platform,
                                          Algorithm algorithm);

// Memory per GPU of the allocation's least-memory pattern (every stage keeps one micro-batch in
// flight: the modulo pattern at a period as long as a micro-batch's whole chain), which the
// schedule search finds whenever it fits; -1 when that pattern does not exist.
std::int64_t least_memory(const ChainCosts& costs, const Platform& platform,
                          const Allocation& allocation);

}  // namespace madpipe::partition
