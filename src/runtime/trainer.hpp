#pragma once

#include <cstdint>
#include <string>

namespace madpipe::runtime {

// Everything `madpipe train` needs; INI keys and flags share these names (see src/cli).
struct TrainConfig {
  // model
  std::string model = "gpt";  // gpt | mlp | cnn
  int layers = 4;
  int width = 64;
  int heads = 4;
  int context = 32;
  int inputs = 16;  // mlp
  int outputs = 4;  // mlp outputs, cnn classes
  int image = 32;   // cnn
  // data
  std::string data = "/usr/share/common-licenses";  // text corpus (gpt)
  // training
  std::string mode = "sync";  // sync (flush every step) | 2bw (no flush, two weight versions)
  int steps = 100;
  int micro_batches = 8;  // per step
  int micro_batch_size = 8;
  std::string optimizer = "adamw";  // adamw | sgd
  double learning_rate = 1e-3;
  double momentum = 0.9;  // sgd
  double weight_decay = 0.0;
  std::uint64_t seed = 1;
  int eval_every = 10;  // steps between validation losses; 0: never
  int eval_micro_batches = 8;
  // platform and planning
  int gpus = 1;      // ranks in all (replicas x pipeline ranks): must equal the MPI world size
  int replicas = 1;  // data-parallel copies of the pipeline
  std::string device = "cpu";  // cpu | cuda (each rank the GPU of its local rank) | cuda:N
  std::string memory = "16GiB";
  std::string bandwidth = "12GB/s";
  int gpus_per_node = 0;             // 0: all ranks on one node
  std::string inter_node_bandwidth;  // between nodes; empty: bandwidth
  int weight_copies = 4;             // AdamW: weights, gradients and two moments
  std::string algorithm = "madpipe";
  std::string plan;     // load this plan instead of planning
  std::string profile;  // plan from this profile instead of measuring the model
  int replan_after =
      0;  // measure steps up to this one, then re-plan on the measured costs (0: never)
  double replan_min_gain = 0.05;  // switch plans only when the period drops by this fraction
  std::string output_dir = "runs/default";
  int checkpoint_every = 0;  // steps between checkpoints (0: only at the end)
  int trace_steps = 5;       // steps recorded in <output_dir>/trace.json (0: no trace)
  bool resume = false;       // continue from the newest whole checkpoint in <output_dir>
  double transfer_timeout =
      600;  // seconds a rank waits for a transfer before failing (0: for ever)
  std::string receive_buffers = "arena";  // arena (planned offsets, posted ahead) | upfront
  int receive_lookahead = 2;    // arena: compute instructions between a receive's post and its use
  std::string on_nan = "stop";  // a NaN or Inf loss or gradient: stop | skip (the step)
  bool quiet = false;
  // Profile and plan, write profile.json and plan.json, train nothing; needs one process only,
  // and profiles on the CPU when the device is not on this machine.
  bool dry_run = false;
};

// Runs training under MPI (one process per pipeline rank; call inside an MPI job). Returns the
// process exit code. Rank 0 prints progress and writes <output_dir>/metrics.jsonl and plan.json.
int train(const TrainConfig& config, int* argc, char*** argv);

}  // namespace madpipe::runtime
