#pragma once

#include <optional>
#include <vector>

#include "core/platform.hpp"
#include "schedule/pattern.hpp"
#include "schedule/stage.hpp"

namespace madpipe::schedule {

// Modulo list scheduling of any allocation (several stages per GPU allowed) at period T: the ops
// of one micro-batch are placed in dependency order, each at the earliest time after its
// predecessor where its GPU or link is free modulo T. Returns a valid 1-periodic pattern, or
// nullopt when some op finds no free slot.
std::optional<Pattern> modulo_schedule(const std::vector<Stage>& stages, const Platform& platform,
                                       double period_ms);

}  // namespace madpipe::schedule
