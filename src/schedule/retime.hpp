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

// The same starts, with every op of a micro-batch in the earliest period its dependencies allow
// (the one after its predecessor ends, or the same when it starts later): no micro-batch waits
// a whole period it need not, so no stage keeps more in flight and the period still holds. A
// schedule solver that only minimizes the period may leave such waits. k-periodic patterns
// (k > 1) and patterns that miss an op of the chain are returned unchanged.
Pattern with_earliest_shifts(const Pattern& pattern, const std::vector<Stage>& stages,
                             const Platform& platform);

}  // namespace madpipe::schedule
