// Streaming safetensors writer: header layout, positional writes with POSIX pwrite, a
// completeness check on finish, and the Hugging Face shard index.
#include "model/make_model/safetensors_writer.hpp"

#include "common/error.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace di {

std::uint64_t tensor_decl::num_bytes() const {
  std::uint64_t n = dtype_size(type);
  for (auto d : shape) n *= std::uint64_t(d);
  return n;
}

safetensors_layout layout_safetensors(const std::vector<tensor_decl>& tensors,
                                      const std::map<std::string, std::string>& metadata) {
  safetensors_layout out;
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  for (const auto& t : tensors) {
    DI_CHECK(!t.name.empty() && t.name != "__metadata__", "invalid tensor name '{}'", t.name);
    DI_CHECK(!header.contains(t.name), "tensor '{}' declared twice", t.name);
    for (auto d : t.shape) DI_CHECK(d >= 0, "tensor '{}': negative dimension {}", t.name, d);
    out.begin.push_back(out.data_bytes);
    out.data_bytes += t.num_bytes();
    out.end.push_back(out.data_bytes);
    header[t.name] = {{"dtype", dtype_name(t.type)},
                      {"shape", t.shape},
                      {"data_offsets", {out.begin.back(), out.end.back()}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data section starts 8-byte aligned
  out.header.resize(8);
  for (int i = 0; i < 8; ++i) out.header[i] = char((std::uint64_t(text.size()) >> (8 * i)) & 0xff);
  out.header += text;
  return out;
}

namespace {

void pwrite_all(int fd, const std::uint8_t* data, std::size_t size, std::uint64_t offset,
                const std::filesystem::path& path) {
  while (size > 0) {
    ssize_t n = ::pwrite(fd, data, size, off_t(offset));
    if (n < 0 && errno == EINTR) continue;
    DI_CHECK(n > 0, "{}: write failed at byte {}: {}", path.string(), offset, std::strerror(errno));
    data += n;
    size -= std::size_t(n);
    offset += std::uint64_t(n);
  }
}

}  // namespace

safetensors_writer::safetensors_writer(std::filesystem::path path, std::vector<tensor_decl> tensors,
                                       const std::map<std::string, std::string>& metadata)
    : path_(std::move(path)), tensors_(std::move(tensors)) {
  layout_ = layout_safetensors(tensors_, metadata);
  for (std::size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
  written_ = std::make_unique<std::atomic<std::uint64_t>[]>(tensors_.size());
  for (std::size_t i = 0; i < tensors_.size(); ++i) written_[i] = 0;
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  DI_CHECK(fd_ >= 0, "{}: cannot create: {}", path_.string(), std::strerror(errno));
  try {
    DI_CHECK(::ftruncate(fd_, off_t(layout_.file_bytes())) == 0, "{}: cannot size to {} bytes: {}",
             path_.string(), layout_.file_bytes(), std::strerror(errno));
    pwrite_all(fd_, reinterpret_cast<const std::uint8_t*>(layout_.header.data()),
               layout_.header.size(), 0, path_);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    std::error_code ec;
    std::filesystem::remove(path_, ec);
    throw;
  }
}

safetensors_writer::~safetensors_writer() {
  if (fd_ < 0) return;
  ::close(fd_);
  std::error_code ec;
  std::filesystem::remove(path_, ec);  // unfinished: never leave a half-written file behind
}

std::size_t safetensors_writer::index_of(const std::string& name) const {
  auto it = index_.find(name);
  DI_CHECK(it != index_.end(), "{}: no tensor '{}' declared", path_.string(), name);
  return it->second;
}

void safetensors_writer::write(std::size_t tensor, std::uint64_t offset,
                               std::span<const std::uint8_t> bytes) {
  DI_CHECK(fd_ >= 0, "{}: write after finish()", path_.string());
  DI_CHECK(tensor < tensors_.size(), "{}: tensor index {} out of range", path_.string(), tensor);
  std::uint64_t size = layout_.end[tensor] - layout_.begin[tensor];
  DI_CHECK(offset <= size && bytes.size() <= size - offset,
           "{}: tensor '{}': write of {} bytes at offset {} exceeds its {} bytes", path_.string(),
           tensors_[tensor].name, bytes.size(), offset, size);
  std::uint64_t at = layout_.header.size() + layout_.begin[tensor] + offset;
  pwrite_all(fd_, bytes.data(), bytes.size(), at, path_);
  written_[tensor] += bytes.size();
}

void safetensors_writer::finish() {
  DI_CHECK(fd_ >= 0, "{}: finish() called twice", path_.string());
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    std::uint64_t size = layout_.end[i] - layout_.begin[i];
    DI_CHECK(written_[i] == size, "{}: tensor '{}' received {} of its {} bytes", path_.string(),
             tensors_[i].name, written_[i].load(), size);
  }
  int rc = ::close(fd_);
  fd_ = -1;
  DI_CHECK(rc == 0, "{}: close failed: {}", path_.string(), std::strerror(errno));
}

void write_safetensors_index(const std::filesystem::path& path,
                             const std::map<std::string, std::string>& weight_map,
                             std::uint64_t total_size) {
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total_size}};
  index["weight_map"] = weight_map;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << index.dump(2) << '\n';
  out.close();
  DI_CHECK(out.good(), "{}: cannot write", path.string());
}

}  // namespace di
