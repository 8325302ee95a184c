#pragma once

#include "core/platform.hpp"
#include "schedule/pattern.hpp"
#include "schedule/stage.hpp"

#include <optional>
#include <vector>

namespace madpipe::schedule {

// Adds the W ops of the split stages (Stage::splits_backward) to a pattern of their F, B and
// transfer ops: W of the micro-batches of each B op at the earliest time after that B ends at
// which the stage's GPU is free modulo the period. W ops are placed after every other op, in the
// order their B ops end, so that they fill the time F and B leave idle. Returns false when some W
// finds no room (the pattern is then left incomplete). Without split stages the pattern is not
// touched.
bool place_weight_ops(Pattern& pattern, const std::vector<Stage>& stages, const Platform& platform);

// The pattern with its W ops placed, or nullopt when they do not fit.
std::optional<Pattern> with_weight_ops(Pattern pattern, const std::vector<Stage>& stages,
                                       const Platform& platform);

}  // namespace madpipe::schedule
