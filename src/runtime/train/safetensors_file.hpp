#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace madpipe::runtime {

// Writes `tensors` (in order) as a safetensors file, atomically: an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range (and `metadata`,
// string values), padded with spaces to 8 bytes, then the tensors' bytes, little-endian and
// row-major. What Hugging Face's safetensors package loads (safetensors.torch.load_file).
// Throws Error{InvalidInput} naming the key of a tensor of a dtype safetensors has no name for.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace madpipe::runtime
