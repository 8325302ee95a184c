#pragma once

// Shared by the MPI tests: pipelined training next to unsplit training on the same data.

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "runtime/data.hpp"
#include "runtime/executor.hpp"
#include "runtime/model.hpp"
#include "schedule/program.hpp"

namespace madpipe::testing {

// Runs `steps` SGD steps (lr 0.1, momentum 0.9) of `program` on `executor` and of the unsplit
// `reference` over the same micro-batches, checking that every step's loss agrees.
inline void train_side_by_side(runtime::PipelineExecutor& executor, runtime::ChainModel& reference,
                               const schedule::Program& program, runtime::DataSource& data,
                               int steps, int micro_batches) {
  std::vector<std::unique_ptr<torch::optim::SGD>> optimizers;
  for (int s : executor.local_stages()) {
    auto params = executor.stage_parameters(s);
    if (!params.empty())
      optimizers.push_back(std::make_unique<torch::optim::SGD>(
          params, torch::optim::SGDOptions(0.1).momentum(0.9)));
  }
  const int layers = static_cast<int>(reference.layers.size());
  torch::optim::SGD reference_optimizer(reference.parameters(0, layers - 1),
                                        torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < steps; ++step) {
    auto batch_of = [&](int i) { return data.micro_batch(step, i, false); };
    for (auto& o : optimizers) o->zero_grad();
    const runtime::StepLoss loss = executor.run(program, batch_of);
    for (auto& o : optimizers) o->step();
    reference_optimizer.zero_grad();
    const runtime::StepLoss expected = runtime::run_unsplit(reference, micro_batches, batch_of);
    reference_optimizer.step();
    if (loss.count > 0) {
      EXPECT_EQ(loss.count, micro_batches);
      EXPECT_NEAR(loss.sum, expected.sum, 1e-5 * std::abs(expected.sum) + 1e-6) << "step " << step;
    }
  }
}

}  // namespace madpipe::testing
