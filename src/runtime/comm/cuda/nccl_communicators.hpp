#pragma once

// The NCCL communicators behind runtime/comm/nccl.hpp, shared by the transport and the reducer.
// Only the translation units of this directory (built with CUDA and NCCL) include it.

#include "runtime/comm/nccl.hpp"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <mpi.h>
#include <nccl.h>

namespace madpipe::runtime::nccl {

// Throws Error{Runtime} (field "transport") naming `call` and NCCL's message unless `result` is
// success (or in progress, for a non-blocking communicator).
void check(ncclResult_t result, const char* call);

struct Channel {
  ncclComm_t comm = nullptr;
  int peer_rank = 0;  // the other side's rank in `comm`
  c10::cuda::CUDAStream stream;
};

class Communicators final : public NcclCommunicators {
 public:
  Communicators(MPI_Comm pipeline, MPI_Comm replicas, const c10::Device& device);
  ~Communicators() override;

  void add_channels(const std::vector<std::pair<int, int>>& channels) override;
  void abort() noexcept override;

  int position() const noexcept { return position_; }
  int world_rank() const noexcept { return world_rank_; }
  const c10::Device& device() const noexcept { return device_; }
  c10::cuda::CUDAStream compute_stream() const;
  // The channel of messages from `from` to `to`; throws Error{Internal} when it was never added.
  Channel& channel(int from, int to);
  ncclComm_t replicas() const noexcept { return replicas_; }
  const c10::cuda::CUDAStream& replica_stream() const noexcept { return replica_stream_; }

  // Polls every communicator's asynchronous error; on one, aborts them all and throws
  // Error{Runtime} naming `context`.
  void check_errors(const std::string& context);
  // Waits on the host for `event`, polling the communicators' errors; longer than `timeout_s`
  // (> 0) aborts them and throws Error{Runtime} (field "transfer-timeout") naming `what`.
  void wait(at::cuda::CUDAEvent& event, double timeout_s, const std::string& what);

 private:
  c10::cuda::CUDAStream new_stream();
  std::vector<ncclComm_t> all() const;

  c10::Device device_;
  int position_ = 0;
  int pipeline_size_ = 1;
  int world_rank_ = 0;
  bool aborted_ = false;
  ncclComm_t pipeline_ = nullptr;
  ncclComm_t replicas_ = nullptr;
  std::map<std::pair<int, int>, Channel> channels_;
  std::vector<cudaStream_t> streams_;  // created here, destroyed with the communicators
  c10::cuda::CUDAStream replica_stream_;
};

}  // namespace madpipe::runtime::nccl
