#include "runtime/config/train_config.hpp"

#include "core/error.hpp"
#include "core/units.hpp"
#include "runtime/config/learning_rate.hpp"

#include <cmath>
#include <string>

int madpipe::runtime::pipeline_ranks(const PlanningSettings& c) {
  if (c.replicas < 1 || c.platform.gpus % c.replicas != 0)
    throw Error(ErrorKind::InvalidInput, "", "replicas",
                "--replicas " + std::to_string(c.replicas) + " does not divide --gpus " +
                    std::to_string(c.platform.gpus) + " into equal pipelines");
  return c.platform.gpus / c.replicas;
}

void madpipe::runtime::check_train_config(const TrainConfig& c) {
  auto invalid = [](const std::string& option, const std::string& problem) {
    throw Error(ErrorKind::InvalidInput, "", option, problem);
  };
  check_platform(c.platform);
  if (!(c.transfer_timeout >= 0))
    invalid("transfer-timeout",
            "must be a number of seconds >= 0, got " + std::to_string(c.transfer_timeout));
  pipeline_ranks(c);  // --replicas divides --gpus
  if (c.replicas > 1 && c.mode != TrainingMode::Sync)
    invalid("replicas",
            "data-parallel replicas need --mode sync (2bw has no flush at which to average "
            "gradients)");
  if (c.replan_after > 0 && c.mode != TrainingMode::Sync)
    invalid("replan-after",
            "re-planning needs --mode sync (2bw never stops the pipeline to switch plans)");
  if (c.on_nan == OnNonFinite::Skip && c.mode != TrainingMode::Sync)
    invalid("on-nan",
            "--on-nan skip needs --mode sync (2bw applies each update within the pipeline, so it "
            "cannot skip one; it stops at a non-finite loss)");
  if (c.plain_loop && (c.platform.gpus != 1 || c.mode != TrainingMode::Sync || c.replan_after > 0))
    invalid("plain-loop",
            "the plain loop is one process training synchronously (--gpus 1, --mode sync, no "
            "--replan-after)");
  if (c.replan_after > 0 && c.replan_after >= c.steps)
    invalid("replan-after", "--replan-after " + std::to_string(c.replan_after) +
                                " leaves no step to run with a new plan (--steps " +
                                std::to_string(c.steps) + ")");
  const bool script = c.model == ModelKind::Script;
  if (script && c.script.empty())
    invalid("script", "--model script needs --script FILE (a module saved by torch.jit.save)");
  if (!script && !c.script.empty())
    invalid("script", std::string("--script is the file of --model script, not of the built-in ") +
                          name_of(kModelKindNames, c.model));
  if (!script && c.loss)
    invalid("loss", std::string("--loss applies to --model script; the built-in ") +
                        name_of(kModelKindNames, c.model) + " has its own loss");
  const bool tokens =
      c.data_format == DataFormat::TokensU16 || c.data_format == DataFormat::TokensU32;
  if (tokens && c.model != ModelKind::Gpt && !script)
    invalid("data-format", std::string("--data-format ") +
                               name_of(kDataFormatNames, c.data_format) +
                               " needs --model gpt or script (token ids are a language model's "
                               "input)");
  if (script && tokens && c.loss == LossKind::Mse)
    invalid("loss",
            "token files give class ids (the next tokens) as targets: --loss "
            "cross-entropy");
  if (script && c.data_format == DataFormat::Text)
    invalid("data-format",
            "--model script needs its data: --data-format tokens-u16, tokens-u32 (windows of "
            "--context tokens) or tensors (torch.save of {\"inputs\": X, \"targets\": Y})");
  if (!c.validation_data.empty() && c.data_format == DataFormat::Text)
    invalid("validation-data",
            "--validation-data needs --data-format tokens-u16, tokens-u32 or tensors (text "
            "data holds out its last tenth)");
  if (c.vocab < 0) invalid("vocab", "must be >= 0, got " + std::to_string(c.vocab));
  if (c.vocab > 0 && ((c.model != ModelKind::Gpt && !script) || c.data_format == DataFormat::Text))
    invalid("vocab",
            "--vocab is the embedding (of the gpt or a script model) with token ids from files "
            "(--data-format tokens-u16, tokens-u32 or tensors); text data's vocabulary is its "
            "characters");
  if (!(c.replan_min_gain >= 0 && c.replan_min_gain < 1))
    invalid("replan-min-gain",
            "must be a fraction in [0, 1), got " + std::to_string(c.replan_min_gain));
  check_learning_rate_schedule(c);
  if (c.precision != Precision::Fp16 && (c.loss_scale || c.loss_scale_growth_interval))
    invalid(c.loss_scale ? "loss-scale" : "loss-scale-growth-interval",
            "loss scaling is fp16's (--precision fp16); bf16 and fp32 need none");
  if (c.loss_scale && !(*c.loss_scale > 0 && std::isfinite(*c.loss_scale)))
    invalid("loss-scale", "must be a finite number > 0, got " + format_number(*c.loss_scale));
  if (c.loss_scale_growth_interval && *c.loss_scale_growth_interval < 1)
    invalid("loss-scale-growth-interval",
            "must be >= 1, got " + std::to_string(*c.loss_scale_growth_interval));
  if (c.precision != Precision::Fp32 && c.mode != TrainingMode::Sync)
    invalid("precision", std::string("--precision ") + name_of(kPrecisionNames, c.precision) +
                             " trains in --mode sync only (2bw keeps no fp32 master weights yet)");
  if (c.precision != Precision::Fp32 && c.replan_after > 0)
    invalid("precision", std::string("--precision ") + name_of(kPrecisionNames, c.precision) +
                             " does not re-plan yet (re-planning moves layers without their "
                             "fp32 master weights): leave --replan-after out");
  if (c.weight_decay < 0)
    invalid("weight-decay", "must be >= 0, got " + format_number(c.weight_decay));
  if (c.clip_grad_norm && !(*c.clip_grad_norm > 0))
    invalid("clip-grad-norm", "must be > 0 (the largest global gradient norm), got " +
                                  format_number(*c.clip_grad_norm) +
                                  "; leave it out for no clipping");
  if (c.clip_grad_norm && c.mode != TrainingMode::Sync)
    invalid("clip-grad-norm",
            "global gradient clipping needs --mode sync (2bw updates each stage inside the "
            "pipeline, before the other stages' gradients of that update exist)");
}
