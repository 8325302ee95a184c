#pragma once

#include <functional>
#include <vector>

#include <mpi.h>
#include <torch/torch.h>

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

 private:
  ReplicaLayout layout_;
  MPI_Comm pipeline_ = MPI_COMM_NULL;
  MPI_Comm replicas_ = MPI_COMM_NULL;
};

// Averages gradients over the replicas of a stage: all of a stage's gradients go in one
// non-blocking all-reduce (MPI_Iallreduce of one flat buffer, staged in host memory), started as
// soon as the stage's last backward of the step is done, so that it runs while the rank's other
// stages and the earlier stages on other ranks still compute. finish() waits for every started
// all-reduce and writes the means back into the gradients.
class GradientAverager {
 public:
  // `count` replicas; a step runs `micro_batches` backwards of each stage.
  GradientAverager(MPI_Comm replicas, int count, int num_stages, int micro_batches);
  ~GradientAverager();
  GradientAverager(const GradientAverager&) = delete;
  GradientAverager& operator=(const GradientAverager&) = delete;

  // After each backward of a local stage: the step's last one starts the all-reduce of the
  // stage's parameters' gradients (an undefined gradient counts as zero). Replicas call it in
  // the same order, as they run the same program.
  void backward_done(int stage, const std::function<std::vector<torch::Tensor>()>& parameters);
  // Waits for the step's all-reduces, writes the means into the gradients, and starts counting
  // the next step's backwards. A wait longer than the timeout (> 0 s) throws Error{Runtime}
  // naming the stage; the all-reduces stay pending, so finish() may be called again.
  void finish();
  void set_timeout(double seconds) noexcept { timeout_s_ = seconds; }
  int count() const noexcept { return count_; }

 private:
  struct Pending {
    int stage = 0;
    std::vector<torch::Tensor> parameters;
    torch::Tensor buffer;  // host, contiguous
    MPI_Request request = MPI_REQUEST_NULL;
  };
  void start(int stage, std::vector<torch::Tensor> parameters);
  void wait(Pending& pending) const;

  MPI_Comm replicas_;
  int count_;
  double timeout_s_ = 0;
  int micro_batches_;
  std::vector<int> backwards_;  // this step's, per stage
  std::vector<Pending> pending_;
};

}  // namespace madpipe::runtime
