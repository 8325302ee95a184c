#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace madpipe::runtime {

// A checkpoint keyed by the model, not by the plan: <dir>/checkpoints/step-<k>/layers/layer-<l>.pt
// for every layer l of the chain (each with its .sum, see checkpoint_files.hpp), written by the
// rank that holds the layer in replica 0. A file holds the layer's parameters (what trains: the
// fp32 masters of bf16 and fp16 runs) and buffers under their state_dict keys, and each
// parameter's optimizer state; a resumed run loads, on each rank, the files of the layers its
// plan gives it, whatever plan, GPU count or replica count wrote them.

// One layer as a rank holds it.
struct LayerState {
  int layer = 0;
  std::vector<std::string> parameter_keys, buffer_keys;  // ChainModel::parameter_keys(l, l)
  std::vector<torch::Tensor> parameters, buffers;
  // Per parameter: the optimizer that steps it on this rank (null: none, or no state).
  std::vector<torch::optim::Optimizer*> optimizers;
};

std::filesystem::path layer_file(const std::string& dir, int step, int layer);
// Whether the checkpoint of `step` is keyed by the model (else: per stage, of an older madpipe).
bool holds_layer_files(const std::string& dir, int step);

// Writes the layer's file for the checkpoint of `step`.
void save_layer(const std::string& dir, int step, const LayerState& state);
// Empty when layer-<l>.pt of step k is whole, else what is wrong, naming the file.
std::string verify_layer(const std::string& dir, int step, int layer);
// Loads the layer's tensors and optimizer state onto `device`. Throws Error{Io} naming the file
// when missing, damaged or unreadable, Error{InvalidInput} naming the file and the tensor when
// the checkpoint's layer holds other tensors (names or shapes) than the model's.
void load_layer(const std::string& dir, int step, const LayerState& state,
                const torch::Device& device);
// The layer's parameters and buffers by their state_dict keys, onto the CPU (export-weights).
std::vector<std::pair<std::string, torch::Tensor>> read_layer_tensors(const std::string& dir,
                                                                      int step, int layer);

}  // namespace madpipe::runtime
