#pragma once

// The narrow interface through which the NCCL transport and its communicators reach NCCL: the
// library itself on a GPU (runtime/comm/cuda/nccl_library.cpp), or its emulation over MPI on CPU
// tensors (runtime/comm/nccl_emulation.cpp), which also checks the rules NCCL leaves undefined.
// Neither NCCL nor CUDA headers appear here.

#include <memory>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <mpi.h>

namespace madpipe::runtime::nccl {

// A communicator of an Api (ncclComm_t for the library); null: none.
struct Comm {
  void* handle = nullptr;
  explicit operator bool() const noexcept { return handle != nullptr; }
};

// A stream of an Api: kComputeStream is the one the model's kernels run on (the current stream);
// others come from new_stream().
using StreamId = int;
constexpr StreamId kComputeStream = 0;

// A point in a stream: done once everything queued on the stream before it is.
class Event {
 public:
  virtual ~Event() = default;
  virtual bool done() = 0;
};

class Api {
 public:
  virtual ~Api() = default;
  // For messages: "NCCL 2.30.7", "NCCL emulation over MPI".
  virtual std::string name() const = 0;
  // Whether the model's kernels run on the host (the emulation on CPU): a stream that waits for
  // a transfer is then the host itself, which the caller makes wait with a deadline.
  virtual bool host_runs_compute() const = 0;

  // Collective over `over`; `label` names the communicator in messages.
  virtual Comm init(MPI_Comm over, const std::string& label) = 0;
  // Collective over `parent` (ncclCommSplit): the members of one `color` (>= 0) form a
  // communicator, ranked by `key`; color < 0 joins the call and gets none.
  virtual Comm split(Comm parent, int color, int key, const std::string& label) = 0;
  virtual void group_start() = 0;
  virtual void group_end() = 0;
  // Point-to-point and all-reduce (sum, in place) of contiguous tensors, queued on `stream`.
  virtual void send(const at::Tensor& data, int peer, Comm comm, StreamId stream) = 0;
  virtual void recv(const at::Tensor& buffer, int peer, Comm comm, StreamId stream) = 0;
  virtual void all_reduce_sum(const at::Tensor& buffer, Comm comm, StreamId stream) = 0;
  // The communicator's asynchronous error, "" when there is none.
  virtual std::string async_error(Comm comm) = 0;
  virtual void abort(Comm comm) noexcept = 0;
  virtual void destroy(Comm comm) noexcept = 0;

  virtual StreamId new_stream() = 0;
  virtual std::unique_ptr<Event> record(StreamId stream) = 0;
  // `stream` runs what is queued on it after this only once `event` is done (the host goes on).
  virtual void stream_wait(StreamId stream, Event& event) = 0;
  // The tensor's memory is not reused before `stream` is done with it.
  virtual void hold_until_done(const at::Tensor& tensor, StreamId stream) = 0;
};

// The NCCL library on `device` (its current stream computes). Throws Error{Unsupported} (field
// "transport") in a build without it.
std::unique_ptr<Api> make_library_api(const c10::Device& device);

// The emulation over MPI on CPU tensors. A collective check that waits longer than `timeout_s`
// (> 0) for a member (a split or all-reduce some member never calls) throws Error{Runtime}.
std::unique_ptr<Api> make_emulated_api(double timeout_s);

// Whether the environment asks for the emulation: MADPIPE_NCCL_EMULATION=1.
bool emulation_requested();

}  // namespace madpipe::runtime::nccl
