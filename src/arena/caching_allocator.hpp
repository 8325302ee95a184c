#pragma once

#include "arena/address_plan.hpp"

#include <cstdint>
#include <vector>

namespace madpipe::arena {

// What PyTorch's CUDA caching allocator would reserve for a sequence of buffers (the baseline a
// static arena is compared with: docs/planner.md, "Static memory plans"). A model of its policy
// (c10/cuda/CUDACachingAllocator.cpp, default settings): sizes rounded up to 512 B; requests up to
// 1 MiB come from 2 MiB segments of a small pool, larger ones from a large pool whose new
// segments are 20 MiB for requests under 10 MiB and the request rounded up to 2 MiB otherwise;
// best fit among the cached free blocks of the pool (the smallest that fits, then the lowest
// address); a block larger than needed is split when the rest is at least 512 B (small pool) or
// more than 1 MiB (large pool); freed blocks merge with free neighbours of their segment;
// segments are never released. One stream, no fragmentation limit (max_split_size unset).
struct CachingAllocatorPeak {
  std::int64_t reserved_bytes = 0;   // peak of the segments' total: what the device holds
  std::int64_t allocated_bytes = 0;  // peak of the live rounded requests
  int segments = 0;                  // at the end
};

// Replays `buffers` in timestep order: at each timestep the buffers whose lifetime starts there
// are allocated (in index order), then those whose lifetime ended at the timestep before are
// freed before the next timestep's allocations. Wrapping buffers (first > last) are refused
// with Error{InvalidInput}.
CachingAllocatorPeak simulate_caching_allocator(const std::vector<Buffer>& buffers);

}  // namespace madpipe::arena
