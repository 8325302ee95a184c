#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

namespace madpipe::runtime {

// Moves device tensors to and from pinned host memory for a transport that sends host memory
// (MPI): every copy is asynchronous, on a side stream ordered after the compute stream by an
// event, and the compute stream (never the host) waits for a copy to the device. Pinned buffers
// come from a pool and go back to it once their copies are done, so that a run allocates them
// once and then reuses them (one per receive slot and message in flight).
class DeviceStaging {
 public:
  explicit DeviceStaging(const c10::Device& device);

  struct ToHost {
    at::Tensor host;                     // bytes, pinned; valid once `copied` completes
    std::shared_ptr<c10::Event> copied;  // recorded on the side stream
  };
  // Starts copying `tensor` (on the device) into a pinned buffer, after what the compute stream
  // has queued so far.
  ToHost to_host(const at::Tensor& tensor);
  // A pinned buffer of `bytes` (for MPI to receive into).
  at::Tensor host_buffer(std::int64_t bytes);
  // Starts copying the first bytes of `host` into `target` (on the device, contiguous), after
  // what the compute stream has queued so far; the compute stream waits for it; `host` goes back
  // to the pool when the copy is done.
  void to_device(at::Tensor host, at::Tensor target);
  // `host` back to the pool (its copies done or never started).
  void release(at::Tensor host, std::shared_ptr<c10::Event> busy_until = nullptr);

 private:
  struct Entry {
    at::Tensor host;
    std::shared_ptr<c10::Event> busy_until;  // null: free now
  };
  c10::Device device_;
  c10::Stream side_;
  std::vector<Entry> pool_;
};

// The bytes of a contiguous tensor, as a 1-D uint8 view.
at::Tensor bytes_view(const at::Tensor& contiguous);

}  // namespace madpipe::runtime
