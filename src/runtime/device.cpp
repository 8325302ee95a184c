#include "runtime/device.hpp"

#include "core/error.hpp"

#include <string>

#include <c10/core/impl/DeviceGuardImplInterface.h>

int madpipe::runtime::gpu_of_local_rank(int local_rank, int local_ranks, int gpus) {
  if (local_ranks > gpus)
    throw Error(ErrorKind::InvalidInput, "", "device",
                "cuda: " + std::to_string(local_ranks) + " processes run on this node but it has " +
                    std::to_string(gpus) + (gpus == 1 ? " GPU" : " GPUs") +
                    " (one GPU per process: start at most " + std::to_string(gpus) +
                    " per node, or share one on purpose with --device cuda:N)");
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

void madpipe::runtime::make_current(const torch::Device& device) {
  if (!device.is_cuda()) return;
  c10::impl::getDeviceGuardImpl(device.type())->setDevice(device);
}

void madpipe::runtime::move_model(ChainModel& model, const torch::Device& device) {
  for (auto& layer : model.layers) layer.ptr()->to(device);
}

madpipe::runtime::Batch madpipe::runtime::on_device(Batch batch, const torch::Device& device) {
  if (batch.input.device() != device) batch.input = batch.input.to(device);
  if (batch.target.device() != device) batch.target = batch.target.to(device);
  return batch;
}
