#pragma once

#include "core/names.hpp"
#include "core/weight_memory.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace madpipe::runtime {

// How steps follow each other (--mode).
enum class TrainingMode {
  Sync,               // each step's gradients, then a flush
  TwoWeightVersions,  // 2BW: no flush, two weight versions per stage
};
inline constexpr Named<TrainingMode> kTrainingModeNames[] = {
    {TrainingMode::Sync, "sync"}, {TrainingMode::TwoWeightVersions, "2bw"}};

// Weight-sized copies per stage that 2BW holds beyond synchronous training's (weights,
// gradients, optimizer state): the second weight version, its gradient and the newest version.
inline constexpr int kTwoWeightVersionsExtraCopies = 3;

// --precision and --optimizer (core/weight_memory.hpp: what they hold per parameter).
using madpipe::kOptimizerNames;
using madpipe::kPrecisionNames;
using madpipe::OptimizerKind;
using madpipe::Precision;

// How the learning rate moves over the steps after the warm-up (--lr-schedule).
enum class LrSchedule { Constant, Cosine, Linear };
inline constexpr Named<LrSchedule> kLrScheduleNames[] = {{LrSchedule::Constant, "constant"},
                                                         {LrSchedule::Cosine, "cosine"},
                                                         {LrSchedule::Linear, "linear"}};

// What --data holds: text (the gpt's characters), token ids as little-endian unsigned integers
// of 2 or 4 bytes (nanoGPT's train.bin), or the dict {"inputs": X, "targets": Y} of torch.save.
enum class DataFormat { Text, TokensU16, TokensU32, Tensors };
inline constexpr Named<DataFormat> kDataFormatNames[] = {{DataFormat::Text, "text"},
                                                         {DataFormat::TokensU16, "tokens-u16"},
                                                         {DataFormat::TokensU32, "tokens-u32"},
                                                         {DataFormat::Tensors, "tensors"}};

// [training]: data, steps and the optimizer.
struct TrainingSettings {
  std::string data = "/usr/share/common-licenses";  // text corpus or token file (gpt)
  DataFormat data_format = DataFormat::Text;
  std::string validation_data;  // token files: the validation tokens (empty: data's last tenth)
  TrainingMode mode = TrainingMode::Sync;
  int steps = 100;
  int micro_batches = 8;  // per step
  int micro_batch_size = 8;
  Precision precision = Precision::Fp32;
  OptimizerKind optimizer = OptimizerKind::AdamW;
  double learning_rate = 1e-3;  // the peak: after the warm-up, before the decay
  LrSchedule lr_schedule = LrSchedule::Constant;
  int warmup_steps = 0;
  std::optional<double> min_lr;          // cosine, linear: the last step's (unset: 0)
  double momentum = 0.9;                 // sgd
  double weight_decay = 0.0;             // parameters of two or more dimensions only
  std::optional<double> clip_grad_norm;  // the global gradient norm's bound (unset: no clipping)
  // fp16's dynamic loss scaling: the first step's scale, and the steps without overflow after
  // which it doubles (unset: kDefaultLossScale, kDefaultLossScaleGrowthInterval).
  std::optional<double> loss_scale;
  std::optional<int> loss_scale_growth_interval;
  std::uint64_t seed = 1;
  int eval_every = 10;  // steps between validation losses; 0: never
  int eval_micro_batches = 8;
  // Each step as a plain autograd loop over the unsplit model (run_unsplit), not the plan's
  // program: one process, the reference that pipelined runs are compared with.
  bool plain_loop = false;
};

// torch.amp.GradScaler's defaults.
inline constexpr double kDefaultLossScale = 65536;
inline constexpr int kDefaultLossScaleGrowthInterval = 2000;

// Weight-sized copies a run holds per weight, in units of the layers' weights (the profile's
// weight bytes, measured in the run's precision): weight_memory's for the precision and the
// optimizer, plus 2BW's extra copies.
inline WeightMemory held_weight_memory(const TrainingSettings& t) {
  return weight_memory(t.precision, t.optimizer, t.momentum != 0);
}
inline int held_weight_copies(const TrainingSettings& t) {
  int copies = held_weight_memory(t).copies;
  if (t.mode == TrainingMode::TwoWeightVersions) copies += kTwoWeightVersionsExtraCopies;
  return copies;
}
// "20 bytes per parameter: bf16 weights 2 + gradients 2 + ...", 2BW's copies left out.
inline std::string weight_bytes_text(const TrainingSettings& t) {
  const WeightMemory memory = held_weight_memory(t);
  return std::to_string(memory.bytes_per_parameter) + " bytes per parameter: " + memory.breakdown;
}

}  // namespace madpipe::runtime
