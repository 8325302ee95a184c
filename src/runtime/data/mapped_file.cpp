#include "runtime/data/mapped_file.hpp"

#include "core/error.hpp"

#include <cerrno>
#include <cstring>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

madpipe::runtime::MappedFile::MappedFile(std::string path) : path_(std::move(path)) {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(ErrorKind::Io, path_, "data", std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    const int problem = errno;
    ::close(fd);
    throw Error(ErrorKind::Io, path_, "data",
                S_ISREG(info.st_mode) ? std::strerror(problem) : "not a regular file");
  }
  size_ = static_cast<std::size_t>(info.st_size);
  if (size_ > 0) {
    void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (mapped == MAP_FAILED) {
      const int problem = errno;
      ::close(fd);
      throw Error(ErrorKind::Io, path_, "data",
                  std::string("cannot map: ") + std::strerror(problem));
    }
    data_ = static_cast<const std::uint8_t*>(mapped);
  }
  ::close(fd);  // the mapping stays valid
}

madpipe::runtime::MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

madpipe::runtime::MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::uint8_t*>(data_), size_);
}
