#include "cli/runtime_forwarding.hpp"

#include "core/error.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <unistd.h>

namespace fs = std::filesystem;

namespace {
fs::path runtime_binary() {
  std::error_code ignored;
  const fs::path self = fs::read_symlink("/proc/self/exe", ignored);
  return (self.empty() ? fs::path(".") : self.parent_path()) / "madpipe-runtime";
}
}  // namespace

void madpipe::cli::run_in_runtime_binary(const std::string& command,
                                         const std::vector<std::string>& args) {
  const fs::path runtime = runtime_binary();
  if (!fs::exists(runtime))
    throw Error(ErrorKind::Unsupported, "", command,
                "'madpipe " + command + "' runs in " + runtime.string() +
                    ", which is missing: this madpipe was built or installed without the runtime "
                    "(LibTorch and MPI)");
  std::vector<std::string> words{runtime.string(), command};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  execv(runtime.c_str(), argv.data());
  throw Error(ErrorKind::Runtime, "", command,
              "cannot run " + runtime.string() + ": " + std::strerror(errno));
}

int madpipe::cli::train_in_runtime_binary(const std::vector<std::string>& args) {
  run_in_runtime_binary("train", args);
}

int madpipe::cli::profile_in_runtime_binary(const std::vector<std::string>& args) {
  run_in_runtime_binary("profile", args);
}

int madpipe::cli::export_weights_in_runtime_binary(const std::vector<std::string>& args) {
  run_in_runtime_binary("export-weights", args);
}
