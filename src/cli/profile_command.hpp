#pragma once

#include <string>
#include <vector>

namespace madpipe::cli {

// `madpipe profile`: measures every layer of a built-in model or a TorchScript chain on a
// device and writes a madpipe.profile/1 file.
int profile_command(const std::vector<std::string>& args);

}  // namespace madpipe::cli
