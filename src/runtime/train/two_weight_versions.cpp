#include "runtime/train/two_weight_versions.hpp"

#include "core/error.hpp"

madpipe::runtime::TwoWeightVersions::TwoWeightVersions(PipelineExecutor& executor,
                                                       ChainModel& second, int update_micro_batches,
                                                       const OptimizerFactory& make_optimizer)
    : executor_(executor), m_(update_micro_batches) {
  for (int s : executor.local_stages()) {
    std::vector<torch::Tensor> newest;
    for (const torch::Tensor& p : executor.stage_parameters(s, 0))
      newest.push_back(p.detach().clone().requires_grad_(true));
    if (!newest.empty()) optimizers_[s] = make_optimizer(newest);
    newest_[s] = std::move(newest);
  }
  executor.use_two_weight_copies(
      second, [this](int stage, int i) { return copy_of(stage, i); },
      [this](int stage, int i) { in_flight_[stage].erase(i); });
  executor.on_optimizer_step([this](int stage, int generation) { update(stage, generation); });
  // One set of buffers (batch-norm statistics) for both copies: every training micro-batch
  // updates it in the order the stage runs them, and the checkpoint saves it.
  {
    torch::NoGradGuard no_grad;
    for (int s : executor.local_stages()) {
      const std::vector<torch::Tensor> first = executor.stage_buffers(s, 0);
      std::vector<torch::Tensor> second_buffers = executor.stage_buffers(s, 1);
      for (std::size_t b = 0; b < first.size(); ++b) second_buffers[b].set_(first[b]);
    }
  }
  // Both copies start as W(0): copy 1 serves generation 0 (as W(-1)), copy 0 generation 1.
  synchronize_copies();
}

torch::optim::Optimizer* madpipe::runtime::TwoWeightVersions::optimizer(int stage) const {
  auto it = optimizers_.find(stage);
  return it == optimizers_.end() ? nullptr : it->second.get();
}

void madpipe::runtime::TwoWeightVersions::synchronize_copies() {
  for (const auto& [stage, micro_batches] : in_flight_)
    if (!micro_batches.empty())
      throw Error(ErrorKind::Internal, "", "2bw",
                  "weight copies synchronized with micro-batch " +
                      std::to_string(*micro_batches.begin()) + " of stage " +
                      std::to_string(stage) + " in flight");
  torch::NoGradGuard no_grad;
  for (const auto& [stage, newest] : newest_)
    for (int copy = 0; copy < 2; ++copy) {
      const std::vector<torch::Tensor> params = executor_.stage_parameters(stage, copy);
      for (std::size_t p = 0; p < params.size(); ++p) params[p].copy_(newest[p]);
    }
}

int madpipe::runtime::TwoWeightVersions::copy_of(int stage, int micro_batch) {
  in_flight_[stage].insert(micro_batch);
  return (micro_batch / m_ + 1) % 2;
}

void madpipe::runtime::TwoWeightVersions::update(int stage, int generation) {
  // W(g+1) = W(g) - step(gradient of generation g), written into the copy generation g used.
  const int copy = (generation + 1) % 2;
  for (int i : in_flight_[stage])
    if ((i / m_ + 1) % 2 == copy)
      throw Error(ErrorKind::Internal, "", "2bw",
                  "micro-batch " + std::to_string(i) +
                      " still uses the weight copy that the "
                      "update of generation " +
                      std::to_string(generation) + " overwrites (NCA > m?)");
  const std::vector<torch::Tensor> params = executor_.stage_parameters(stage, copy);
  std::vector<torch::Tensor>& newest = newest_.at(stage);
  auto it = optimizers_.find(stage);
  if (it != optimizers_.end()) {
    // The copy's gradient moves to the newest version for the step, and goes after it: no
    // third gradient-sized tensor lives between updates.
    for (std::size_t p = 0; p < params.size(); ++p) {
      newest[p].mutable_grad() =
          params[p].grad().defined() ? params[p].grad().detach() : torch::zeros_like(newest[p]);
      params[p].mutable_grad() = torch::Tensor();
    }
    if (prepare_) prepare_(*it->second, generation);
    it->second->step();
    torch::NoGradGuard no_grad;
    for (std::size_t p = 0; p < params.size(); ++p) {
      params[p].copy_(newest[p]);
      newest[p].mutable_grad() = torch::Tensor();
    }
  }
  ++updates_;
}
