#include <mpi.h>

#include <map>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "runtime/transport.hpp"

namespace {
class MpiTransport final : public madpipe::runtime::Transport {
 public:
  explicit MpiTransport(int num_stages) : num_stages_(num_stages) {
    int flag = 0;
    int* tag_ub = nullptr;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
    tag_limit_ = flag && tag_ub ? *tag_ub : 32767;
  }

  ~MpiTransport() override {
    try {
      wait_sends();
    } catch (...) {
    }
  }

  void post_send(int peer, const madpipe::runtime::MessageKey& key,
                 const torch::Tensor& tensor) override {
    Pending pending;
    pending.host = to_host(tensor);
    MPI_Isend(pending.host.data_ptr(), count_of(pending.host), MPI_BYTE, peer, tag_of(key),
              MPI_COMM_WORLD, &pending.request);
    sends_.push_back(std::move(pending));
  }

  void post_recv(int peer, const madpipe::runtime::MessageKey& key, torch::Tensor buffer) override {
    Pending pending;
    pending.device = buffer.device();
    pending.host = buffer.device().is_cpu() ? buffer.contiguous()
                                            : torch::empty_like(buffer, torch::kCPU).pin_memory();
    MPI_Irecv(pending.host.data_ptr(), count_of(pending.host), MPI_BYTE, peer, tag_of(key),
              MPI_COMM_WORLD, &pending.request);
    const auto id = std::make_tuple(peer, static_cast<int>(key.direction), key.stage,
                                    key.micro_batch);
    if (!receives_.emplace(id, std::move(pending)).second)
      throw madpipe::Error(madpipe::ErrorKind::Internal, "", "transport",
                           "receive posted twice for one message");
  }

  torch::Tensor wait_recv(int peer, const madpipe::runtime::MessageKey& key) override {
    const auto id = std::make_tuple(peer, static_cast<int>(key.direction), key.stage,
                                    key.micro_batch);
    auto it = receives_.find(id);
    if (it == receives_.end())
      throw madpipe::Error(madpipe::ErrorKind::Internal, "", "transport",
                           "waiting for a receive that was never posted");
    MPI_Status status;
    MPI_Wait(&it->second.request, &status);
    torch::Tensor out = it->second.host;
    if (!it->second.device.is_cpu()) out = out.to(it->second.device, /*non_blocking=*/false);
    receives_.erase(it);
    return out;
  }

  void wait_sends() override {
    for (Pending& pending : sends_) MPI_Wait(&pending.request, MPI_STATUS_IGNORE);
    sends_.clear();
  }

 private:
  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    torch::Tensor host;
    torch::Device device = torch::kCPU;
  };

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
  long long tag_limit_ = 32767;
  std::vector<Pending> sends_;
  std::map<std::tuple<int, int, int, int>, Pending> receives_;
};
}  // namespace

std::unique_ptr<madpipe::runtime::Transport> madpipe::runtime::make_mpi_transport(
    int num_stages) {
  return std::make_unique<MpiTransport>(num_stages);
}
