#pragma once

#include "runtime/config/planning_settings.hpp"

#include <string>

#include <torch/torch.h>

namespace madpipe::runtime {

// The device named `name`: "cpu", "cuda:N" (every process on GPU N: ranks may share it), or
// "cuda" (one GPU per process: GPU `local_rank`, its rank among the `local_ranks` processes of its
// node that see the same GPUs, MpiSession::gpu_peers(); device 0 when `local_rank` < 0). Throws
// Error naming the option `device` for an unknown name, a missing GPU, an index out of range, or
// more processes on the node than GPUs.
torch::Device device_of(const std::string& name, int local_rank = -1, int local_ranks = 1);

// The GPU of the process of rank `local_rank` among `local_ranks` on a node with `gpus` GPUs:
// its local rank. Throws Error{InvalidInput} (field "device") naming both counts when the
// processes outnumber the GPUs (one GPU per process; "cuda:N" shares one on purpose).
int gpu_of_local_rank(int local_rank, int local_ranks, int gpus);

// Whether fp32 matrix products (cuBLAS) and convolutions (cuDNN) on a GPU may round their
// inputs to TF32, about 7 times faster on an H100 (--tf32, on by default as in most training
// code); CPU kernels are not affected (their precision stays full fp32).
void allow_tf32(bool on);

// Makes `device` the current device of this process (a CUDA device; nothing for the CPU), so that
// CUDA contexts, streams and NCCL communicators are created on it and not on GPU 0.
void make_current(const torch::Device& device);

// The transport of a run (--transport, auto resolved) on `device` (--device `device_option`)
// with `local_ranks` processes on the node. auto: nccl when each rank has a GPU of its own and
// `nccl_available`, else mpi. Throws Error (field "transport") for nccl on a CPU, on a GPU shared
// by several ranks (NCCL refuses two ranks on one GPU), or without NCCL built in; nccl on a CPU
// is allowed when `nccl_emulated` (the tests' emulation, runtime/comm/nccl_api.hpp).
TransportKind resolve_transport(TransportKind asked, const std::string& device_option,
                                const torch::Device& device, int local_ranks, bool nccl_available,
                                bool nccl_emulated = false);

}  // namespace madpipe::runtime
