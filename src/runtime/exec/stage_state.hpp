#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

namespace madpipe::runtime {

// What a stage keeps from step to step: its weights, its buffers (batch-norm running
// statistics) and its optimizer (null: none).
struct StageState {
  std::vector<torch::Tensor> parameters;
  std::vector<torch::Tensor> buffers;
  torch::optim::Optimizer* optimizer = nullptr;
  // The state_dict keys of the tensors above (ChainModel::parameter_keys), saved with them for
  // export_weights(); empty: none saved.
  std::vector<std::string> parameter_keys{};
  std::vector<std::string> buffer_keys{};
};

}  // namespace madpipe::runtime
