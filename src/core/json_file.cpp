#include "core/json_file.hpp"

#include "core/error.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string_view>

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

// nlohmann's messages start with "[json.exception.parse_error.101] "; keep what follows.
static std::string strip_exception_id(const char* what) {
  const std::string_view text(what);
  if (!text.empty() && text.front() == '[') {
    const std::size_t close = text.find("] ");
    if (close != std::string_view::npos) return std::string(text.substr(close + 2));
  }
  return std::string(text);
}

// Deeper than any madpipe file needs (they nest 4 levels). Messages print offending values with
// dump(), which recurses: without a limit a file of a few hundred kB of "[[[[" overflows the stack.
static constexpr int kMaxDepth = 256;

nlohmann::json madpipe::read_json_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(ErrorKind::Io, path, "", "cannot open file: is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(ErrorKind::Io, path, "", std::string("cannot open file: ") + std::strerror(errno));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error(ErrorKind::Io, path, "", "cannot read file");
  const nlohmann::json::parser_callback_t limit_depth =
      [&path](int depth, nlohmann::json::parse_event_t event, const nlohmann::json&) {
        const bool opens = event == nlohmann::json::parse_event_t::object_start ||
                           event == nlohmann::json::parse_event_t::array_start;
        if (opens && depth >= kMaxDepth)
          throw Error(ErrorKind::InvalidInput, path, "",
                      "invalid JSON: nested deeper than " + std::to_string(kMaxDepth) + " levels");
        return true;
      };
  try {
    return nlohmann::json::parse(text, limit_depth);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(
        ErrorKind::InvalidInput, path, "",
        "invalid JSON (byte " + std::to_string(e.byte) + "): " + strip_exception_id(e.what()));
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::InvalidInput, path, "", "invalid JSON: " + strip_exception_id(e.what()));
  }
}

void madpipe::write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      throw Error(ErrorKind::Io, path, "",
                  "cannot open '" + tmp + "' for writing: " + std::strerror(errno));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      throw Error(ErrorKind::Io, path, "", "cannot write '" + tmp + "'");
    }
  }
  try {
    sync_to_disk(tmp);
  } catch (const Error&) {
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(tmp.c_str());
    throw Error(ErrorKind::Io, path, "", "cannot rename '" + tmp + "' to it: " + reason);
  }
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  sync_to_disk(parent.empty() ? "." : parent.string());
}

void madpipe::sync_to_disk(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw Error(ErrorKind::Io, path, "",
                std::string("cannot open it to flush it to the disk: ") + std::strerror(errno));
  const int result = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  // Some file systems cannot flush a directory (EINVAL, ENOTSUP, ENOSYS, EBADF on FUSE and network
  // file systems): the rename is as durable as they make it.
  const bool unsupported = error == EINVAL || error == ENOTSUP || error == ENOSYS || error == EBADF;
  if (result != 0 && !(unsupported && std::filesystem::is_directory(path)))
    throw Error(ErrorKind::Io, path, "",
                std::string("cannot flush it to the disk: ") + std::strerror(error));
}
