#include "core/error.hpp"
#include "runtime/comm/channel_order.hpp"
#include "runtime/comm/cuda/nccl_communicators.hpp"
#include "runtime/comm/mpi_session.hpp"

#include <algorithm>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

namespace mr = madpipe::runtime;

namespace {
struct Transfer {
  mr::MessageKey key;
  int peer = 0;
  at::Tensor tensor;         // what is sent, or the buffer received into
  at::cuda::CUDAEvent done;  // recorded on the channel's stream after the transfer
};

class NcclTransport final : public mr::Transport {
 public:
  NcclTransport(mr::nccl::Communicators& comms, double timeout_s)
      : comms_(comms), timeout_s_(timeout_s) {}

  ~NcclTransport() override {
    // What NCCL may still read or write stays alive: the run is ending (normally, every transfer
    // is done) or aborting (the communicators are aborted with the rank).
    if (std::uncaught_exceptions() > 0) {
      for (Transfer& t : sends_) mr::keep_alive_until_exit(std::make_shared<at::Tensor>(t.tensor));
      for (auto& [id, t] : receives_)
        mr::keep_alive_until_exit(std::make_shared<at::Tensor>(t.tensor));
      comms_.abort();
    }
  }

  void post_send(int peer, const mr::MessageKey& key, const at::Tensor& tensor) override {
    order_.send(peer, key);
    Transfer t{key, peer, tensor.detach().contiguous(), {}};
    if (peer == comms_.position()) {
      self_sends_.push_back(std::move(t));
      issue_self();
      return;
    }
    mr::nccl::Channel& channel = comms_.channel(comms_.position(), peer);
    after_compute(channel.stream);
    mr::nccl::check(ncclSend(t.tensor.data_ptr(), t.tensor.nbytes(), ncclUint8, channel.peer_rank,
                             channel.comm, channel.stream.stream()),
                    "ncclSend");
    finish_on(t, channel.stream);
    sends_.push_back(std::move(t));
    reap_sends();
  }

  void post_recv(int peer, const mr::MessageKey& key, at::Tensor buffer) override {
    order_.receive(peer, key);
    if (!buffer.is_cuda() || !buffer.is_contiguous())
      throw madpipe::Error(madpipe::ErrorKind::Internal, "", "transport",
                           "the NCCL transport receives into contiguous GPU buffers only");
    Transfer t{key, peer, std::move(buffer), {}};
    if (peer == comms_.position()) {
      self_receives_.push_back(id_of(peer, key));
      receives_.emplace(id_of(peer, key), std::move(t));
      issue_self();
      return;
    }
    mr::nccl::Channel& channel = comms_.channel(peer, comms_.position());
    after_compute(channel.stream);  // the buffer's earlier reads are done
    mr::nccl::check(ncclRecv(t.tensor.data_ptr(), t.tensor.nbytes(), ncclUint8, channel.peer_rank,
                             channel.comm, channel.stream.stream()),
                    "ncclRecv");
    finish_on(t, channel.stream);
    if (!receives_.emplace(id_of(peer, key), std::move(t)).second)
      throw madpipe::Error(madpipe::ErrorKind::Internal, "", "transport",
                           "receive posted twice for the " + mr::message_name(key));
  }

  at::Tensor wait_recv(int peer, const mr::MessageKey& key) override {
    auto it = receives_.find(id_of(peer, key));
    if (it == receives_.end())
      throw madpipe::Error(madpipe::ErrorKind::Internal, "", "transport",
                           "waiting for the " + mr::message_name(key) + " from rank " +
                               std::to_string(peer) + ", never posted");
    if (peer == comms_.position() && !it->second.done.isCreated())
      throw madpipe::Error(
          madpipe::ErrorKind::Internal, "", "transport",
          "waiting for the " + mr::message_name(key) + " from this rank itself before it was sent");
    it->second.done.block(comms_.compute_stream());  // the compute stream waits, not the host
    at::Tensor data = std::move(it->second.tensor);
    receives_.erase(it);
    return data;
  }

  void wait_send(int peer, const mr::MessageKey& key) override {
    const auto it = std::find_if(sends_.begin(), sends_.end(), [&](const Transfer& t) {
      return t.peer == peer && id_of(peer, t.key) == id_of(peer, key);
    });
    if (it == sends_.end()) return;
    comms_.wait(it->done, timeout_s_,
                "for rank " + std::to_string(peer) + " to receive the " + mr::message_name(key));
    sends_.erase(it);
  }

  void wait_sends() override {
    for (Transfer& t : sends_)
      comms_.wait(
          t.done, timeout_s_,
          "for rank " + std::to_string(t.peer) + " to receive the " + mr::message_name(t.key));
    sends_.clear();
    comms_.check_errors("after the step's transfers");
    if (receives_.empty() && self_sends_.empty()) order_.restart();
  }

 private:
  using Id = std::tuple<int, int, int, int>;
  static Id id_of(int peer, const mr::MessageKey& key) {
    return {peer, static_cast<int>(key.direction), key.stage, key.micro_batch};
  }

  // Drops the sends whose transfer is done: what a rank holds for its sends is what is in flight.
  void reap_sends() {
    sends_.erase(std::remove_if(sends_.begin(), sends_.end(),
                                [](const Transfer& t) { return t.done.query(); }),
                 sends_.end());
  }

  // The channel's stream starts after what the compute stream has queued so far.
  void after_compute(const c10::cuda::CUDAStream& stream) {
    at::cuda::CUDAEvent ready;
    ready.record(comms_.compute_stream());
    ready.block(stream);
  }

  // The tensor's memory is not reused before the channel's stream is done with it.
  static void finish_on(Transfer& t, const c10::cuda::CUDAStream& stream) {
    t.tensor.record_stream(stream.unwrap());
    t.done.record(stream);
  }

  // Messages to this rank itself: each send with the receive of the same place in the order,
  // grouped (NCCL needs both halves of a self message in one group).
  void issue_self() {
    while (!self_sends_.empty() && !self_receives_.empty()) {
      Transfer& sent = self_sends_.front();
      Transfer& received = receives_.at(self_receives_.front());
      mr::nccl::Channel& channel = comms_.channel(comms_.position(), comms_.position());
      if (sent.tensor.nbytes() != received.tensor.nbytes())
        throw madpipe::Error(madpipe::ErrorKind::Internal, "", "transport",
                             "the " + mr::message_name(sent.key) + " sent to this rank itself " +
                                 "does not fit the buffer of the " +
                                 mr::message_name(received.key));
      after_compute(channel.stream);
      mr::nccl::check(ncclGroupStart(), "ncclGroupStart");
      mr::nccl::check(ncclSend(sent.tensor.data_ptr(), sent.tensor.nbytes(), ncclUint8, 0,
                               channel.comm, channel.stream.stream()),
                      "ncclSend");
      mr::nccl::check(ncclRecv(received.tensor.data_ptr(), received.tensor.nbytes(), ncclUint8, 0,
                               channel.comm, channel.stream.stream()),
                      "ncclRecv");
      mr::nccl::check(ncclGroupEnd(), "ncclGroupEnd");
      finish_on(sent, channel.stream);
      finish_on(received, channel.stream);
      sends_.push_back(std::move(sent));
      self_sends_.pop_front();
      self_receives_.pop_front();
    }
  }

  mr::nccl::Communicators& comms_;
  double timeout_s_;
  mr::ChannelOrder order_;
  std::vector<Transfer> sends_;
  std::map<Id, Transfer> receives_;
  std::deque<Transfer> self_sends_;  // not issued yet: waiting for their receive
  std::deque<Id> self_receives_;     // posted, not issued yet
};

class NcclSum final : public mr::PendingSum {
 public:
  NcclSum(mr::nccl::Communicators& comms, at::Tensor buffer)
      : comms_(comms), buffer_(std::move(buffer)) {
    const c10::cuda::CUDAStream& stream = comms_.replica_stream();
    at::cuda::CUDAEvent ready;
    ready.record(comms_.compute_stream());
    ready.block(stream);
    const ncclDataType_t type = buffer_.scalar_type() == at::kDouble ? ncclFloat64 : ncclFloat32;
    mr::nccl::check(ncclAllReduce(buffer_.data_ptr(), buffer_.data_ptr(),
                                  static_cast<std::size_t>(buffer_.numel()), type, ncclSum,
                                  comms_.replicas(), stream.stream()),
                    "ncclAllReduce");
    buffer_.record_stream(stream.unwrap());
    done_.record(stream);
  }

  void wait(double timeout_s, const std::string& what) override {
    comms_.wait(done_, timeout_s, what);
  }

  void abandon() override {
    mr::keep_alive_until_exit(std::make_shared<at::Tensor>(buffer_));
    comms_.abort();
  }

 private:
  mr::nccl::Communicators& comms_;
  at::Tensor buffer_;
  at::cuda::CUDAEvent done_;
};

class NcclReducer final : public mr::ReplicaReducer {
 public:
  explicit NcclReducer(mr::nccl::Communicators& comms) : comms_(comms) {}
  std::unique_ptr<mr::PendingSum> start(at::Tensor buffer) override {
    return std::make_unique<NcclSum>(comms_, std::move(buffer));
  }

 private:
  mr::nccl::Communicators& comms_;
};
}  // namespace

std::unique_ptr<mr::Transport> mr::make_nccl_transport(NcclCommunicators& communicators,
                                                       double timeout_s) {
  return std::make_unique<NcclTransport>(static_cast<nccl::Communicators&>(communicators),
                                         timeout_s);
}

std::unique_ptr<mr::ReplicaReducer> mr::make_nccl_reducer(NcclCommunicators& communicators) {
  return std::make_unique<NcclReducer>(static_cast<nccl::Communicators&>(communicators));
}
