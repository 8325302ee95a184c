#pragma once

#include "core/platform.hpp"
#include "schedule/stage.hpp"

#include <vector>

namespace madpipe::schedule {

// A lower bound on the period per micro-batch of every pattern of `stages` whose memory fits
// the platform (evaluate_memory's model), +inf where the static memory of some GPU does not fit.
// A micro-batch holds a stage's stored bytes from the start of its F to the end of its B, at
// least the ops of its round trip back to back; at period T the stage keeps on average round
// trip / T of them in flight (Little's law), and a GPU's peak is at least the sum over its
// stages of that average times the stored bytes, which must fit beside its static memory.
double memory_period_bound_ms(const std::vector<Stage>& stages, const Platform& platform);

}  // namespace madpipe::schedule
