// Run under mpirun -np 1..4 (one process suffices): the learning-rate schedules, their checks,
// and weight decay's rule (parameters of two or more dimensions only).

#include "core/error.hpp"
#include "runtime/config/learning_rate.hpp"
#include "runtime/config/train_config.hpp"
#include "runtime/train/optimizer.hpp"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace mr = madpipe::runtime;

namespace {

mr::TrainingSettings schedule(mr::LrSchedule kind, int steps, int warmup,
                              std::optional<double> min_lr = std::nullopt) {
  mr::TrainingSettings t;
  t.learning_rate = 1.0;
  t.lr_schedule = kind;
  t.steps = steps;
  t.warmup_steps = warmup;
  t.min_lr = min_lr;
  return t;
}

std::string refusal(const mr::TrainingSettings& t) {
  try {
    mr::check_learning_rate_schedule(t);
  } catch (const madpipe::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(LearningRate, WarmsUpLinearlyThenHoldsThePeak) {
  const mr::TrainingSettings t = schedule(mr::LrSchedule::Constant, 10, 3);
  EXPECT_DOUBLE_EQ(mr::learning_rate_at(t, 1), 0.25);  // nanoGPT: lr * (it + 1) / (warmup + 1)
  EXPECT_DOUBLE_EQ(mr::learning_rate_at(t, 3), 0.75);
  for (int step = 4; step <= 10; ++step) EXPECT_DOUBLE_EQ(mr::learning_rate_at(t, step), 1.0);
  EXPECT_DOUBLE_EQ(mr::learning_rate_at(schedule(mr::LrSchedule::Constant, 10, 0), 1), 1.0);
}

TEST(LearningRate, CosineAndLinearDecayFromThePeakToMinLrAtTheLastStep) {
  const mr::TrainingSettings cosine = schedule(mr::LrSchedule::Cosine, 11, 2, 0.1);
  EXPECT_DOUBLE_EQ(mr::learning_rate_at(cosine, 2), 2.0 / 3);
  EXPECT_DOUBLE_EQ(mr::learning_rate_at(cosine, 3), 1.0);  // the peak, right after the warm-up
  EXPECT_NEAR(mr::learning_rate_at(cosine, 7), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.5)), 1e-15);
  EXPECT_DOUBLE_EQ(mr::learning_rate_at(cosine, 11), 0.1);
  const mr::TrainingSettings linear = schedule(mr::LrSchedule::Linear, 11, 2);
  EXPECT_DOUBLE_EQ(mr::learning_rate_at(linear, 3), 1.0);
  EXPECT_DOUBLE_EQ(mr::learning_rate_at(linear, 7), 0.5);  // min-lr unset: 0
  EXPECT_DOUBLE_EQ(mr::learning_rate_at(linear, 11), 0.0);
  for (int step = 4; step <= 11; ++step)
    EXPECT_LT(mr::learning_rate_at(cosine, step), mr::learning_rate_at(cosine, step - 1));
}

TEST(LearningRate, RefusesSchedulesThatCannotRun) {
  EXPECT_EQ(refusal(schedule(mr::LrSchedule::Cosine, 10, 10)),
            "warmup-steps: a warm-up of 10 steps leaves no step at the peak learning rate "
            "(--steps 10): make it shorter than the run");
  EXPECT_NE(refusal(schedule(mr::LrSchedule::Constant, 10, 2, 0.1))
                .find("min-lr: --min-lr is where --lr-schedule cosine or linear ends"),
            std::string::npos);
  EXPECT_NE(refusal(schedule(mr::LrSchedule::Cosine, 10, 2, 2.0))
                .find("min-lr: must lie in [0, --learning-rate"),
            std::string::npos);
  EXPECT_EQ(refusal(schedule(mr::LrSchedule::Cosine, 10, 9, 0.5)), "");
}

TEST(LearningRate, ClippingAndItsModeAreChecked) {
  mr::TrainConfig c;
  c.clip_grad_norm = 0.0;
  try {
    mr::check_train_config(c);
    FAIL() << "a clip of 0 must be refused";
  } catch (const madpipe::Error& e) {
    EXPECT_NE(std::string(e.what()).find("clip-grad-norm: must be > 0"), std::string::npos)
        << e.what();
  }
  c.clip_grad_norm = 1.0;
  c.mode = mr::TrainingMode::TwoWeightVersions;
  try {
    mr::check_train_config(c);
    FAIL() << "clipping in 2bw must be refused";
  } catch (const madpipe::Error& e) {
    EXPECT_NE(std::string(e.what()).find("global gradient clipping needs --mode sync"),
              std::string::npos)
        << e.what();
  }
}

TEST(WeightDecay, SkipsBiasesAndNormScalesAndFollowsTheLearningRate) {
  torch::manual_seed(3);
  std::vector<torch::Tensor> parameters = {torch::randn({4, 3}).requires_grad_(true),
                                           torch::randn({3}).requires_grad_(true)};
  const std::vector<torch::Tensor> before = {parameters[0].detach().clone(),
                                             parameters[1].detach().clone()};
  mr::TrainingSettings t;
  t.optimizer = mr::OptimizerKind::Sgd;
  t.momentum = 0;
  t.learning_rate = 0.5;
  t.weight_decay = 0.1;
  const auto optimizer = mr::make_optimizer(t, parameters);
  mr::set_learning_rate(*optimizer, 0.2);  // the schedule's value replaces --learning-rate
  for (torch::Tensor& p : parameters) p.mutable_grad() = torch::zeros_like(p);
  optimizer->step();
  EXPECT_TRUE(torch::allclose(parameters[0], before[0] * (1 - 0.2 * 0.1)));
  EXPECT_TRUE(torch::equal(parameters[1], before[1]));
}
