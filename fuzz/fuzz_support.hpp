#pragma once

// Shared by the fuzz targets (docs/testing.md). A target feeds its bytes to a reader and lets
// only madpipe::Error through; anything else (another exception type, which escapes
// LLVMFuzzerTestOneInput and aborts, a crash, an ASan or UBSan report, a hang, a huge
// allocation) is a finding libFuzzer saves as crash-*, timeout-* or oom-*.

#include "core/error.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include <unistd.h>

namespace madpipe::fuzz {

// Aborts with a message: a property the target checks does not hold.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "madpipe fuzz finding: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Errors of kind Internal mean "cannot happen": the reader must not get there on any input.
inline void expect_user_error(const madpipe::Error& e) {
  if (e.kind() == madpipe::ErrorKind::Internal) finding(std::string("internal error: ") + e.what());
}

// Writes the input to a file of this process (TMPDIR or /tmp) and returns its path: the targets
// go through the readers' file entry points (read_profile, read_plan, ...), as the CLI does.
// The file is removed when the process exits normally.
inline std::string input_file(const std::uint8_t* data, std::size_t size, const char* suffix) {
  struct File {
    std::string path;
    ~File() { std::remove(path.c_str()); }
  };
  static const File file{[suffix] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/madpipe-fuzz-" +
           std::to_string(static_cast<long>(getpid())) + suffix;
  }()};
  const std::string& path = file.path;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) finding("cannot write the input to " + path);
  return path;
}

// Calls `read` (a reader's file entry point) on the input written to a file: what it read, or
// nothing when it refused the input with a madpipe::Error.
template <class Read>
auto read_input(const std::uint8_t* data, std::size_t size, const char* suffix, Read read)
    -> std::optional<decltype(read(std::string()))> {
  const std::string path = input_file(data, size, suffix);
  try {
    return read(path);
  } catch (const madpipe::Error& e) {
    expect_user_error(e);
    return std::nullopt;
  }
}

// What a reader accepted must read back the same once written: to_json(from_json(to_json(x)))
// equals to_json(x), and from_json does not refuse it.
template <class Value, class ToJson, class FromJson>
void expect_round_trip(const Value& value, ToJson to_json, FromJson from_json, const char* what) {
  try {
    const auto written = to_json(value);
    if (to_json(from_json(written, "round-trip.json")) != written)
      finding(std::string("the ") + what + " changed through its JSON and back");
  } catch (const madpipe::Error& e) {
    finding(std::string("an accepted ") + what + " is refused once written: " + e.what());
  }
}

}  // namespace madpipe::fuzz
