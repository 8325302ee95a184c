#include "runtime/train/checkpoint_files.hpp"

#include "core/error.hpp"
#include "core/json_file.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <ftw.h>

namespace fs = std::filesystem;

namespace {
fs::path sum_file(const fs::path& file) { return file.string() + ".sum"; }

// FNV-1a 64 of a file's bytes, as 16 hex digits; empty when the file cannot be read.
std::string checksum_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return "";
  std::uint64_t hash = 1469598103934665603ULL;
  char buffer[1 << 16];
  while (in) {
    in.read(buffer, sizeof buffer);
    for (std::streamsize i = 0; i < in.gcount(); ++i) {
      hash ^= static_cast<unsigned char>(buffer[i]);
      hash *= 1099511628211ULL;
    }
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

std::string read_first_line(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line;
}
}  // namespace

void madpipe::runtime::save_archive(torch::serialize::OutputArchive& archive,
                                    const fs::path& target, bool inject_fault) {
  fs::create_directories(target.parent_path());
  const fs::path tmp = target.string() + ".tmp";
  try {
    archive.save_to(tmp.string());
  } catch (const c10::Error& e) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw Error(ErrorKind::Io, tmp.string(), "",
                std::string("cannot write checkpoint: ") + e.what_without_backtrace());
  }
  sync_to_disk(tmp.string());
  const std::string sum = checksum_of(tmp);
  if (sum.empty())
    throw Error(ErrorKind::Io, tmp.string(), "", "cannot read back the checkpoint just written");
  if (inject_fault)
    throw Error(ErrorKind::Io, target.string(), "",
                "fault injected before the rename (MADPIPE_CHECKPOINT_FAULT)");
  std::error_code error;
  fs::rename(tmp, target, error);
  if (error)
    throw Error(ErrorKind::Io, target.string(), "",
                "cannot rename '" + tmp.string() + "' to it: " + error.message());
  write_file_atomically(sum_file(target).string(), sum + "\n");
}

std::string madpipe::runtime::verify_file(const fs::path& file) {
  if (!fs::exists(file)) return file.string() + ": missing";
  const std::string expected = read_first_line(sum_file(file));
  if (expected.empty()) return sum_file(file).string() + ": missing or empty checksum";
  const std::string actual = checksum_of(file);
  if (actual != expected)
    return file.string() + ": checksum " + actual + " differs from the recorded " + expected +
           " (the file is damaged or partial)";
  return "";
}

void madpipe::runtime::load_archive(torch::serialize::InputArchive& archive, const fs::path& file,
                                    const torch::Device& device) {
  const std::string problem = verify_file(file);
  if (!problem.empty()) throw Error(ErrorKind::Io, file.string(), "", problem);
  try {
    archive.load_from(file.string(), device);
  } catch (const c10::Error& e) {
    throw Error(ErrorKind::Io, file.string(), "",
                std::string("cannot read checkpoint: ") + e.what_without_backtrace());
  }
}

namespace {
int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  return std::remove(path) == 0 ? 0 : -1;
}
}  // namespace

void madpipe::runtime::remove_tree(const fs::path& dir) {
  if (nftw(dir.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && fs::exists(dir))
    throw Error(ErrorKind::Io, dir.string(), "",
                std::string("cannot delete it: ") + std::strerror(errno));
}

bool madpipe::runtime::checkpoint_fault_requested(int step) {
  const char* value = std::getenv("MADPIPE_CHECKPOINT_FAULT");
  return value != nullptr && std::atoi(value) == step;
}
