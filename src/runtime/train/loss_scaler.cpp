#include "runtime/train/loss_scaler.hpp"

#include "core/error.hpp"
#include "core/units.hpp"

#include <cmath>

namespace {
// GradScaler's defaults: halve on an overflow, double after the growth interval.
constexpr double kBackoffFactor = 0.5;
constexpr double kGrowthFactor = 2.0;
// Below fp16's smallest subnormal (2^-24) a scale cannot undo an overflow.
constexpr double kSmallestScale = 1.0 / (1 << 24);
}  // namespace

madpipe::runtime::LossScaler::LossScaler(double initial_scale, int growth_interval)
    : scale_(std::make_shared<double>(initial_scale)), growth_interval_(growth_interval) {}

bool madpipe::runtime::LossScaler::update(bool gradients_overflowed) {
  if (gradients_overflowed) {
    if (*scale_ * kBackoffFactor < kSmallestScale)
      throw Error(ErrorKind::Runtime, "", "loss-scale",
                  "the gradients are not finite at every loss scale down to " +
                      format_number(*scale_) +
                      ": not an fp16 overflow but a NaN or an infinity in the model (try "
                      "--precision bf16 or fp32 to find it)");
    *scale_ *= kBackoffFactor;
    good_steps_ = 0;
    ++skipped_steps_;
    return true;
  }
  if (++good_steps_ == growth_interval_) {
    const double grown = *scale_ * kGrowthFactor;
    if (std::isfinite(grown)) *scale_ = grown;
    good_steps_ = 0;
  }
  return false;
}

nlohmann::json madpipe::runtime::LossScaler::state() const {
  return {{"loss_scale", *scale_}, {"good_steps", good_steps_}, {"skipped_steps", skipped_steps_}};
}

void madpipe::runtime::LossScaler::restore(const nlohmann::json& state, const std::string& source) {
  if (state.is_null() || state.empty()) return;
  auto number = [&](const char* key) {
    if (!state.contains(key) || !state[key].is_number())
      throw Error(ErrorKind::InvalidInput, source, std::string("/state/") + key,
                  "the loss scaler's state needs a number here");
    return state[key].get<double>();
  };
  const double scale = number("loss_scale");
  if (!(scale > 0) || !std::isfinite(scale))
    throw Error(ErrorKind::InvalidInput, source, "/state/loss_scale",
                "must be a finite number > 0");
  *scale_ = scale;
  good_steps_ = static_cast<int>(number("good_steps"));
  skipped_steps_ = static_cast<int>(number("skipped_steps"));
}
