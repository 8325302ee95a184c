#pragma once

#include "plan/plan.hpp"
#include "runtime/replicas.hpp"
#include "runtime/train_config.hpp"
#include "runtime/transport.hpp"

#include <memory>
#include <string>

#include <torch/torch.h>

namespace madpipe::runtime {

// The transport of a run (--transport, auto resolved) on `device` (--device `device_option`)
// with `local_ranks` processes on the node. auto: nccl when each rank has a GPU of its own and
// `nccl_available`, else mpi. Throws Error (field "transport") for nccl on a CPU, on a GPU shared
// by several ranks (NCCL refuses two ranks on one GPU), or without NCCL built in.
TransportKind resolve_transport(TransportKind asked, const std::string& device_option,
                                const torch::Device& device, int local_ranks, bool nccl_available);

// This rank's transport for `plan`: NCCL over groups.nccl() when it is set (collective over the
// pipeline: the plan's channels are added), else MPI over groups.pipeline().
std::unique_ptr<Transport> make_transport(const TrainConfig& c, const plan::Plan& plan,
                                          const ReplicaGroups& groups);

}  // namespace madpipe::runtime
