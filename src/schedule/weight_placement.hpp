#pragma once

#include "core/platform.hpp"
#include "schedule/pattern.hpp"
#include "schedule/stage.hpp"

#include <optional>
#include <vector>

namespace madpipe::schedule {

// The pattern of F, B and transfer ops with the W ops of the split stages (Stage::splits_backward)
// added: W of the micro-batches of each B op at the earliest time after that B ends at which the
// stage's GPU is free modulo the period. W ops are placed after every other op, in the order their
// B ops end, so that they fill the time F and B leave idle. nullopt when some W finds no room.
// Without split stages the pattern is returned as it is.
std::optional<Pattern> with_weight_ops(Pattern pattern, const std::vector<Stage>& stages,
                                       const Platform& platform);

}  // namespace madpipe::schedule
