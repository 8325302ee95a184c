#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <mpi.h>

namespace madpipe::runtime {

// D replicas of a P-rank pipeline on D * P MPI ranks. World rank r is position r % P (the plan's
// GPU id) of replica r / P: a pipeline's ranks are consecutive, so its neighbours share a node
// whenever P divides the ranks per node, and the replicas of a stage are P ranks apart.
struct ReplicaLayout {
  int replicas = 1;        // D
  int pipeline_ranks = 1;  // P
  int replica = 0;         // d of this rank
  int position = 0;        // p of this rank
};

// Throws Error{InvalidInput} (field "replicas") when `replicas` < 1 or does not divide the world.
ReplicaLayout replica_layout(int world_rank, int world_size, int replicas);

class NcclCommunicators;  // runtime/comm/nccl.hpp

// The communicators of a layout. Collective over MPI_COMM_WORLD (construction and destruction).
class ReplicaGroups {
 public:
  explicit ReplicaGroups(const ReplicaLayout& layout);
  ~ReplicaGroups();
  ReplicaGroups(const ReplicaGroups&) = delete;
  ReplicaGroups& operator=(const ReplicaGroups&) = delete;

  const ReplicaLayout& layout() const noexcept { return layout_; }
  // The P ranks of this rank's replica, ranked by position.
  MPI_Comm pipeline() const noexcept { return pipeline_; }
  // The D ranks at this rank's position, ranked by replica.
  MPI_Comm replicas() const noexcept { return replicas_; }
  // NCCL communicators over the same ranks (--transport nccl), or null.
  NcclCommunicators* nccl() const noexcept { return nccl_.get(); }
  void set_nccl(std::unique_ptr<NcclCommunicators> nccl);

 private:
  ReplicaLayout layout_;
  MPI_Comm pipeline_ = MPI_COMM_NULL;
  MPI_Comm replicas_ = MPI_COMM_NULL;
  std::unique_ptr<NcclCommunicators> nccl_;
};

// Consecutive parameters grouped into buckets of at most `bucket_bytes` (a larger parameter is a
// bucket alone), each summed by one collective: [first, last) indices into `bytes`.
struct GradientBucket {
  int first = 0;
  int last = 0;
};
std::vector<GradientBucket> gradient_buckets(const std::vector<std::int64_t>& bytes,
                                             std::int64_t bucket_bytes);

// An all-reduce (sum) in flight.
class PendingSum {
 public:
  virtual ~PendingSum() = default;
  // Moves the sum on without waiting (a sum of a device buffer through host memory starts once
  // its copy to the host is done).
  virtual void progress() {}
  // Waits until the sum is in the buffer; longer than `timeout_s` (> 0) throws Error{Runtime}
  // naming `what`, and the sum stays pending, so that wait() may be called again.
  virtual void wait(double timeout_s, const std::string& what) = 0;
  // For a destructor unwinding an error: the sum is left in flight, its buffer kept alive.
  virtual void abandon() = 0;
};

// Sums buffers over the replicas of a stage, asynchronously: MPI (device buffers staged through
// pinned host memory, runtime/device/device_staging.hpp) or NCCL (on the GPU, make_nccl_reducer in
// nccl.hpp).
class ReplicaReducer {
 public:
  virtual ~ReplicaReducer() = default;
  // Starts summing `buffer` (contiguous, float or double, on the gradients' device) in place over
  // the replicas.
  virtual std::unique_ptr<PendingSum> start(at::Tensor buffer) = 0;
};
std::unique_ptr<ReplicaReducer> make_mpi_reducer(MPI_Comm replicas);

// Averages gradients over the replicas of a stage: a stage's gradients go in buckets of
// consecutive parameters (gradient_buckets), each one non-blocking all-reduce, all started as
// soon as the stage's last backward of the step is done, so that they run while the rank's other
// stages and the earlier stages on other ranks still compute. finish() waits for every started
// all-reduce and writes the means back into the gradients.
class GradientAverager {
 public:
  static constexpr std::int64_t kDefaultBucketBytes = 25LL << 20;
  // `count` replicas; a step runs `micro_batches` backwards of each stage. Sums over MPI.
  GradientAverager(MPI_Comm replicas, int count, int num_stages, int micro_batches);
  GradientAverager(std::unique_ptr<ReplicaReducer> reducer, int count, int num_stages,
                   int micro_batches, std::int64_t bucket_bytes = kDefaultBucketBytes);
  ~GradientAverager();
  GradientAverager(const GradientAverager&) = delete;
  GradientAverager& operator=(const GradientAverager&) = delete;

  // After each backward of a local stage: the step's last one starts the all-reduces of the
  // stage's parameters' gradients (an undefined gradient counts as zero). Replicas call it in
  // the same order, as they run the same program.
  void backward_done(int stage, const std::function<std::vector<at::Tensor>()>& parameters);
  // Before a step's first backward of `stage` (after the optimizers' zero_grad): the stage's
  // gradients become views into zeroed buffers, one per bucket, which the all-reduce then sums in
  // place, as PyTorch's DDP does: no copy of the gradients and no buffer beyond them. A stage not
  // bound (its gradients replaced since, not float or double, or a parameter shared with another
  // local stage) has its buckets copied into flat buffers and back, which hold a gradient-sized
  // allocation until finish().
  void bind_gradients(int stage, const std::vector<at::Tensor>& parameters);
  // Waits for the step's all-reduces, writes the means into the gradients, and starts counting
  // the next step's backwards. A wait longer than the timeout (> 0 s) throws Error{Runtime}
  // naming the stage; the all-reduces stay pending, so finish() may be called again.
  void finish();
  void set_timeout(double seconds) noexcept { timeout_s_ = seconds; }
  int count() const noexcept { return count_; }
  // All-reduces started since the last finish() (buckets of every stage).
  int pending() const noexcept { return static_cast<int>(pending_.size()); }

 private:
  struct Pending {
    int stage = 0;
    std::vector<at::Tensor> parameters;  // of the bucket; none when the gradients are views
    at::Tensor buffer;                   // their gradients, flat
    std::unique_ptr<PendingSum> sum;
    bool done = false;
  };
  struct BoundStage {
    std::vector<at::Tensor> parameters;
    std::vector<at::Tensor> buffers;  // one per bucket; the parameters' gradients view them
  };
  void start(int stage, std::vector<at::Tensor> parameters);
  bool still_bound(const BoundStage& bound, const std::vector<at::Tensor>& parameters) const;

  std::unique_ptr<ReplicaReducer> reducer_;
  int count_;
  double timeout_s_ = 0;
  int micro_batches_;
  std::int64_t bucket_bytes_;
  std::vector<int> backwards_;  // this step's, per stage
  std::vector<Pending> pending_;
  std::map<int, BoundStage> bound_;
};

}  // namespace madpipe::runtime
