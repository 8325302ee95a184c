#include "runtime/config/learning_rate.hpp"

#include "core/error.hpp"
#include "core/units.hpp"

#include <algorithm>
#include <cmath>
#include <string>

double madpipe::runtime::learning_rate_at(const TrainingSettings& t, int step) {
  const double peak = t.learning_rate;
  const int warmup = t.warmup_steps;
  if (step <= warmup) return peak * step / (warmup + 1);
  if (t.lr_schedule == LrSchedule::Constant) return peak;
  const int decay_steps = t.steps - warmup - 1;  // steps after the peak's
  const double progress =
      decay_steps <= 0 ? 0.0 : std::min(1.0, static_cast<double>(step - warmup - 1) / decay_steps);
  const double low = t.min_lr.value_or(0.0);
  const double kept = t.lr_schedule == LrSchedule::Cosine
                          ? 0.5 * (1 + std::cos(3.14159265358979323846 * progress))
                          : 1 - progress;
  return low + kept * (peak - low);
}

void madpipe::runtime::check_learning_rate_schedule(const TrainingSettings& t) {
  auto invalid = [](const std::string& option, const std::string& problem) {
    throw Error(ErrorKind::InvalidInput, "", option, problem);
  };
  if (!(t.learning_rate > 0))
    invalid("learning-rate", "must be > 0, got " + format_number(t.learning_rate));
  if (t.warmup_steps < 0)
    invalid("warmup-steps", "must be >= 0, got " + std::to_string(t.warmup_steps));
  if (t.warmup_steps >= t.steps)
    invalid("warmup-steps", "a warm-up of " + std::to_string(t.warmup_steps) +
                                " steps leaves no step at the peak learning rate (--steps " +
                                std::to_string(t.steps) + "): make it shorter than the run");
  if (!t.min_lr) return;
  if (t.lr_schedule == LrSchedule::Constant)
    invalid("min-lr",
            "--min-lr is where --lr-schedule cosine or linear ends; the constant schedule has no "
            "decay (name a schedule, or leave --min-lr out)");
  if (!(*t.min_lr >= 0 && *t.min_lr <= t.learning_rate))
    invalid("min-lr", "must lie in [0, --learning-rate " + format_number(t.learning_rate) +
                          "], got " + format_number(*t.min_lr));
}
