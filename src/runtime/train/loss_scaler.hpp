#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace madpipe::runtime {

// Dynamic loss scaling (--precision fp16), as torch.amp.GradScaler does it: the backward starts
// from the loss times the scale, so that small gradients stay representable in fp16, and the fp32
// master gradients are divided by it again. A step whose gradients overflowed (are not finite
// while its loss is) is skipped and the scale halves; after `growth_interval` steps in a row
// without overflow it doubles. Every rank runs the same scaler on the same agreed health, so all
// hold the same scale.
class LossScaler {
 public:
  LossScaler(double initial_scale, int growth_interval);

  double scale() const noexcept { return *scale_; }
  // The scale as the loss's gradient hook reads it (scale_loss_gradient): it follows update().
  std::shared_ptr<const double> shared_scale() const noexcept { return scale_; }
  // After a step's health is agreed: whether its gradients overflowed. Returns true when the
  // step must be skipped (they did: the scale halves), and grows the scale after
  // growth_interval good steps.
  bool update(bool gradients_overflowed);
  int skipped_steps() const noexcept { return skipped_steps_; }

  // What a checkpoint keeps to resume exactly: {"loss_scale", "good_steps", "skipped_steps"}.
  nlohmann::json state() const;
  // Restores state(); an empty object (a checkpoint without it) keeps the initial scale.
  // Throws Error{InvalidInput} naming `source` when a field is missing or not a number.
  void restore(const nlohmann::json& state, const std::string& source);

 private:
  std::shared_ptr<double> scale_;
  int growth_interval_;
  int good_steps_ = 0;
  int skipped_steps_ = 0;
};

}  // namespace madpipe::runtime
