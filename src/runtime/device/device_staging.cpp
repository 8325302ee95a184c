#include "runtime/device/device_staging.hpp"

#include <ATen/ATen.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace {
const c10::impl::DeviceGuardImplInterface& guard_of(const c10::Device& device) {
  return *c10::impl::getDeviceGuardImpl(device.type());
}

std::shared_ptr<c10::Event> event_on(const c10::Stream& stream) {
  auto event = std::make_shared<c10::Event>(stream.device_type());
  event->record(stream);
  return event;
}
}  // namespace

at::Tensor madpipe::runtime::bytes_view(const at::Tensor& contiguous) {
  return contiguous.reshape({-1}).view(at::kByte);
}

madpipe::runtime::DeviceStaging::DeviceStaging(const c10::Device& device)
    : device_(device), side_(guard_of(device).getStreamFromGlobalPool(device)) {}

at::Tensor madpipe::runtime::DeviceStaging::host_buffer(std::int64_t bytes) {
  for (std::size_t k = 0; k < pool_.size(); ++k) {
    Entry& entry = pool_[k];
    if (entry.host.numel() < bytes || (entry.busy_until && !entry.busy_until->query())) continue;
    at::Tensor host = std::move(entry.host);
    pool_.erase(pool_.begin() + static_cast<std::ptrdiff_t>(k));
    return host.narrow(0, 0, bytes);
  }
  return at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
}

void madpipe::runtime::DeviceStaging::release(at::Tensor host,
                                              std::shared_ptr<c10::Event> busy_until) {
  // The whole pinned allocation goes back, whatever part of it the last message used.
  const std::int64_t capacity =
      static_cast<std::int64_t>(host.storage().nbytes()) - host.storage_offset();
  pool_.push_back({host.as_strided({capacity}, {1}), std::move(busy_until)});
}

madpipe::runtime::DeviceStaging::ToHost madpipe::runtime::DeviceStaging::to_host(
    const at::Tensor& tensor) {
  const c10::Stream compute = guard_of(device_).getStream(device_);
  const at::Tensor source = tensor.detach().contiguous();
  ToHost out;
  out.host = host_buffer(static_cast<std::int64_t>(source.nbytes()));
  event_on(compute)->block(side_);
  {
    const c10::StreamGuard on_side(side_);
    out.host.copy_(bytes_view(source), /*non_blocking=*/true);
  }
  source.record_stream(side_);
  out.copied = event_on(side_);
  return out;
}

void madpipe::runtime::DeviceStaging::to_device(at::Tensor host, at::Tensor target) {
  const c10::Stream compute = guard_of(device_).getStream(device_);
  const std::int64_t bytes = static_cast<std::int64_t>(target.nbytes());
  event_on(compute)->block(side_);  // the compute stream is done with the slot's earlier data
  {
    // Written as MPI or NCCL write memory, past autograd: the slot's version counter is shared
    // with the views of earlier messages that autograd saved (arena slots are views of one
    // buffer), so bumping it would fail their backward although their bytes are untouched.
    const c10::StreamGuard on_side(side_);
    bytes_view(target.variable_data()).copy_(host.narrow(0, 0, bytes), /*non_blocking=*/true);
  }
  target.record_stream(side_);
  std::shared_ptr<c10::Event> copied = event_on(side_);
  copied->block(compute);
  release(std::move(host), std::move(copied));
}
