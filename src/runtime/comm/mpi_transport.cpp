#include "core/error.hpp"
#include "runtime/comm/channel_order.hpp"
#include "runtime/comm/mpi_session.hpp"
#include "runtime/comm/transport.hpp"
#include "runtime/device/device_staging.hpp"

#include <chrono>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
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
        madpipe::runtime::keep_alive_until_exit(std::make_shared<at::Tensor>(pending.host));
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
                 const at::Tensor& tensor) override {
    Pending pending;
    pending.peer = peer;
    pending.tag = tag_of(key);
    if (tensor.device().is_cpu()) {
      pending.host = tensor.detach().contiguous();
    } else {
      // Copied to pinned memory on a side stream; MPI starts once the copy is done.
      madpipe::runtime::DeviceStaging::ToHost staged = staging(tensor.device()).to_host(tensor);
      pending.host = std::move(staged.host);
      pending.copied = std::move(staged.copied);
    }
    sends_.push_back(std::move(pending));
    start_sends();
    reap_sends();
  }

  void post_recv(int peer, const madpipe::runtime::MessageKey& key, at::Tensor buffer) override {
    Pending pending;
    if (buffer.device().is_cpu() && buffer.is_contiguous()) {
      pending.host = buffer;  // MPI writes straight into it (an arena slot, say)
    } else if (buffer.device().is_cpu()) {
      pending.target = buffer;
      pending.host = at::empty(buffer.sizes(), buffer.options());
    } else {
      // Into pinned memory from the pool, copied to the device at the wait (asynchronously).
      pending.target = buffer.is_contiguous() ? buffer : buffer.contiguous();
      pending.host =
          staging(buffer.device()).host_buffer(static_cast<std::int64_t>(buffer.nbytes()));
      pending.device_copy_back = buffer;
    }
    MPI_Irecv(pending.host.data_ptr(), count_of(pending.host), MPI_BYTE, peer, tag_of(key), comm_,
              &pending.request);
    const auto id =
        std::make_tuple(peer, static_cast<int>(key.direction), key.stage, key.micro_batch);
    if (!receives_.emplace(id, std::move(pending)).second)
      throw madpipe::Error(madpipe::ErrorKind::Internal, "", "transport",
                           "receive posted twice for one message");
    start_sends();
    reap_sends();
  }

  at::Tensor wait_recv(int peer, const madpipe::runtime::MessageKey& key) override {
    const auto id =
        std::make_tuple(peer, static_cast<int>(key.direction), key.stage, key.micro_batch);
    auto it = receives_.find(id);
    if (it == receives_.end())
      throw madpipe::Error(madpipe::ErrorKind::Internal, "", "transport",
                           "waiting for a receive that was never posted");
    wait(it->second.request,
         "for the " + madpipe::runtime::message_name(key) + " from rank " + std::to_string(peer));
    Pending& pending = it->second;
    at::Tensor out = pending.host;
    if (pending.device_copy_back.defined()) {
      staging(pending.target.device()).to_device(pending.host, pending.target);
      out = pending.device_copy_back;
      // A strided buffer; written past autograd, as MPI writes (DeviceStaging::to_device).
      if (!out.is_same(pending.target)) out.variable_data().copy_(pending.target);
    } else if (pending.target.defined()) {
      pending.target.variable_data().copy_(out);  // a strided CPU buffer
      out = pending.target;
    }
    receives_.erase(it);
    reap_sends();
    return out;
  }

  void wait_send(int peer, const madpipe::runtime::MessageKey& key) override {
    const int tag = tag_of(key);
    for (std::size_t i = 0; i < sends_.size(); ++i) {
      Pending& pending = sends_[i];
      if (pending.peer != peer || pending.tag != tag) continue;
      if (!pending.started) {
        pending.copied->synchronize();
        start_sends();
      }
      wait(pending.request, "for rank " + std::to_string(peer) + " to receive the " +
                                madpipe::runtime::message_name(key));
      if (pending.copied && staging_) staging_->release(std::move(pending.host));
      sends_.erase(sends_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }

  void wait_sends() override {
    for (Pending& pending : sends_) {
      if (!pending.started) {
        pending.copied->synchronize();
        start_sends();
      }
      wait(pending.request, "for a rank to receive what it sent");
    }
    if (staging_)
      for (Pending& pending : sends_)
        if (pending.copied) staging_->release(std::move(pending.host));
    sends_.clear();
  }

 private:
  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    at::Tensor host;    // what MPI reads or writes
    at::Tensor target;  // a receive's buffer when it is not `host` (on a device, or strided)
    at::Tensor device_copy_back;  // a device receive's buffer as posted
    // A send of a device tensor: MPI starts once the copy to `host` is done.
    std::shared_ptr<c10::Event> copied;
    bool started = false;
    int peer = 0, tag = 0;
  };

  madpipe::runtime::DeviceStaging& staging(const c10::Device& device) {
    if (!staging_) staging_ = std::make_unique<madpipe::runtime::DeviceStaging>(device);
    return *staging_;
  }

  // Starts the sends whose data is in host memory, in the order they were posted (MPI matches
  // equal tags in sending order).
  void start_sends() {
    for (Pending& pending : sends_) {
      if (pending.started) continue;
      if (pending.copied && !pending.copied->query()) return;
      MPI_Isend(pending.host.data_ptr(), count_of(pending.host), MPI_BYTE, pending.peer,
                pending.tag, comm_, &pending.request);
      pending.started = true;
    }
  }

  // Releases the sends that are complete (their tensors, their pinned copies), so that what a
  // rank holds for its sends is what is still in flight, not everything sent since the last
  // wait_sends().
  void reap_sends() {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < sends_.size(); ++i) {
      Pending& pending = sends_[i];
      int done = 0;
      if (pending.started) MPI_Test(&pending.request, &done, MPI_STATUS_IGNORE);
      if (done) {
        if (pending.copied && staging_) staging_->release(std::move(pending.host));
        continue;
      }
      if (kept != i) sends_[kept] = std::move(pending);
      ++kept;
    }
    sends_.resize(kept);
  }

  // While sends wait for their copies, a wait keeps starting them: a peer may wait for one.
  void wait(MPI_Request& request, const std::string& awaited) {
    const std::string what =
        awaited + " (is that rank stuck or gone? a longer step needs a larger --transfer-timeout)";
    bool all_started = true;
    for (const Pending& pending : sends_) all_started = all_started && pending.started;
    if (all_started) {
      madpipe::runtime::wait_with_deadline(request, timeout_s_, rank_, what);
      return;
    }
    const auto started = std::chrono::steady_clock::now();
    madpipe::runtime::PollPacer pacer;
    for (;;) {
      int done = 0;
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) return;
      start_sends();
      if (timeout_s_ > 0 &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() >
              timeout_s_) {
        char limit[32];
        std::snprintf(limit, sizeof limit, "%g", timeout_s_);
        throw madpipe::Error(
            madpipe::ErrorKind::Runtime, "", "transfer-timeout",
            "rank " + std::to_string(rank_) + " waited more than " + limit + " s " + what);
      }
      pacer.pause();
    }
  }

  static int count_of(const at::Tensor& t) {
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
  std::unique_ptr<madpipe::runtime::DeviceStaging> staging_;  // made at the first device tensor
};
}  // namespace

std::unique_ptr<madpipe::runtime::Transport> madpipe::runtime::make_mpi_transport(
    int num_stages, double timeout_s, MPI_Comm pipeline) {
  return std::make_unique<MpiTransport>(num_stages, timeout_s, pipeline);
}
