#pragma once

#include "core/platform.hpp"
#include "schedule/memory.hpp"
#include "schedule/pattern.hpp"

#include <cstdint>
#include <limits>
#include <vector>

namespace madpipe::schedule {

// The k-periodic variant of a 1-periodic pattern (thesis ch. 5.2.2): unroll it k + 1 times and
// drop every (k+1)-th micro-batch. The result has period (k+1) T, processes k micro-batches per
// period and keeps fewer micro-batches in flight on the stages that had k + 1 or more. For k = 1
// the input is returned unchanged.
Pattern drop_every_kth_plus_one(const Pattern& one_periodic, int k);

// Exact per-GPU memory of drop_every_kth_plus_one(one_periodic, k), evaluate_memory's numbers,
// computed from the 1-periodic pattern without building the variant (k + 1 times its ops). Stops
// at the first GPU whose total exceeds `stop_above` (the GPUs after it are left at zero).
std::vector<GpuMemory> evaluate_k_variant_memory(
    const std::vector<Stage>& stages, const Pattern& one_periodic, int k, const Platform& platform,
    std::int64_t stop_above = std::numeric_limits<std::int64_t>::max());
// fits_memory(stages, drop_every_kth_plus_one(one_periodic, k), platform), without building it.
bool k_variant_fits(const std::vector<Stage>& stages, const Pattern& one_periodic, int k,
                    const Platform& platform);

}  // namespace madpipe::schedule
