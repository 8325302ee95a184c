#pragma once

#include "core/chain.hpp"
#include "core/platform.hpp"
#include "partition/allocation.hpp"
#include "partition/planner.hpp"

#include <functional>
#include <string>
#include <vector>

namespace madpipe::partition {

// Allocations that keep a tied weight on one GPU: for each group of tied layers, the tail of the
// chain from its last layer on (a tied output head and the loss) runs as a stage of its own on the
// GPU of the group's first layer (the embedding's), the rest of the chain split by the contiguous
// DP as if that layer computed the tail too. The planner schedules them with the others and keeps
// whichever is faster: co-placed (no exchange, one copy of the weight, more work on one GPU) or
// apart. None for a profile without tied weights or a group whose first layer is its last.
std::vector<Allocation> tied_together_allocations(const ChainCosts& costs, const Platform& platform,
                                                  const Discretization& discretization,
                                                  const std::function<bool()>& out_of_time = {});

}  // namespace madpipe::partition
