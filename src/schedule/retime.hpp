#pragma once

#include "core/platform.hpp"
#include "schedule/pattern.hpp"
#include "schedule/stage.hpp"

#include <optional>
#include <vector>

namespace madpipe::schedule {

// Shortest period that keeps the cyclic order of the ops on every GPU and link and every shift:
// the maximum cycle ratio of the pattern's constraint graph. The memory of the result is that of
// the input (the number of micro-batches in flight only depends on order and shifts), its period
// is never larger. Returns nullopt if the input pattern itself is not consistent.
std::optional<Pattern> retime(const Pattern& pattern, const std::vector<Stage>& stages,
                              const Platform& platform);

}  // namespace madpipe::schedule
