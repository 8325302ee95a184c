#include "core/error.hpp"
#include "runtime/device/op_timer.hpp"

#include <string>

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

namespace {
// Events with timing on the compute stream; times are relative to an event recorded at the start
// of the run, when the stream had drained, so that they land on the caller's clock.
class CudaOpTimer final : public madpipe::runtime::OpTimer {
 public:
  explicit CudaOpTimer(const c10::Device& device) : device_(device) {}

  void start_run(double now_ms) override {
    const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device_.index());
    stream.synchronize();
    origin_ = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
    origin_->record(stream);
    origin_ms_ = now_ms;
    events_.clear();
  }

  int begin() override {
    record();
    return static_cast<int>(events_.size() / 2);
  }
  void end(int op) override {
    if (events_.size() != 2 * static_cast<std::size_t>(op) + 1)
      throw madpipe::Error(
          madpipe::ErrorKind::Internal, "", "timer",
          "ops are timed one after the other: op " + std::to_string(op) + " ends out of turn");
    record();
  }

  std::vector<Span> finish_run() override {
    std::vector<Span> spans;
    if (events_.empty()) return spans;
    events_.back()->synchronize();
    for (std::size_t k = 0; k + 1 < events_.size(); k += 2)
      spans.push_back({origin_ms_ + origin_->elapsed_time(*events_[k]),
                       origin_ms_ + origin_->elapsed_time(*events_[k + 1])});
    events_.clear();
    return spans;
  }

 private:
  void record() {
    events_.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));
    events_.back()->record(c10::cuda::getCurrentCUDAStream(device_.index()));
  }

  c10::Device device_;
  std::unique_ptr<at::cuda::CUDAEvent> origin_;
  double origin_ms_ = 0;
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> events_;  // begin, end, begin, end, ...
};
}  // namespace

std::unique_ptr<madpipe::runtime::OpTimer> madpipe::runtime::make_cuda_op_timer(
    const c10::Device& device) {
  return std::make_unique<CudaOpTimer>(device);
}
