#include "runtime/device.hpp"

#include "core/error.hpp"

torch::Device madpipe::runtime::device_of(const std::string& name, int local_rank) {
  if (name == "cuda" && torch::cuda::is_available()) {
    const int count = static_cast<int>(torch::cuda::device_count());
    return torch::Device(torch::kCUDA,
                         static_cast<c10::DeviceIndex>(local_rank < 0 ? 0 : local_rank % count));
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

void madpipe::runtime::move_model(ChainModel& model, const torch::Device& device) {
  for (auto& layer : model.layers) layer.ptr()->to(device);
}

madpipe::runtime::Batch madpipe::runtime::on_device(Batch batch, const torch::Device& device) {
  if (batch.input.device() != device) batch.input = batch.input.to(device);
  if (batch.target.device() != device) batch.target = batch.target.to(device);
  return batch;
}
