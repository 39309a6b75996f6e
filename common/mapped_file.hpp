// A read-only memory-mapped file. Checkpoints are mapped, never read into heap buffers, so
// tensor views are zero-copy and pages are loaded on first touch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <span>
#include <string>

namespace di {

/// Read-only mapping of a whole file; movable, not copyable. Empty files map to an empty span.
class mapped_file {
 public:
  mapped_file() = default;
  /// Maps `path`; throws di::error naming the path if it cannot be opened or mapped.
  explicit mapped_file(const std::string& path);
  ~mapped_file();
  mapped_file(mapped_file&& other) noexcept;
  mapped_file& operator=(mapped_file&& other) noexcept;
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::span<const std::uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  void release() noexcept;

  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Reads a whole (small) text file; throws di::error naming the path on failure, or when it
/// holds more than `max_bytes` (tokenizer.json files have ~10 MB).
std::string read_text_file(const std::string& path, std::size_t max_bytes = std::size_t(256) << 20);

/// Opens `path` for reading; a missing file, a directory (which opens, and reads as empty) or
/// an unreadable one is a di::error "<what>: <path>: <why>" ("<path>: <why>" without `what`).
std::ifstream open_input_file(const std::string& path, const std::string& what);

}  // namespace di
