#pragma once

#include "core/names.hpp"
#include "core/platform.hpp"
#include "partition/planner.hpp"

#include <cstdint>
#include <string>

namespace madpipe::runtime {

// How activations and gradients travel between ranks (--transport).
enum class TransportKind {
  Auto,  // nccl when each rank has a GPU of its own and NCCL is built in, else mpi
  Nccl,  // GPU to GPU (one GPU per rank)
  Mpi,   // MPI point-to-point (CPU tensors; GPU tensors through host memory)
};
inline constexpr Named<TransportKind> kTransportNames[] = {
    {TransportKind::Auto, "auto"}, {TransportKind::Nccl, "nccl"}, {TransportKind::Mpi, "mpi"}};

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

// The values of a switch such as --tf32.
inline constexpr Named<bool> kOnOffNames[] = {{true, "on"}, {false, "off"}};

// [platform] and [planner]: the ranks, what the planner assumes of them and how it plans.
struct PlanningSettings {
  // Every rank of every replica: platform.gpus is --gpus, which must equal the MPI world size.
  Platform platform = default_train_platform();
  int replicas = 1;            // data-parallel copies of the pipeline
  std::string device = "cpu";  // cpu | cuda (each rank the GPU of its local rank) | cuda:N
  bool tf32 = true;            // fp32 products and convolutions on a GPU in TF32 (--tf32)
  TransportKind transport = TransportKind::Auto;
  // As `madpipe plan` plans (its option group); micro_batches_per_step is --micro-batches.
  partition::PlannerOptions planner{};
  std::string plan;      // load this plan instead of planning
  std::string profile;   // plan from this profile instead of measuring the model
  int replan_after = 0;  // measure steps up to this one, then re-plan on the measured costs
  double replan_min_gain = 0.05;  // switch plans only when the period drops by this fraction
};

// Ranks of one pipeline: --gpus counts every rank of every replica. Throws Error{InvalidInput}
// when --replicas does not divide --gpus.
int pipeline_ranks(const PlanningSettings& planning);

}  // namespace madpipe::runtime
