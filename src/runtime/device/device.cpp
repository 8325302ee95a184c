#include "runtime/device/device.hpp"

#include "core/error.hpp"

#include <string>

#include <ATen/Context.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

int madpipe::runtime::gpu_of_local_rank(int local_rank, int local_ranks, int gpus) {
  if (local_ranks > gpus)
    throw Error(ErrorKind::InvalidInput, "", "device",
                "cuda: " + std::to_string(local_ranks) + " processes on this node see the same " +
                    std::to_string(gpus) + (gpus == 1 ? " GPU" : " GPUs") +
                    " (one GPU per process: start at most " + std::to_string(gpus) +
                    " per node, give each process a GPU of its own with CUDA_VISIBLE_DEVICES or "
                    "srun --gpus-per-task=1, or share one on purpose with --device cuda:N)");
  return local_rank < 0 ? 0 : local_rank;
}

torch::Device madpipe::runtime::device_of(const std::string& name, int local_rank,
                                          int local_ranks) {
  if (name == "cuda" && torch::cuda::is_available()) {
    const int gpu =
        gpu_of_local_rank(local_rank, local_ranks, static_cast<int>(torch::cuda::device_count()));
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(gpu));
  }
  try {
    const torch::Device device(name);
    if (device.is_cpu()) return device;
    if (device.is_cuda() && torch::cuda::is_available()) {
      if (device.has_index() && device.index() >= static_cast<int>(torch::cuda::device_count()))
        throw Error(ErrorKind::InvalidInput, "", "device",
                    "'" + name + "': this machine has " +
                        std::to_string(torch::cuda::device_count()) + " CUDA devices");
      return device;
    }
    if (device.is_cuda())
      throw Error(ErrorKind::Unsupported, "", "device",
                  "'" + name + "': no CUDA device is available to this LibTorch");
  } catch (const c10::Error&) {
  }
  throw Error(ErrorKind::InvalidInput, "", "device",
              "unknown device '" + name + "' (valid: cpu, cuda, cuda:N)");
}

void madpipe::runtime::allow_tf32(bool on) {
  // CUDA's products and convolutions only: the legacy switches (setAllowTF32CuBLAS) also set
  // the generic precision, which oneDNN's CPU kernels follow.
  const at::Float32Precision precision =
      on ? at::Float32Precision::TF32 : at::Float32Precision::IEEE;
  for (const at::Float32Op op : {at::Float32Op::MATMUL, at::Float32Op::CONV})
    at::globalContext().setFloat32Precision(at::Float32Backend::CUDA, op, precision);
}

void madpipe::runtime::make_current(const torch::Device& device) {
  if (!device.is_cuda()) return;
  c10::impl::getDeviceGuardImpl(device.type())->setDevice(device);
}

madpipe::runtime::TransportKind madpipe::runtime::resolve_transport(
    TransportKind asked, const std::string& device_option, const torch::Device& device,
    int local_ranks, bool nccl_available, bool nccl_emulated) {
  const bool shared_gpu = device.is_cuda() && device_option != "cuda" && local_ranks > 1;
  if (asked == TransportKind::Auto)
    return device.is_cuda() && !shared_gpu && nccl_available ? TransportKind::Nccl
                                                             : TransportKind::Mpi;
  if (asked == TransportKind::Mpi) return asked;
  if (!device.is_cuda() && nccl_emulated) return asked;
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
