#include "core/error.hpp"
#include "runtime/comm/channel_order.hpp"
#include "runtime/comm/mpi_session.hpp"
#include "runtime/comm/nccl_communicators.hpp"

#include <algorithm>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace mr = madpipe::runtime;
namespace nccl = madpipe::runtime::nccl;

namespace {
struct Transfer {
  mr::MessageKey key;
  int peer = 0;
  at::Tensor tensor;                  // what is sent, or the buffer received into
  std::unique_ptr<nccl::Event> done;  // on the channel's stream after the transfer
};

std::string from_rank(const Transfer& t) {
  return "for the " + mr::message_name(t.key) + " from rank " + std::to_string(t.peer);
}

class NcclTransport final : public mr::Transport {
 public:
  explicit NcclTransport(nccl::Communicators& comms) : comms_(comms), api_(comms.api()) {}

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
    const nccl::Channel& channel = comms_.channel(comms_.position(), peer);
    comms_.after_compute(channel.stream);
    api_.send(t.tensor, channel.peer_rank, channel.comm, channel.stream);
    finish_on(t, channel.stream);
    sends_.push_back(std::move(t));
    reap_sends();
  }

  void post_recv(int peer, const mr::MessageKey& key, at::Tensor buffer) override {
    order_.receive(peer, key);
    if (!buffer.is_contiguous())
      throw madpipe::Error(madpipe::ErrorKind::Internal, "", "transport",
                           "the NCCL transport receives into contiguous buffers only");
    Transfer t{key, peer, std::move(buffer), {}};
    if (peer == comms_.position()) {
      self_receives_.push_back(id_of(peer, key));
      receives_.emplace(id_of(peer, key), std::move(t));
      issue_self();
      return;
    }
    const nccl::Channel& channel = comms_.channel(peer, comms_.position());
    comms_.after_compute(channel.stream);  // the buffer's earlier reads are done
    api_.recv(t.tensor, channel.peer_rank, channel.comm, channel.stream);
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
    Transfer& t = it->second;
    if (peer == comms_.position() && !t.done)
      throw madpipe::Error(
          madpipe::ErrorKind::Internal, "", "transport",
          "waiting for the " + mr::message_name(key) + " from this rank itself before it was sent");
    at::Tensor data = t.tensor;
    if (api_.host_runs_compute()) {
      comms_.wait(*t.done, comms_.timeout_s(),
                  from_rank(t));  // the host computes: it waits, with the deadline
    } else {
      api_.stream_wait(nccl::kComputeStream, *t.done);  // the compute stream waits, not the host
      consumed_.push_back({t.key, t.peer, at::Tensor(), std::move(t.done)});
    }
    receives_.erase(it);
    return data;
  }

  void wait_send(int peer, const mr::MessageKey& key) override {
    const auto it = std::find_if(sends_.begin(), sends_.end(), [&](const Transfer& t) {
      return t.peer == peer && id_of(peer, t.key) == id_of(peer, key);
    });
    if (it == sends_.end()) return;
    comms_.wait(*it->done, comms_.timeout_s(), to_rank(*it));
    sends_.erase(it);
  }

  void wait_sends() override {
    for (Transfer& t : sends_) comms_.wait(*t.done, comms_.timeout_s(), to_rank(t));
    sends_.clear();
    comms_.check_errors("after the step's transfers");
    if (receives_.empty() && self_sends_.empty()) order_.restart();
  }

  void await_compute(const std::string& what) override {
    // The compute stream waits for the receives it was given: a peer that never sends stalls it,
    // and a host read behind it would block for ever. Waiting for them first, with the deadline,
    // names the message; then the compute stream itself.
    for (Transfer& t : consumed_) comms_.wait(*t.done, comms_.timeout_s(), from_rank(t));
    consumed_.clear();
    const std::unique_ptr<nccl::Event> computed = api_.record(nccl::kComputeStream);
    comms_.wait(*computed, comms_.timeout_s(), what);
  }

 private:
  using Id = std::tuple<int, int, int, int>;
  static Id id_of(int peer, const mr::MessageKey& key) {
    return {peer, static_cast<int>(key.direction), key.stage, key.micro_batch};
  }
  static std::string to_rank(const Transfer& t) {
    return "for rank " + std::to_string(t.peer) + " to receive the " + mr::message_name(t.key);
  }

  // Drops the transfers known done: what a rank holds for its sends is what is in flight.
  void reap_sends() {
    sends_.erase(std::remove_if(sends_.begin(), sends_.end(),
                                [](const Transfer& t) { return t.done->done(); }),
                 sends_.end());
    consumed_.erase(std::remove_if(consumed_.begin(), consumed_.end(),
                                   [](const Transfer& t) { return t.done->done(); }),
                    consumed_.end());
  }

  // The tensor's memory is not reused before the channel's stream is done with it.
  void finish_on(Transfer& t, nccl::StreamId stream) {
    api_.hold_until_done(t.tensor, stream);
    t.done = api_.record(stream);
  }

  // Messages to this rank itself: each send with the receive of the same place in the order,
  // grouped (NCCL needs both halves of a self message in one group).
  void issue_self() {
    while (!self_sends_.empty() && !self_receives_.empty()) {
      Transfer& sent = self_sends_.front();
      Transfer& received = receives_.at(self_receives_.front());
      const nccl::Channel& channel = comms_.channel(comms_.position(), comms_.position());
      if (sent.tensor.nbytes() != received.tensor.nbytes())
        throw madpipe::Error(madpipe::ErrorKind::Internal, "", "transport",
                             "the " + mr::message_name(sent.key) + " sent to this rank itself " +
                                 "does not fit the buffer of the " +
                                 mr::message_name(received.key));
      comms_.after_compute(channel.stream);
      api_.group_start();
      api_.send(sent.tensor, 0, channel.comm, channel.stream);
      api_.recv(received.tensor, 0, channel.comm, channel.stream);
      api_.group_end();
      finish_on(sent, channel.stream);
      finish_on(received, channel.stream);
      sends_.push_back(std::move(sent));
      self_sends_.pop_front();
      self_receives_.pop_front();
    }
  }

  nccl::Communicators& comms_;
  nccl::Api& api_;
  mr::ChannelOrder order_;
  std::vector<Transfer> sends_;
  std::map<Id, Transfer> receives_;
  std::vector<Transfer> consumed_;   // receives the compute stream waits for (not the host)
  std::deque<Transfer> self_sends_;  // not issued yet: waiting for their receive
  std::deque<Id> self_receives_;     // posted, not issued yet
};

class NcclSum final : public mr::PendingSum {
 public:
  NcclSum(nccl::Communicators& comms, at::Tensor buffer)
      : comms_(comms), buffer_(std::move(buffer)) {
    nccl::Api& api = comms_.api();
    const nccl::StreamId stream = comms_.replica_stream();
    comms_.after_compute(stream);
    api.all_reduce_sum(buffer_, comms_.replicas(), stream);
    api.hold_until_done(buffer_, stream);
    done_ = api.record(stream);
  }

  void wait(double timeout_s, const std::string& what) override {
    comms_.wait(*done_, timeout_s, what);
  }

  void abandon() override {
    mr::keep_alive_until_exit(std::make_shared<at::Tensor>(buffer_));
    comms_.abort();
  }

 private:
  nccl::Communicators& comms_;
  at::Tensor buffer_;
  std::unique_ptr<nccl::Event> done_;
};

class NcclReducer final : public mr::ReplicaReducer {
 public:
  explicit NcclReducer(nccl::Communicators& comms) : comms_(comms) {}
  std::unique_ptr<mr::PendingSum> start(at::Tensor buffer) override {
    return std::make_unique<NcclSum>(comms_, std::move(buffer));
  }

 private:
  nccl::Communicators& comms_;
};
}  // namespace

std::unique_ptr<mr::Transport> mr::make_nccl_transport(NcclCommunicators& communicators) {
  return std::make_unique<NcclTransport>(static_cast<nccl::Communicators&>(communicators));
}

std::unique_ptr<mr::ReplicaReducer> mr::make_nccl_reducer(NcclCommunicators& communicators) {
  return std::make_unique<NcclReducer>(static_cast<nccl::Communicators&>(communicators));
}
