#pragma once

#include "runtime/data.hpp"
#include "runtime/model.hpp"

#include <string>
#include <vector>

#include <torch/torch.h>

namespace madpipe::runtime {

// A TorchScript module (a .pt file written by torch.jit.save, e.g. of a scripted or traced
// torch.nn.Sequential) as a chain: its top-level children, in order, are the layers. Each child
// takes one tensor and returns one. Layer parameters and buffers are the module's own tensors.
struct ScriptChain {
  ChainModel model;
  Batch sample;  // one micro-batch of the given shape and a matching target
};

struct ScriptInput {
  std::vector<std::int64_t> shape;  // the input of one micro-batch, batch dimension first
  std::string dtype = "float32";    // float32 (normal random values) or int64 (token 0)
  std::string loss = "mse";         // mse (against zeros) or cross-entropy (class 0, last dim)
};

// Throws Error{Io} when the file cannot be loaded and Error{InvalidInput} (naming the file) when
// the module has no children, a child does not map a tensor to a tensor, or the options are bad.
ScriptChain load_script_chain(const std::string& path, const ScriptInput& input,
                              const torch::Device& device);

// "8,3,224,224" -> {8, 3, 224, 224}; throws Error{InvalidInput} naming `field`.
std::vector<std::int64_t> parse_shape(const std::string& text, const std::string& field);

}  // namespace madpipe::runtime
