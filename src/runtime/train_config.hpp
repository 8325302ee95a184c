#pragma once

#include "core/names.hpp"
#include "core/platform.hpp"
#include "partition/planner.hpp"
#include "plan/program.hpp"

#include <cstdint>
#include <string>

namespace madpipe::runtime {

// How steps follow each other (--mode).
enum class TrainingMode {
  Sync,               // each step's gradients, then a flush
  TwoWeightVersions,  // 2BW: no flush, two weight versions per stage
};
inline constexpr Named<TrainingMode> kTrainingModeNames[] = {
    {TrainingMode::Sync, "sync"}, {TrainingMode::TwoWeightVersions, "2bw"}};

// What a NaN or Inf loss or gradient does (--on-nan).
// Weight-sized copies per stage that 2BW holds beyond synchronous training's (weights,
// gradients, optimizer state): the second weight version, its gradient and the newest version.
inline constexpr int kTwoWeightVersionsExtraCopies = 3;

// The optimizer of every stage (--optimizer).
enum class OptimizerKind { AdamW, Sgd };
inline constexpr Named<OptimizerKind> kOptimizerNames[] = {{OptimizerKind::AdamW, "adamw"},
                                                           {OptimizerKind::Sgd, "sgd"}};

enum class OnNonFinite { Stop, Skip };
inline constexpr Named<OnNonFinite> kOnNonFiniteNames[] = {{OnNonFinite::Stop, "stop"},
                                                           {OnNonFinite::Skip, "skip"}};

// How activations and gradients travel between ranks (--transport).
enum class TransportKind {
  Auto,  // nccl when each rank has a GPU of its own and NCCL is built in, else mpi
  Nccl,  // GPU to GPU (one GPU per rank)
  Mpi,   // MPI point-to-point (CPU tensors; GPU tensors through host memory)
};
inline constexpr Named<TransportKind> kTransportNames[] = {
    {TransportKind::Auto, "auto"}, {TransportKind::Nccl, "nccl"}, {TransportKind::Mpi, "mpi"}};

// [model]: a built-in model's sizes, or a TorchScript chain (`script`).
struct ModelSettings {
  std::string model = "gpt";  // gpt | mlp | cnn | script
  std::string script;         // script: the TorchScript file (torch.jit.save)
  std::string loss;           // script: cross-entropy (the default) | mse
  int layers = 4;
  int width = 64;
  int heads = 4;
  int context = 32;
  int inputs = 16;  // mlp
  int outputs = 4;  // mlp outputs, cnn classes
  int image = 32;   // cnn
  // gpt on token files: the embedding's ids (0: the largest id in the files + 1); text: its
  // characters, always.
  int vocab = 0;
};

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
  OptimizerKind optimizer = OptimizerKind::AdamW;
  double learning_rate = 1e-3;
  double momentum = 0.9;  // sgd
  double weight_decay = 0.0;
  std::uint64_t seed = 1;
  int eval_every = 10;  // steps between validation losses; 0: never
  int eval_micro_batches = 8;
  // Each step as a plain autograd loop over the unsplit model (run_unsplit), not the plan's
  // program: one process, the reference that pipelined runs are compared with.
  bool plain_loop = false;
};

// The platform defaults of `madpipe train`: one CPU rank with 16 GiB, 12 GB/s
// links, AdamW's 4 weight-sized copies. Inline: the command line uses it without the runtime.
inline Platform default_train_platform() {
  Platform platform;
  platform.gpus = 1;
  platform.memory_bytes = std::int64_t{16} << 30;
  platform.bandwidth_bytes_per_ms = 12e6;  // 12 GB/s
  platform.weight_copies = 4;
  return platform;
}

// Weight-sized copies a run holds per weight: the weights and their gradients, the optimizer's
// state (AdamW: two moments; SGD: its momentum, if any), and 2BW's extra copies.
inline int held_weight_copies(const TrainingSettings& t) {
  int copies = 2 + (t.optimizer == OptimizerKind::AdamW ? 2 : (t.momentum != 0 ? 1 : 0));
  if (t.mode == TrainingMode::TwoWeightVersions) copies += kTwoWeightVersionsExtraCopies;
  return copies;
}

// [platform] and [planner]: the ranks, what the planner assumes of them and how it plans.
struct PlanningSettings {
  // Every rank of every replica: platform.gpus is --gpus, which must equal the MPI world size.
  Platform platform = default_train_platform();
  int replicas = 1;            // data-parallel copies of the pipeline
  std::string device = "cpu";  // cpu | cuda (each rank the GPU of its local rank) | cuda:N
  TransportKind transport = TransportKind::Auto;
  // As `madpipe plan` plans (its option group); gpipe_micro_batches is --micro-batches.
  partition::PlannerOptions planner{};
  std::string plan;      // load this plan instead of planning
  std::string profile;   // plan from this profile instead of measuring the model
  int replan_after = 0;  // measure steps up to this one, then re-plan on the measured costs
  double replan_min_gain = 0.05;  // switch plans only when the period drops by this fraction
};

// [output]: files, checkpoints, traces and how the run reacts to trouble.
struct OutputSettings {
  std::string output_dir = "runs/default";
  int checkpoint_every = 0;       // steps between checkpoints (0: only at the end)
  int trace_steps = 5;            // steps recorded in <output_dir>/trace.json (0: no trace)
  bool resume = false;            // continue from the newest whole checkpoint in <output_dir>
  double transfer_timeout = 600;  // seconds a rank waits for a transfer (0: for ever)
  // Where received activations and gradients land (--receive-buffers).
  plan::ReceivePosting receive_buffers = plan::ReceivePosting::Arena;
  int receive_lookahead = 2;  // arena: compute instructions between a receive's post and its use
  OnNonFinite on_nan = OnNonFinite::Stop;
  bool quiet = false;
  // Profile and plan, write profile.json and plan.json, train nothing; needs one process only,
  // and profiles on the CPU when the device is not on this machine.
  bool dry_run = false;
};

// Everything `madpipe train` needs; INI keys and flags share the names of the fields (src/cli).
struct TrainConfig : ModelSettings, TrainingSettings, PlanningSettings, OutputSettings {};

// Throws Error{InvalidInput} naming the option of the first setting that no run can use, or
// that conflicts with another (--replicas not dividing --gpus, 2bw with replicas, ...). Needs no
// MPI: the CLI calls it before any rank starts work.
void check_train_config(const TrainConfig& config);

// Ranks of one pipeline: --gpus counts every rank of every replica. Throws Error{InvalidInput}
// when --replicas does not divide --gpus.
int pipeline_ranks(const TrainConfig& config);

}  // namespace madpipe::runtime
