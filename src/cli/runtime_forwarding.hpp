#pragma once

#include <string>
#include <vector>

namespace madpipe::cli {

// The `madpipe` that plans loads neither LibTorch nor MPI: `train`, `profile` and
// `export-weights` run in `madpipe-runtime`, installed next to it, which this process becomes
// (exec: the same process, arguments, environment and exit status, so that mpirun and srun see
// no difference). Throws Error{Unsupported} naming the path when it is missing.
[[noreturn]] void run_in_runtime_binary(const std::string& command,
                                        const std::vector<std::string>& args);

int train_in_runtime_binary(const std::vector<std::string>& args);
int profile_in_runtime_binary(const std::vector<std::string>& args);
int export_weights_in_runtime_binary(const std::vector<std::string>& args);

}  // namespace madpipe::cli
