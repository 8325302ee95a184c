#pragma once

#include "runtime/model/batch.hpp"
#include "runtime/model/model.hpp"

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
  LossKind loss = LossKind::Mse;    // mse (against zeros) or cross-entropy (class 0, last dim)
};

// The chain of a TorchScript module for training (`--model script --script FILE`), as its forward
// computes: its top-level children in the order forward calls them, each layer a copy of one
// child followed by the forward's statements up to the next child call (the first layer also
// runs those before the first call); `loss` (cross-entropy: logits over the last dimension
// against int64 targets; mse: against float targets of the output's shape). The file is loaded
// once and kept until ChainModel::release_source. Parameters that children share are the model's
// tied_parameters. Holds no layer. Throws Error{Io} when the file cannot be loaded and
// Error{InvalidInput} naming the file and the child, or the first statement of forward that does
// not fit a chain (a value used past the next child call, control flow, a tensor of the module
// itself, a child called twice or never), when the module has no children or a child's forward
// does not take one tensor and return one.
ChainModel script_chain_model(const std::string& path, LossKind loss);

// Runs `sample` (one micro-batch, on the CPU) through a chain of script_chain_model, each layer
// built for its forward alone, then the loss: Error{InvalidInput} naming the file and the layer
// whose forward fails on what the previous one gave (shapes that do not chain, a dtype the layer
// does not take), or the loss that does not fit the last output and the targets; and, in
// evaluation mode, compares the chain's output with the module's own forward on the sample:
// Error{InvalidInput} when they differ.
void check_script_chain(ChainModel& model, const Batch& sample, const std::string& path);

// Throws Error{Io} when the file cannot be loaded and Error{InvalidInput} (naming the file) when
// the module has no children, a child does not map a tensor to a tensor, or the options are bad.
ScriptChain load_script_chain(const std::string& path, const ScriptInput& input,
                              const torch::Device& device);

// "8,3,224,224" -> {8, 3, 224, 224}; throws Error{InvalidInput} naming `field`.
std::vector<std::int64_t> parse_shape(const std::string& text, const std::string& field);

}  // namespace madpipe::runtime
