#pragma once

#include "core/platform.hpp"
#include "schedule/pattern.hpp"
#include "schedule/stage.hpp"

#include <optional>
#include <vector>

namespace madpipe::schedule {

enum class ModuloDirection {
  AsSoonAsPossible,  // ops in dependency order, each as early as possible
  AsLateAsPossible,  // ops in reverse order from the end of B0, each as late as possible
};

// Modulo list scheduling of any allocation (several stages per GPU allowed) at period T: the ops
// of one micro-batch are placed one by one, each where its GPU or link is free modulo T and as
// close as possible to the op it depends on (or that depends on it). Returns a valid 1-periodic
// pattern, or nullopt when some op finds no free slot.
std::optional<Pattern> modulo_schedule(
    const std::vector<Stage>& stages, const Platform& platform, double period_ms,
    ModuloDirection direction = ModuloDirection::AsSoonAsPossible);

// Modulo list scheduling guided by 1F1B*: each op, in dependency order, starts at the earliest
// free time after both its predecessor and its 1F1B*(T) time (groups built as if every stage
// had a GPU of its own). On a contiguous allocation this is 1F1B*(T) itself; on a
// non-contiguous one, conflicts on shared GPUs push ops later.
std::optional<Pattern> guided_modulo_schedule(const std::vector<Stage>& stages,
                                              const Platform& platform, double period_ms);

}  // namespace madpipe::schedule
