#include "runtime/op_timer.hpp"

#include "core/error.hpp"

#include <chrono>

namespace {
class HostOpTimer final : public madpipe::runtime::OpTimer {
 public:
  void start_run(double now_ms) override {
    origin_ = std::chrono::steady_clock::now();
    origin_ms_ = now_ms;
    spans_.clear();
  }
  int begin() override {
    spans_.push_back({now(), 0});
    return static_cast<int>(spans_.size()) - 1;
  }
  void end(int op) override { spans_.at(static_cast<std::size_t>(op)).end_ms = now(); }
  std::vector<Span> finish_run() override { return std::move(spans_); }

 private:
  double now() const {
    return origin_ms_ +
           std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - origin_)
               .count();
  }
  std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
  double origin_ms_ = 0;
  std::vector<Span> spans_;
};
}  // namespace

std::unique_ptr<madpipe::runtime::OpTimer> madpipe::runtime::make_op_timer(
    const c10::Device& device) {
  if (device.is_cuda()) {
#ifdef MADPIPE_WITH_CUDA
    return make_cuda_op_timer(device);
#else
    throw Error(ErrorKind::Unsupported, "", "device", "this build has no CUDA");
#endif
  }
  return std::make_unique<HostOpTimer>();
}
