#pragma once

#include "runtime/comm/replicas.hpp"
#include "runtime/comm/transport.hpp"

#include <memory>
#include <utility>
#include <vector>

#include <c10/core/Device.h>
#include <mpi.h>

namespace madpipe::runtime {

// Whether this build has the NCCL library (CUDA LibTorch and NCCL found at configure time).
bool nccl_built();

// The NCCL communicators of one rank, on its current CUDA device (make_current first), or, on a
// CPU rank with MADPIPE_NCCL_EMULATION=1, over NCCL's emulation (runtime/comm/nccl_api.hpp):
// * the pipeline's, over the MPI communicator `pipeline`, its unique id broadcast over MPI;
// * one per channel (from, to) that messages travel on (plan::message_channels), split from the
//   pipeline's, each with its own stream on both sides: NCCL runs one communicator's operations
//   one after the other, so a receive posted early on a shared communicator would hold up every
//   send behind it;
// * the replica group's, over `replicas`, for the gradient all-reduce.
// Construction and add_channels are collective over the pipeline (and the replicas).
class NcclCommunicators {
 public:
  virtual ~NcclCommunicators() = default;
  // Creates the channels of `channels` not made yet (every pipeline rank passes the same list).
  // A channel (g, g) carries messages from a rank to itself (sends and receives grouped).
  virtual void add_channels(const std::vector<std::pair<int, int>>& channels) = 0;
  // Aborts every communicator (ncclCommAbort): what a rank does before it stops on an error, and
  // what every error inside the communicators and the transport does before it is thrown.
  virtual void abort() noexcept = 0;
};

// Throws Error{Unsupported} (field "transport") when NCCL is not built, or when `device` is not
// CUDA and the emulation is not asked for. A wait longer than `timeout_s` (> 0) for a transfer,
// an all-reduce or (emulated) a collective call throws Error{Runtime}.
std::unique_ptr<NcclCommunicators> make_nccl_communicators(MPI_Comm pipeline, MPI_Comm replicas,
                                                           const c10::Device& device,
                                                           double timeout_s);

// Point-to-point over the channels of `communicators` (which must outlive it). Each message is
// issued when posted, in the per-channel order the program numbered (MessageKey::sequence: a
// message out of order throws Error{Internal}), on its channel's stream, after the compute stream
// has produced it (a send) or finished with the buffer (a receive); wait_recv makes the compute
// stream wait for the data (the host does not; on the emulation the host computes and waits).
// wait_sends polls every outstanding transfer and the communicators' errors; await_compute waits
// for the receives the compute stream was given, then for the stream, so that a peer that stops
// sending is named instead of blocking a host read. An error, or a wait over the communicators'
// timeout, aborts the communicators and throws Error{Runtime} naming the peer and the message.
std::unique_ptr<Transport> make_nccl_transport(NcclCommunicators& communicators);

// Sums gradient buckets over the replica group on the GPU (ncclAllReduce on its own stream, after
// the compute stream); errors and timeouts as the transport's.
std::unique_ptr<ReplicaReducer> make_nccl_reducer(NcclCommunicators& communicators);

}  // namespace madpipe::runtime
