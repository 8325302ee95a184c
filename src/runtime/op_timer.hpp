#pragma once

#include <memory>
#include <vector>

#include <c10/core/Device.h>

namespace madpipe::runtime {

// Times the operations a rank runs. On the CPU, the host clock around each op. On a GPU, the host
// only queues work, so its clock would charge an op with whatever is still queued before it:
// there, CUDA events on the compute stream time each op, read when the run ends.
class OpTimer {
 public:
  struct Span {
    double start_ms = 0;  // on the clock passed to start_run
    double end_ms = 0;
  };

  virtual ~OpTimer() = default;
  // A run starts at `now_ms` on the caller's clock (the trace's): spans are placed on it.
  virtual void start_run(double now_ms) = 0;
  // Marks an op's start and end on the device; returns its index in the run.
  virtual int begin() = 0;
  virtual void end(int op) = 0;
  // The spans of the run's ops (waits for the device to get there).
  virtual std::vector<Span> finish_run() = 0;
};

// Host clock on the CPU, CUDA events on a CUDA device.
std::unique_ptr<OpTimer> make_op_timer(const c10::Device& device);

#ifdef MADPIPE_WITH_CUDA
std::unique_ptr<OpTimer> make_cuda_op_timer(const c10::Device& device);  // runtime/cuda/
#endif

}  // namespace madpipe::runtime
