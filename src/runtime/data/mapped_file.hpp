#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace madpipe::runtime {

// A whole file mapped read-only into memory: the operating system pages it in as it is read, so
// a file larger than memory can be sampled. Throws Error{Io} naming the file when it cannot be
// opened or mapped.
class MappedFile {
 public:
  explicit MappedFile(std::string path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&&) = delete;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace madpipe::runtime
