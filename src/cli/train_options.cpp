#include "cli/train_options.hpp"

#include "cli/planner_options.hpp"
#include "cli/platform_options.hpp"

#include <algorithm>

#include <boost/program_options/value_semantic.hpp>

// Option groups double as INI sections: "[training] steps = 100" is "--steps 100".
madpipe::cli::po::options_description madpipe::cli::model_group(
    madpipe::runtime::ModelSettings& c) {
  po::options_description g("Model [model]", 100);
  g.add_options()(
      "model", enum_value(c.model, runtime::kModelKindNames, "model", "--model"),
      (names_of(runtime::kModelKindNames) + " (script: a TorchScript chain, --script)").c_str())(
      "script", po::value(&c.script)->value_name("FILE"),
      "--model script: a module saved by torch.jit.save whose top-level children, in order, "
      "are the layers, each taking one tensor and returning one")(
      "loss", optional_enum_value(c.loss, runtime::kLossNames, "loss", "--loss"),
      "--model script: cross-entropy (logits over the last dimension against int64 targets; "
      "the default) or mse")(
      "layers", po::value(&c.layers)->default_value(c.layers)->notifier(at_least(1, "--layers")),
      "transformer blocks (gpt), hidden layers (mlp) or residual blocks (cnn)")(
      "width", po::value(&c.width)->default_value(c.width)->notifier(at_least(1, "--width")),
      "embedding / hidden width")(
      "heads", po::value(&c.heads)->default_value(c.heads)->notifier(at_least(1, "--heads")),
      "attention heads (gpt)")(
      "context",
      po::value(&c.context)->default_value(c.context)->notifier(at_least(2, "--context")),
      "tokens per sample (gpt; script models on token files)")(
      "inputs", po::value(&c.inputs)->default_value(c.inputs)->notifier(at_least(1, "--inputs")),
      "input features (mlp)")(
      "outputs",
      po::value(&c.outputs)->default_value(c.outputs)->notifier(at_least(1, "--outputs")),
      "output features (mlp) or classes (cnn)")(
      "image", po::value(&c.image)->default_value(c.image)->notifier(at_least(4, "--image")),
      "image height and width (cnn)")(
      "vocab", po::value(&c.vocab)->default_value(c.vocab)->notifier(at_least(0, "--vocab")),
      "token ids of the gpt's embedding with token files (0: the largest id in them + 1)");
  return g;
}

madpipe::cli::po::options_description madpipe::cli::training_group(
    madpipe::runtime::TrainingSettings& c) {
  po::options_description g("Training [training]", 100);
  g.add_options()("data", po::value(&c.data)->default_value(c.data),
                  "text file or directory of text files (gpt), or a token or tensors file")(
      "data-format",
      enum_value(c.data_format, runtime::kDataFormatNames, "data-format", "--data-format"),
      "text, token ids as little-endian unsigned integers: tokens-u16 (nanoGPT's train.bin) "
      "or tokens-u32 (mapped, not read), or tensors: torch.save({\"inputs\": X, \"targets\": "
      "Y})")(
      "validation-data", po::value(&c.validation_data),
      "file of the validation samples (token files, tensors; default: the last tenth of --data)")(
      "mode", enum_value(c.mode, runtime::kTrainingModeNames, "mode", "--mode"),
      "sync: gradients of each step's micro-batches, then a flush; 2bw: no flush, two weight "
      "versions per stage, one update per micro-batches")(
      "plain-loop", po::bool_switch(&c.plain_loop),
      "run each step as a plain autograd loop over the unsplit model instead of the plan (one "
      "process, sync mode): the reference to compare pipelined runs with")(
      "steps", po::value(&c.steps)->default_value(c.steps)->notifier(at_least(1, "--steps")),
      "training steps")("micro-batches",
                        po::value(&c.micro_batches)
                            ->default_value(c.micro_batches)
                            ->notifier(at_least(1, "--micro-batches")),
                        "micro-batches per step (gradients accumulate over them)")(
      "micro-batch-size",
      po::value(&c.micro_batch_size)
          ->default_value(c.micro_batch_size)
          ->notifier(at_least(1, "--micro-batch-size")),
      "samples per micro-batch")(
      "precision", enum_value(c.precision, runtime::kPrecisionNames, "precision", "--precision"),
      "fp32, or bf16 or fp16: weights and activations in it, fp32 master weights, gradients and "
      "optimizer state (fp16 also scales the loss dynamically)")(
      "loss-scale", optional_value(c.loss_scale, "S"),
      "fp16: the loss scale of the first step (default 65536); it halves on each step whose "
      "gradients overflow (the step is skipped)")(
      "loss-scale-growth-interval", optional_value(c.loss_scale_growth_interval, "N"),
      "fp16: steps without overflow after which the loss scale doubles (default 2000)")(
      "optimizer", enum_value(c.optimizer, runtime::kOptimizerNames, "optimizer", "--optimizer"),
      "adamw or sgd")("learning-rate", po::value(&c.learning_rate)->default_value(c.learning_rate),
                      "peak step size (after the warm-up, before the decay)")(
      "lr-schedule",
      enum_value(c.lr_schedule, runtime::kLrScheduleNames, "learning-rate schedule",
                 "--lr-schedule"),
      "after the warm-up: constant, or a cosine or linear decay to --min-lr at the last step")(
      "warmup-steps",
      po::value(&c.warmup_steps)
          ->default_value(c.warmup_steps)
          ->notifier(at_least(0, "--warmup-steps")),
      "first steps whose learning rate rises linearly to --learning-rate")(
      "min-lr", optional_value(c.min_lr, "LR"),
      "learning rate of the last step with --lr-schedule cosine or linear (default 0)")(
      "momentum", po::value(&c.momentum)->default_value(c.momentum), "sgd momentum")(
      "weight-decay", po::value(&c.weight_decay)->default_value(c.weight_decay),
      "decoupled weight decay of the parameters with two or more dimensions (not biases or "
      "norm scales)")("clip-grad-norm", optional_value(c.clip_grad_norm, "NORM"),
                      "scale the gradients down when their global norm (over every parameter of "
                      "the model) exceeds NORM (sync mode; default: no clipping)")(
      "seed", po::value(&c.seed)->default_value(c.seed), "initial weights and data order")(
      "eval-every",
      po::value(&c.eval_every)->default_value(c.eval_every)->notifier(at_least(0, "--eval-every")),
      "steps between validation losses (0: never)")(
      "eval-micro-batches",
      po::value(&c.eval_micro_batches)
          ->default_value(c.eval_micro_batches)
          ->notifier(at_least(1, "--eval-micro-batches")),
      "micro-batches of a validation pass");
  return g;
}

madpipe::cli::po::options_description madpipe::cli::platform_group(
    TrainPlanningOptions& options, madpipe::runtime::PlanningSettings& c) {
  PlatformDefaults defaults{runtime::default_train_platform(),
                            "ranks in all (replicas x pipeline ranks); must equal the number of "
                            "MPI processes"};
  po::options_description g = platform_options_description(options.platform, &defaults);
  g.add_options()(
      "replicas",
      po::value(&c.replicas)->default_value(c.replicas)->notifier(at_least(1, "--replicas")),
      "data-parallel copies of the pipeline: rank r is GPU r % (gpus / replicas) of replica "
      "r / (gpus / replicas); gradients are averaged over the replicas at every step")(
      "device", po::value(&c.device)->default_value(c.device),
      "where each rank runs: cpu, cuda (the GPU of its rank on the node) or cuda:N")(
      "tf32", enum_value(c.tf32, runtime::kOnOffNames, "value", "--tf32"),
      "on: fp32 matrix products and convolutions on GPUs in TF32 (about 7x faster on an H100, "
      "the precision most fp32 training runs at); off: full fp32")(
      "transport", enum_value(c.transport, runtime::kTransportNames, "value", "--transport"),
      "how activations and gradients travel: nccl (GPU to GPU, one GPU per rank), mpi, or auto "
      "(nccl with --device cuda when NCCL is built in, else mpi)");
  return g;
}

madpipe::cli::po::options_description madpipe::cli::planner_group(
    TrainPlanningOptions& options, madpipe::runtime::PlanningSettings& c) {
  po::options_description g = planner_options_description(options.planner, false);
  add_algorithm_option(g, options.algorithm, ("planner: " + algorithm_names()).c_str());
  g.add_options()("plan", po::value(&c.plan), "run this madpipe.plan/1 file instead of planning")(
      "profile", po::value(&c.profile),
      "plan from this madpipe.profile/1 file (madpipe profile) instead of measuring the model")(
      "replan-after",
      po::value(&c.replan_after)
          ->default_value(c.replan_after)
          ->notifier(at_least(0, "--replan-after")),
      "after this step, re-plan on the stage times measured so far and switch plans (moving "
      "layers between ranks) if that is faster; 0: never (sync mode)")(
      "replan-min-gain", po::value(&c.replan_min_gain)->default_value(c.replan_min_gain),
      "smallest drop of the period, as a fraction, for which --replan-after switches plans");
  return g;
}

void madpipe::cli::finish_train_config(const TrainPlanningOptions& options,
                                       madpipe::runtime::TrainConfig& config) {
  PlatformOptions platform = options.platform;
  if (!options.weight_copies_given)
    platform.weight_copies = runtime::held_weight_copies(config);
  else if (config.mode == runtime::TrainingMode::TwoWeightVersions)
    // 2BW holds three more weight-sized copies per stage than synchronous training: the second
    // version, its gradient and the newest version the optimizer updates.
    platform.weight_copies += runtime::kTwoWeightVersionsExtraCopies;
  config.platform = to_platform(platform);
  config.planner = to_planner_options(options.planner, options.algorithm, config.platform);
  config.planner.micro_batches_per_step = config.micro_batches;  // GPipe's step is the step
}

madpipe::cli::po::options_description madpipe::cli::output_group(
    madpipe::runtime::OutputSettings& c) {
  po::options_description g("Output [output]", 100);
  g.add_options()("output-dir", po::value(&c.output_dir)->default_value(c.output_dir),
                  "where plan.json, profile.json, metrics.jsonl, trace.json and checkpoints/ go")(
      "checkpoint-every",
      po::value(&c.checkpoint_every)
          ->default_value(c.checkpoint_every)
          ->notifier(at_least(0, "--checkpoint-every")),
      "steps between checkpoints (0: only after the last step)")(
      "keep-checkpoints",
      po::value(&c.keep_checkpoints)
          ->default_value(c.keep_checkpoints)
          ->notifier(at_least(0, "--keep-checkpoints")),
      "complete checkpoints kept: once a new one is complete, older ones beyond the newest N are "
      "deleted (0: keep all)")(
      "trace-steps",
      po::value(&c.trace_steps)
          ->default_value(c.trace_steps)
          ->notifier(at_least(0, "--trace-steps")),
      "first steps recorded in trace.json with measured vs predicted period and memory (0: none)")(
      "transfer-timeout", po::value(&c.transfer_timeout)->default_value(c.transfer_timeout),
      "seconds a rank waits for an activation or gradient before stopping the run with an error "
      "naming the ranks (0: wait for ever)")(
      "receive-buffers",
      enum_value(c.receive_buffers, plan::kReceivePostingNames, "value", "--receive-buffers"),
      "arena: each receive posted --receive-lookahead compute steps before its use, into one "
      "arena per rank at a planned offset; upfront: every receive of a step posted at its start, "
      "each its own allocation")(
      "receive-lookahead",
      po::value(&c.receive_lookahead)
          ->default_value(c.receive_lookahead)
          ->notifier(at_least(0, "--receive-lookahead")),
      "forwards and backwards a receive is posted ahead of the one that needs it (arena)")(
      "on-nan", enum_value(c.on_nan, runtime::kOnNonFiniteNames, "action", "--on-nan"),
      "a NaN or Inf loss or gradient: stop (exit with the step, micro-batch and stage named) or "
      "skip (that step's update)")(
      "resume", po::bool_switch(&c.resume),
      "continue from the newest checkpoint in --output-dir (same config and plan)")(
      "quiet,q", po::bool_switch(&c.quiet), "no progress lines")(
      "dry-run", po::bool_switch(&c.dry_run),
      "profile and plan only (one process, any machine: on the CPU when --device is not here), "
      "write profile.json and plan.json, train nothing");
  return g;
}

std::vector<madpipe::cli::ConfigSection> madpipe::cli::train_config_sections(
    const std::vector<ConfigSection>& extra) {
  runtime::TrainConfig unused;
  TrainPlanningOptions unused_options;
  // [platform] and [planner] take each other's keys, as they always have.
  std::vector<std::string> planning_keys = option_names(platform_group(unused_options, unused));
  for (const std::string& key : option_names(planner_group(unused_options, unused)))
    planning_keys.push_back(key);
  std::vector<ConfigSection> sections{
      {"model", option_names(model_group(unused))},
      {"training", option_names(training_group(unused))},
      {"platform", planning_keys},
      {"planner", planning_keys},
      {"output", option_names(output_group(unused))},
  };
  sections.insert(sections.end(), extra.begin(), extra.end());
  return sections;
}
