#include "core/error.hpp"
#include "runtime/mpi_session.hpp"
#include "runtime/transport.hpp"

#include <chrono>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <mpi.h>

namespace {
class MpiTransport final : public madpipe::runtime::Transport {
 public:
  MpiTransport(int num_stages, double timeout_s, MPI_Comm pipeline)
      : num_stages_(num_stages), timeout_s_(timeout_s), comm_(pipeline) {
    MPI_Comm_rank(comm_, &rank_);
    int flag = 0;
    int* tag_ub = nullptr;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
    tag_limit_ = flag && tag_ub ? *tag_ub : 32767;
  }

  ~MpiTransport() override {
    if (std::uncaught_exceptions() > 0) {
      // An error unwinds: the rank must reach its abort, so the sends are not waited for (their
      // receiver may never come), and their buffers stay alive, as MPI may still read them.
      for (Pending& pending : sends_)
        madpipe::runtime::keep_alive_until_exit(std::make_shared<torch::Tensor>(pending.host));
    } else {
      try {
        wait_sends();
      } catch (...) {
      }
    }
    // Receives left behind by an error: withdrawn, so that MPI can finalize.
    for (auto& [id, pending] : receives_) {
      MPI_Cancel(&pending.request);
      MPI_Request_free(&pending.request);
    }
  }

  void post_send(int peer, const madpipe::runtime::MessageKey& key,
                 const torch::Tensor& tensor) override {
    Pending pending;
    pending.host = to_host(tensor);
    MPI_Isend(pending.host.data_ptr(), count_of(pending.host), MPI_BYTE, peer, tag_of(key), comm_,
              &pending.request);
    sends_.push_back(std::move(pending));
  }

  void post_recv(int peer, const madpipe::runtime::MessageKey& key, torch::Tensor buffer) override {
    Pending pending;
    if (buffer.device().is_cpu() && buffer.is_contiguous()) {
      pending.host = buffer;  // MPI writes straight into it (an arena slot, say)
    } else {
      pending.target = buffer;
      pending.host = buffer.device().is_cpu() ? torch::empty(buffer.sizes(), buffer.options())
                                              : torch::empty_like(buffer, torch::kCPU).pin_memory();
    }
    MPI_Irecv(pending.host.data_ptr(), count_of(pending.host), MPI_BYTE, peer, tag_of(key), comm_,
              &pending.request);
    const auto id =
        std::make_tuple(peer, static_cast<int>(key.direction), key.stage, key.micro_batch);
    if (!receives_.emplace(id, std::move(pending)).second)
      throw madpipe::Error(madpipe::ErrorKind::Internal, "", "transport",
                           "receive posted twice for one message");
  }

  torch::Tensor wait_recv(int peer, const madpipe::runtime::MessageKey& key) override {
    const auto id =
        std::make_tuple(peer, static_cast<int>(key.direction), key.stage, key.micro_batch);
    auto it = receives_.find(id);
    if (it == receives_.end())
      throw madpipe::Error(madpipe::ErrorKind::Internal, "", "transport",
                           "waiting for a receive that was never posted");
    wait(it->second.request, "for the " + what(key) + " from rank " + std::to_string(peer));
    torch::Tensor out = it->second.host;
    if (it->second.target.defined()) out = it->second.target.copy_(out);  // device or strided
    receives_.erase(it);
    return out;
  }

  void wait_sends() override {
    for (Pending& pending : sends_) wait(pending.request, "for a rank to receive what it sent");
    sends_.clear();
  }

 private:
  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    torch::Tensor host;    // what MPI reads or writes
    torch::Tensor target;  // a receive's buffer when it is not `host` (on a device, or strided)
  };

  static std::string what(const madpipe::runtime::MessageKey& key) {
    return std::string(key.direction == madpipe::runtime::Direction::Activation ? "activation"
                                                                                : "gradient") +
           " of stage " + std::to_string(key.stage) + ", micro-batch " +
           std::to_string(key.micro_batch);
  }

  void wait(MPI_Request& request, const std::string& awaited) const {
    madpipe::runtime::wait_with_deadline(
        request, timeout_s_, rank_,
        awaited + " (is that rank stuck or gone? a longer step needs a larger --transfer-timeout)");
  }

  static torch::Tensor to_host(const torch::Tensor& tensor) {
    torch::Tensor t = tensor.detach();
    if (!t.device().is_cpu()) t = t.to(torch::kCPU);
    return t.contiguous();
  }

  static int count_of(const torch::Tensor& t) {
    const long long bytes = static_cast<long long>(t.numel()) * t.element_size();
    if (bytes > 2147483647LL)
      throw madpipe::Error(madpipe::ErrorKind::Unsupported, "", "transport",
                           "a message above 2 GiB is not supported by the MPI transport");
    return static_cast<int>(bytes);
  }

  // Messages with equal tags between two ranks are matched in posting order (MPI guarantees
  // non-overtaking), so wrapping the micro-batch index keeps matches exact as long as fewer
  // than `wrap` micro-batches of one stage are in flight.
  int tag_of(const madpipe::runtime::MessageKey& key) const {
    const long long per_micro_batch = 2LL * num_stages_;
    const long long wrap = std::max(1LL, tag_limit_ / per_micro_batch);
    return static_cast<int>((key.micro_batch % wrap) * per_micro_batch + 2LL * key.stage +
                            (key.direction == madpipe::runtime::Direction::Gradient ? 1 : 0));
  }

  int num_stages_ = 1;
  double timeout_s_ = 0;
  MPI_Comm comm_ = MPI_COMM_WORLD;
  int rank_ = 0;
  long long tag_limit_ = 32767;
  std::vector<Pending> sends_;
  std::map<std::tuple<int, int, int, int>, Pending> receives_;
};
}  // namespace

std::unique_ptr<madpipe::runtime::Transport> madpipe::runtime::make_mpi_transport(
    int num_stages, double timeout_s, MPI_Comm pipeline) {
  return std::make_unique<MpiTransport>(num_stages, timeout_s, pipeline);
}
