#pragma once

#include "core/platform.hpp"
#include "schedule/pattern.hpp"
#include "schedule/stage.hpp"

namespace madpipe::schedule {

// GPipe (fill-drain) for a contiguous allocation: the forwards of N micro-batches flow through
// the pipeline, then their backwards, then a flush. As a pattern: k = N, one period per step,
// every stage keeps N micro-batches in flight.
Pattern gpipe(const std::vector<Stage>& stages, const Platform& platform, int micro_batches);

}  // namespace madpipe::schedule
