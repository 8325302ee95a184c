#include "runtime/transport_choice.hpp"

#include "core/error.hpp"
#include "plan/program.hpp"
#include "runtime/nccl.hpp"

madpipe::runtime::TransportKind madpipe::runtime::resolve_transport(
    TransportKind asked, const std::string& device_option, const torch::Device& device,
    int local_ranks, bool nccl_available) {
  const bool shared_gpu = device.is_cuda() && device_option != "cuda" && local_ranks > 1;
  if (asked == TransportKind::Auto)
    return device.is_cuda() && !shared_gpu && nccl_available ? TransportKind::Nccl
                                                             : TransportKind::Mpi;
  if (asked == TransportKind::Mpi) return asked;
  if (!device.is_cuda())
    throw Error(ErrorKind::InvalidInput, "", "transport",
                "nccl moves GPU tensors, but --device is " + device_option +
                    " (use --device cuda, or --transport mpi)");
  if (shared_gpu)
    throw Error(ErrorKind::InvalidInput, "", "transport",
                "nccl cannot put two ranks on one GPU, and --device " + device_option +
                    " puts the node's " + std::to_string(local_ranks) +
                    " processes on it (use --device cuda for one GPU per process, or "
                    "--transport mpi)");
  if (!nccl_available)
    throw Error(ErrorKind::Unsupported, "", "transport",
                "nccl is not built in (it needs a CUDA LibTorch and NCCL at configure time); "
                "use --transport mpi");
  return asked;
}

std::unique_ptr<madpipe::runtime::Transport> madpipe::runtime::make_transport(
    const TrainConfig& c, const plan::Plan& plan, const ReplicaGroups& groups) {
  if (NcclCommunicators* nccl = groups.nccl()) {
    nccl->add_channels(plan::message_channels(plan));
    return make_nccl_transport(*nccl, c.transfer_timeout);
  }
  return make_mpi_transport(static_cast<int>(plan.stages.size()), c.transfer_timeout,
                            groups.pipeline());
}
