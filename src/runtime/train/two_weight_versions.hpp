#pragma once

#include "runtime/exec/executor.hpp"

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include <torch/torch.h>

namespace madpipe::runtime {

// Asynchronous training with two weight versions per stage (PipeDream-2BW, thesis ch. 6.3.3):
// no flush; micro-batches form generations of m; generation g runs forward and backward on
// version W(g-1) (W(-1) = W(0)), and when the last backward of generation g on a stage is done,
// the stage computes W(g+1) = W(g) - optimizer(gradient of generation g). With m >= NCA no
// micro-batch of generation g+1 starts before generation g-1 is done, so exactly two versions
// are alive: they live in two model copies, micro-batch i using copy (i/m + 1) mod 2. The
// optimizer keeps its own copy of the newest version (and its state). The updates are the
// program's OptimizerStep instructions (lowered with LowerOptions::update_micro_batches = m).
// The copies share their buffers (batch-norm statistics). Validation runs on copy 0, which
// synchronize_copies() leaves holding the newest version.
class TwoWeightVersions {
 public:
  using OptimizerFactory =
      std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

  TwoWeightVersions(PipelineExecutor& executor, ChainModel& second, int update_micro_batches,
                    const OptimizerFactory& make_optimizer);

  // Parameters of the newest version of a local stage.
  const std::vector<torch::Tensor>& newest(int stage) const { return newest_.at(stage); }
  // The optimizer of a local stage's newest version (null: the stage has no parameters).
  torch::optim::Optimizer* optimizer(int stage) const;
  int updates() const noexcept { return updates_; }

  // After a flush (no micro-batch in flight): both copies take the newest version, so that the
  // next program starts as from W(0) = W(-1) = the newest weights (a checkpoint loaded into
  // newest(), say), and the executor's model holds the newest version (for validation).
  void synchronize_copies();

  // Called before each stage's optimizer step with the update's generation (0: the first of the
  // program): sets what varies by step, such as the learning rate.
  void before_each_update(std::function<void(torch::optim::Optimizer&, int generation)> prepare) {
    prepare_ = std::move(prepare);
  }

 private:
  int copy_of(int stage, int micro_batch);
  void update(int stage, int generation);

  PipelineExecutor& executor_;
  int m_;
  std::map<int, std::vector<torch::Tensor>> newest_;  // stage -> newest version
  std::map<int, std::unique_ptr<torch::optim::Optimizer>> optimizers_;
  std::map<int, std::set<int>> in_flight_;  // stage -> its micro-batches between F and B
  int updates_ = 0;
  std::function<void(torch::optim::Optimizer&, int)> prepare_;
};

}  // namespace madpipe::runtime
