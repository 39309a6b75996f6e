// POSIX mmap implementation of di::mapped_file.
#include "common/mapped_file.hpp"

#include "common/error.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

namespace di {

mapped_file::mapped_file(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DI_CHECK(fd >= 0, "{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    int err = errno;
    ::close(fd);
    DI_FAIL("{}: not a regular file{}", path, err ? fmt::format(" ({})", std::strerror(err)) : "");
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);
    DI_CHECK(p != MAP_FAILED, "{}: mmap of {} bytes failed: {}", path, size_, std::strerror(err));
    data_ = static_cast<const std::uint8_t*>(p);
  } else {
    ::close(fd);
  }
}

mapped_file::~mapped_file() { release(); }

mapped_file::mapped_file(mapped_file&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

mapped_file& mapped_file::operator=(mapped_file&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void mapped_file::release() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<std::uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

std::ifstream open_input_file(const std::string& path, const std::string& what) {
  const std::string name = what.empty() ? path : what + ": " + path;
  struct stat st {};
  DI_CHECK(::stat(path.c_str(), &st) == 0, "{}: cannot open: {}", name, std::strerror(errno));
  DI_CHECK(!S_ISDIR(st.st_mode), "{}: is a directory, not a file", name);
  std::ifstream in(path, std::ios::binary);
  DI_CHECK(in.good(), "{}: cannot open: {}", name, std::strerror(errno));
  return in;
}

std::string read_text_file(const std::string& path, std::size_t max_bytes) {
  std::ifstream in = open_input_file(path, "");
  // In pieces, so that /dev/zero or a runaway file stops at the cap instead of at memory's end
  // (a config.json linked to /dev/zero grew to 17 GB).
  std::string text;
  std::vector<char> piece(std::size_t(1) << 20);
  while (in) {
    in.read(piece.data(), std::streamsize(piece.size()));
    const auto n = std::size_t(in.gcount());
    DI_CHECK(text.size() + n <= max_bytes,
             "{}: larger than {} MiB, more than a text file of this "
             "kind holds; not read",
             path, max_bytes >> 20);
    text.append(piece.data(), n);
  }
  DI_CHECK(!in.bad(), "{}: read error", path);
  return text;
}

}  // namespace di
