#include "runtime/comm/replicas.hpp"

#include "core/error.hpp"
#include "runtime/comm/mpi_session.hpp"
#include "runtime/comm/nccl.hpp"
#include "runtime/device/device_staging.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include <ATen/ATen.h>

madpipe::runtime::ReplicaLayout madpipe::runtime::replica_layout(int world_rank, int world_size,
                                                                 int replicas) {
  if (replicas < 1 || world_size % replicas != 0)
    throw Error(ErrorKind::InvalidInput, "", "replicas",
                std::to_string(replicas) + " replicas do not divide the " +
                    std::to_string(world_size) +
                    " ranks into equal pipelines (ranks = replicas x pipeline ranks)");
  ReplicaLayout layout;
  layout.replicas = replicas;
  layout.pipeline_ranks = world_size / replicas;
  layout.replica = world_rank / layout.pipeline_ranks;
  layout.position = world_rank % layout.pipeline_ranks;
  return layout;
}

madpipe::runtime::ReplicaGroups::ReplicaGroups(const ReplicaLayout& layout) : layout_(layout) {
  MPI_Comm_split(MPI_COMM_WORLD, layout.replica, layout.position, &pipeline_);
  MPI_Comm_split(MPI_COMM_WORLD, layout.position, layout.replica, &replicas_);
}

void madpipe::runtime::ReplicaGroups::set_nccl(std::unique_ptr<NcclCommunicators> nccl) {
  nccl_ = std::move(nccl);
}

madpipe::runtime::ReplicaGroups::~ReplicaGroups() {
  nccl_.reset();  // before the MPI communicators they were made over
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Comm_free(&pipeline_);
  MPI_Comm_free(&replicas_);
}

std::vector<madpipe::runtime::GradientBucket> madpipe::runtime::gradient_buckets(
    const std::vector<std::int64_t>& bytes, std::int64_t bucket_bytes) {
  std::vector<GradientBucket> buckets;
  std::int64_t filled = 0;
  for (int i = 0; i < static_cast<int>(bytes.size()); ++i) {
    const std::int64_t b = bytes[static_cast<std::size_t>(i)];
    if (buckets.empty() || filled + b > bucket_bytes) {
      buckets.push_back({i, i});
      filled = 0;
    }
    buckets.back().last = i + 1;
    filled += b;
  }
  return buckets;
}

namespace {
class MpiSum final : public madpipe::runtime::PendingSum {
 public:
  // `buffer` on the CPU is summed in place; on a device, through pinned memory of `staging`.
  MpiSum(at::Tensor buffer, madpipe::runtime::DeviceStaging* staging, MPI_Comm replicas)
      : staging_(staging), replicas_(replicas) {
    if (buffer.numel() > 2147483647LL)
      throw madpipe::Error(madpipe::ErrorKind::Unsupported, "", "replicas",
                           "a gradient bucket above 2^31 elements is beyond MPI_Iallreduce");
    if (buffer.device().is_cpu()) {
      host_ = std::move(buffer);
      start();
      return;
    }
    // The copy runs on the staging stream; MPI may only read the bucket once it is there, and
    // the host does not wait for it: the sum starts when a later progress() or wait() sees it.
    madpipe::runtime::DeviceStaging::ToHost staged = staging_->to_host(buffer);
    copied_ = std::move(staged.copied);
    host_bytes_ = staged.host;
    host_ = staged.host.view(buffer.scalar_type());
    target_ = std::move(buffer);
  }

  void progress() override {
    if (!started_ && copied_->query()) start();
  }
  ~MpiSum() override {
    if (request_ != MPI_REQUEST_NULL || !started_) abandon();
  }

  void wait(double timeout_s, const std::string& what) override {
    if (!started_) {
      copied_->synchronize();
      start();
    }
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    madpipe::runtime::wait_with_deadline(request_, timeout_s, rank, what);
    // Back to the device asynchronously; the compute stream waits for it.
    if (target_.defined()) staging_->to_device(std::move(host_bytes_), target_);
  }

  void abandon() override {
    // An active collective may not be freed, and waiting could hang on a replica that never
    // joins: it stays active, its buffer alive, until the abort or MPI_Finalize.
    madpipe::runtime::keep_alive_until_exit(std::make_shared<at::Tensor>(host_));
    request_ = MPI_REQUEST_NULL;
    started_ = true;
  }

 private:
  void start() {
    MPI_Iallreduce(MPI_IN_PLACE, host_.data_ptr(), static_cast<int>(host_.numel()),
                   host_.scalar_type() == at::kDouble ? MPI_DOUBLE : MPI_FLOAT, MPI_SUM, replicas_,
                   &request_);
    started_ = true;
  }

  madpipe::runtime::DeviceStaging* staging_;
  MPI_Comm replicas_;
  std::shared_ptr<c10::Event> copied_;  // the bucket's copy to the host (a device bucket)
  bool started_ = false;
  at::Tensor host_;        // what MPI sums
  at::Tensor host_bytes_;  // host_ as the staging's bytes (a device bucket)
  at::Tensor target_;      // the bucket on a device
  MPI_Request request_ = MPI_REQUEST_NULL;
};

class MpiReducer final : public madpipe::runtime::ReplicaReducer {
 public:
  explicit MpiReducer(MPI_Comm replicas) : replicas_(replicas) {}
  std::unique_ptr<madpipe::runtime::PendingSum> start(at::Tensor buffer) override {
    if (!buffer.device().is_cpu() && !staging_)
      staging_ = std::make_unique<madpipe::runtime::DeviceStaging>(buffer.device());
    return std::make_unique<MpiSum>(std::move(buffer), staging_.get(), replicas_);
  }

 private:
  MPI_Comm replicas_;
  std::unique_ptr<madpipe::runtime::DeviceStaging> staging_;  // made at the first device bucket
};
}  // namespace

std::unique_ptr<madpipe::runtime::ReplicaReducer> madpipe::runtime::make_mpi_reducer(
    MPI_Comm replicas) {
  return std::make_unique<MpiReducer>(replicas);
}

madpipe::runtime::GradientAverager::GradientAverager(MPI_Comm replicas, int count, int num_stages,
                                                     int micro_batches)
    : GradientAverager(make_mpi_reducer(replicas), count, num_stages, micro_batches) {}

madpipe::runtime::GradientAverager::GradientAverager(std::unique_ptr<ReplicaReducer> reducer,
                                                     int count, int num_stages, int micro_batches,
                                                     std::int64_t bucket_bytes)
    : reducer_(std::move(reducer)),
      count_(count),
      micro_batches_(micro_batches),
      bucket_bytes_(bucket_bytes),
      backwards_(static_cast<std::size_t>(num_stages), 0) {}

madpipe::runtime::GradientAverager::~GradientAverager() {
  // All-reduces left behind by an error: the run is aborting; they are neither waited for nor
  // freed (PendingSum::abandon).
  for (Pending& p : pending_)
    if (p.sum && !p.done) p.sum->abandon();
}

void madpipe::runtime::GradientAverager::backward_done(
    int stage, const std::function<std::vector<at::Tensor>()>& parameters) {
  for (Pending& p : pending_) p.sum->progress();
  if (++backwards_.at(static_cast<std::size_t>(stage)) == micro_batches_)
    start(stage, parameters());
}

void madpipe::runtime::GradientAverager::bind_gradients(int stage,
                                                        const std::vector<at::Tensor>& parameters) {
  if (count_ <= 1 || parameters.empty()) return;
  const at::TensorOptions options = parameters.front().options();
  for (const at::Tensor& p : parameters)
    if ((p.scalar_type() != at::kFloat && p.scalar_type() != at::kDouble) ||
        p.scalar_type() != options.dtype() || p.device() != options.device()) {
      bound_.erase(stage);
      return;
    }
  // A parameter of two local stages (tied) is not bound: the later stage's backward would add
  // into a gradient the earlier one's all-reduce is summing. Both stages copy instead.
  for (auto it = bound_.begin(); it != bound_.end(); ++it) {
    if (it->first == stage) continue;
    for (const at::Tensor& mine : parameters)
      for (const at::Tensor& theirs : it->second.parameters)
        if (mine.is_same(theirs)) {
          bound_.erase(it);
          bound_.erase(stage);
          return;
        }
  }
  BoundStage& bound = bound_[stage];
  const bool same =
      bound.parameters.size() == parameters.size() &&
      std::equal(parameters.begin(), parameters.end(), bound.parameters.begin(),
                 [](const at::Tensor& a, const at::Tensor& b) { return a.is_same(b); });
  std::vector<std::int64_t> bytes;
  for (const at::Tensor& p : parameters) bytes.push_back(p.numel() * p.element_size());
  const std::vector<GradientBucket> buckets = gradient_buckets(bytes, bucket_bytes_);
  if (!same) {
    bound.parameters = parameters;
    bound.buffers.clear();
    for (const GradientBucket& bucket : buckets) {
      std::int64_t numel = 0;
      for (int i = bucket.first; i < bucket.last; ++i) numel += parameters[i].numel();
      bound.buffers.push_back(at::zeros({numel}, options.requires_grad(false)));
    }
  } else {
    for (at::Tensor& buffer : bound.buffers) buffer.zero_();
  }
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    std::int64_t offset = 0;
    for (int i = buckets[k].first; i < buckets[k].last; ++i) {
      const at::Tensor& p = parameters[static_cast<std::size_t>(i)];
      // Sharing the bucket's storage without being an autograd view of it: the optimizers'
      // zero_grad detaches gradients in place, which a view refuses.
      p.mutable_grad() = at::empty({0}, options.requires_grad(false))
                             .set_(bound.buffers[k].storage(), offset, p.sizes());
      offset += p.numel();
    }
  }
}

bool madpipe::runtime::GradientAverager::still_bound(
    const BoundStage& bound, const std::vector<at::Tensor>& parameters) const {
  if (bound.parameters.size() != parameters.size()) return false;
  std::size_t i = 0;
  for (const at::Tensor& buffer : bound.buffers) {
    const auto* base = static_cast<const char*>(buffer.data_ptr());
    std::int64_t offset = 0;
    while (i < parameters.size() && offset < buffer.numel()) {
      const at::Tensor& p = parameters[i];
      if (!p.is_same(bound.parameters[i]) || !p.grad().defined() ||
          p.grad().data_ptr() != base + offset * buffer.element_size())
        return false;
      offset += p.numel();
      ++i;
    }
  }
  return i == parameters.size();
}

void madpipe::runtime::GradientAverager::start(int stage, std::vector<at::Tensor> parameters) {
  if (count_ <= 1 || parameters.empty()) return;
  const auto bound = bound_.find(stage);
  if (bound != bound_.end() && still_bound(bound->second, parameters)) {
    for (const at::Tensor& buffer : bound->second.buffers) {
      Pending pending;
      pending.stage = stage;
      pending.buffer = buffer;  // the gradients themselves
      pending.sum = reducer_->start(buffer);
      pending_.push_back(std::move(pending));
    }
    return;
  }
  // Summed in the gradients' precision when it is float or double (as NCCL does), else in float.
  const at::ScalarType dtype =
      parameters.front().scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  std::vector<std::int64_t> bytes;
  bytes.reserve(parameters.size());
  for (at::Tensor& p : parameters) {
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    bytes.push_back(p.numel() * static_cast<std::int64_t>(c10::elementSize(dtype)));
  }
  for (const GradientBucket& bucket : gradient_buckets(bytes, bucket_bytes_)) {
    Pending pending;
    pending.stage = stage;
    std::vector<at::Tensor> flat;
    for (int i = bucket.first; i < bucket.last; ++i) {
      at::Tensor& p = parameters[static_cast<std::size_t>(i)];
      flat.push_back(p.grad().detach().reshape({-1}).to(dtype));
      pending.parameters.push_back(p);
    }
    pending.buffer = at::cat(flat).contiguous();
    pending.sum = reducer_->start(pending.buffer);
    pending_.push_back(std::move(pending));
  }
}

void madpipe::runtime::GradientAverager::finish() {
  for (Pending& p : pending_) {
    if (p.done) continue;
    p.sum->wait(timeout_s_, "for the gradient all-reduce of stage " + std::to_string(p.stage) +
                                " over its " + std::to_string(count_) +
                                " replicas (is a replica stuck or gone? a longer step needs a "
                                "larger --transfer-timeout)");
    p.done = true;
  }
  for (Pending& p : pending_) {
    p.buffer.div_(count_);
    std::int64_t offset = 0;
    for (at::Tensor& parameter : p.parameters) {
      at::Tensor grad = parameter.mutable_grad();
      const std::int64_t n = grad.numel();
      grad.copy_(p.buffer.narrow(0, offset, n).view(grad.sizes()));
      offset += n;
    }
  }
  pending_.clear();
  std::fill(backwards_.begin(), backwards_.end(), 0);
}
