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

// Which clock times CPU ops: the steady clock (what the op took), or the calling thread's CPU
// time (what the op costs, whatever share of a core the process got meanwhile; ops run on the
// calling thread with one intra-op thread, as in training).
enum class HostClock { Wall, ThreadCpu };

// A host clock on the CPU, CUDA events on a CUDA device.
std::unique_ptr<OpTimer> make_op_timer(const c10::Device& device,
                                       HostClock clock = HostClock::Wall);

// The calling thread's CPU time in seconds.
double thread_cpu_seconds();

#ifdef MADPIPE_WITH_CUDA
std::unique_ptr<OpTimer> make_cuda_op_timer(const c10::Device& device);  // runtime/device/cuda/
#endif

}  // namespace madpipe::runtime
