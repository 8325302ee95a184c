#include "runtime/replicas.hpp"

#include "core/error.hpp"
#include "runtime/mpi_session.hpp"

#include <algorithm>
#include <memory>
#include <string>

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

madpipe::runtime::ReplicaGroups::~ReplicaGroups() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Comm_free(&pipeline_);
  MPI_Comm_free(&replicas_);
}

madpipe::runtime::GradientAverager::GradientAverager(MPI_Comm replicas, int count, int num_stages,
                                                     int micro_batches)
    : replicas_(replicas),
      count_(count),
      micro_batches_(micro_batches),
      backwards_(static_cast<std::size_t>(num_stages), 0) {}

madpipe::runtime::GradientAverager::~GradientAverager() {
  // All-reduces left behind by an error: the run is aborting. An active collective may not be
  // freed (MPI_Request_free), and waiting could hang on a replica that never joins: it stays
  // active, with its buffer alive, until the abort or MPI_Finalize.
  for (Pending& p : pending_)
    if (p.request != MPI_REQUEST_NULL)
      keep_alive_until_exit(std::make_shared<torch::Tensor>(std::move(p.buffer)));
}

void madpipe::runtime::GradientAverager::backward_done(
    int stage, const std::function<std::vector<torch::Tensor>()>& parameters) {
  if (++backwards_.at(static_cast<std::size_t>(stage)) == micro_batches_)
    start(stage, parameters());
}

void madpipe::runtime::GradientAverager::start(int stage, std::vector<torch::Tensor> parameters) {
  if (count_ <= 1 || parameters.empty()) return;
  // Summed in the gradients' precision when it is float or double (as NCCL does), else in float.
  const torch::Dtype dtype =
      parameters.front().scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  std::vector<torch::Tensor> flat;
  flat.reserve(parameters.size());
  for (torch::Tensor& p : parameters) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    flat.push_back(p.grad().detach().reshape({-1}).to(torch::kCPU, dtype));
  }
  Pending pending;
  pending.stage = stage;
  pending.parameters = std::move(parameters);
  pending.buffer = torch::cat(flat).contiguous();
  if (pending.buffer.numel() > 2147483647LL)
    throw Error(ErrorKind::Unsupported, "", "replicas",
                "a stage with more than 2^31 parameters is beyond the MPI gradient all-reduce");
  MPI_Iallreduce(MPI_IN_PLACE, pending.buffer.data_ptr(), static_cast<int>(pending.buffer.numel()),
                 dtype == torch::kFloat64 ? MPI_DOUBLE : MPI_FLOAT, MPI_SUM, replicas_,
                 &pending.request);
  pending_.push_back(std::move(pending));
}

void madpipe::runtime::GradientAverager::wait(Pending& pending) const {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  wait_with_deadline(pending.request, timeout_s_, rank,
                     "for the gradient all-reduce of stage " + std::to_string(pending.stage) +
                         " over its " + std::to_string(count_) +
                         " replicas (is a replica stuck or gone? a longer step needs a larger "
                         "--transfer-timeout)");
}

void madpipe::runtime::GradientAverager::finish() {
  for (Pending& p : pending_) {
    if (p.request != MPI_REQUEST_NULL) wait(p);
  }
  for (Pending& p : pending_) {
    p.buffer.div_(count_);
    std::int64_t offset = 0;
    for (torch::Tensor& parameter : p.parameters) {
      torch::Tensor grad = parameter.mutable_grad();
      const std::int64_t n = grad.numel();
      grad.copy_(p.buffer.narrow(0, offset, n).view(grad.sizes()));
      offset += n;
    }
  }
  pending_.clear();
  std::fill(backwards_.begin(), backwards_.end(), 0);
}
