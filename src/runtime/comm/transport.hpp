#pragma once

#include "runtime/comm/message_key.hpp"

#include <memory>
#include <string>

#include <ATen/core/Tensor.h>
#include <mpi.h>

namespace madpipe::runtime {

// Moves tensors between the processes of a pipeline. Sends and receives are asynchronous; a
// receive is posted early (into a buffer of the right shape) and waited for when its data is
// needed, so transfers overlap with compute.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual void post_send(int peer, const MessageKey& key, const at::Tensor& tensor) = 0;
  virtual void post_recv(int peer, const MessageKey& key, at::Tensor buffer) = 0;
  virtual at::Tensor wait_recv(int peer, const MessageKey& key) = 0;
  // Completes the send of `key` to `peer` (its tensor may then be released); nothing when it is
  // complete already. The executor calls it where the program says the peer has received it.
  virtual void wait_send(int peer, const MessageKey& key) = 0;
  // Completes every send posted so far (their tensors may then be released). The executor calls
  // it at the end of each program run, when every receive has been waited for.
  virtual void wait_sends() = 0;
  // Before the host reads what the device computed: waits, with the transfer deadline, for the
  // receives the device's compute was told to wait for (a transport whose receives the host waits
  // for itself has nothing to do). `what` names the read in a timeout's message.
  virtual void await_compute(const std::string& what) { (void)what; }
};

// MPI point-to-point transport for CPU tensors (GPU tensors are staged through host memory).
// Peers are ranks of `pipeline` (one replica's ranks, ranked by their GPU id in the plan). Tags
// encode (direction, stage, micro-batch); num_stages bounds the stage index. A wait longer than
// `timeout_s` (> 0) throws Error{Runtime} naming the rank, the peer and the message; 0: wait for
// ever.
std::unique_ptr<Transport> make_mpi_transport(int num_stages, double timeout_s = 0,
                                              MPI_Comm pipeline = MPI_COMM_WORLD);

}  // namespace madpipe::runtime
