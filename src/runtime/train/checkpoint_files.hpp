#pragma once

#include <filesystem>
#include <string>

#include <torch/torch.h>

namespace madpipe::runtime {

// The files of a checkpoint are written alike: to <file>.tmp, flushed to the disk, then renamed,
// then <file>.sum, the FNV-1a 64 checksum of its bytes (atomically). A file without its checksum,
// or whose bytes no longer match it, is not whole.

// Writes `archive` to `target` as above. `inject_fault`: throws Error{Io} after the temporary
// file is written and before the rename (the tests' stand-in for a crash or a full disk there).
// Throws Error{Io} naming the file when it cannot be written.
void save_archive(torch::serialize::OutputArchive& archive, const std::filesystem::path& target,
                  bool inject_fault = false);

// Empty when `file` is whole (present, checksum present and equal); else what is wrong, naming
// the file.
std::string verify_file(const std::filesystem::path& file);

// Verifies `file`, then loads it onto `device`; throws Error{Io} naming the file when missing,
// damaged or unreadable.
void load_archive(torch::serialize::InputArchive& archive, const std::filesystem::path& file,
                  const torch::Device& device);

// Deletes `dir` and everything in it (through POSIX nftw: std::filesystem::remove_all may bind to
// LibTorch's own copy, which crashes with some compilers). Throws Error{Io} naming what it could
// not delete.
void remove_tree(const std::filesystem::path& dir);

// Whether MADPIPE_CHECKPOINT_FAULT names `step`: its checkpoint fails between a file and its
// rename (docs/testing.md).
bool checkpoint_fault_requested(int step);

}  // namespace madpipe::runtime
