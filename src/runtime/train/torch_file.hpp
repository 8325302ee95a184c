#pragma once

#include <string>

#include <ATen/core/ivalue.h>

namespace madpipe::runtime {

// The bytes of torch.save's file format for `value` (a dict of tensors, say), without TorchScript
// type tags: Python reads it with torch.load, weights_only included (torch::pickle_save tags a
// typed dict as a call of torch.jit._pickle.restore_type_tag, which weights_only refuses).
std::string torch_file_bytes(const c10::IValue& value);

// torch_file_bytes(value), written atomically to `path`; throws Error{Io} naming it.
void write_torch_file(const std::string& path, const c10::IValue& value);

}  // namespace madpipe::runtime
