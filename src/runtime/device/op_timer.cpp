#include "runtime/device/op_timer.hpp"

#include "core/error.hpp"

#include <chrono>
#include <ctime>

namespace {
class HostOpTimer final : public madpipe::runtime::OpTimer {
 public:
  explicit HostOpTimer(madpipe::runtime::HostClock clock) : clock_(clock) {}
  void start_run(double now_ms) override {
    origin_ms_ = now_ms - read_ms();
    spans_.clear();
  }
  int begin() override {
    spans_.push_back({now(), 0});
    return static_cast<int>(spans_.size()) - 1;
  }
  void end(int op) override { spans_.at(static_cast<std::size_t>(op)).end_ms = now(); }
  std::vector<Span> finish_run() override { return std::move(spans_); }

 private:
  double read_ms() const {
    if (clock_ == madpipe::runtime::HostClock::ThreadCpu)
      return 1e3 * madpipe::runtime::thread_cpu_seconds();
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  double now() const { return origin_ms_ + read_ms(); }
  madpipe::runtime::HostClock clock_;
  double origin_ms_ = 0;
  std::vector<Span> spans_;
};
}  // namespace

double madpipe::runtime::thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

std::unique_ptr<madpipe::runtime::OpTimer> madpipe::runtime::make_op_timer(
    const c10::Device& device, HostClock clock) {
  if (device.is_cuda()) {
#ifdef MADPIPE_WITH_CUDA
    return make_cuda_op_timer(device);
#else
    throw Error(ErrorKind::Unsupported, "", "device", "this build has no CUDA");
#endif
  }
  return std::make_unique<HostOpTimer>(clock);
}
