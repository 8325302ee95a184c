#pragma once

#include "runtime/config/training_settings.hpp"

namespace madpipe::runtime {

// The learning rate of step `step` (1 .. settings.steps), nanoGPT's schedule: a linear warm-up
// over the first W = warmup_steps steps (step s <= W: lr * s / (W + 1)), then from the peak
// `learning_rate` at step W + 1 down to `min_lr` (unset: 0) at the last step, by a half cosine
// or a line, or the peak for ever (constant). A pure function of the step: a resumed run
// continues the schedule where it stopped.
double learning_rate_at(const TrainingSettings& settings, int step);

// Throws Error{InvalidInput} naming the option when the schedule cannot run: a warm-up as long as
// the run or longer, --min-lr above --learning-rate, below 0, or without a decaying schedule.
void check_learning_rate_schedule(const TrainingSettings& settings);

}  // namespace madpipe::runtime
