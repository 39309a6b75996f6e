// A streaming safetensors writer for multi-GB checkpoints: the header (with every data offset
// precomputed) goes first, then tensor bytes are written in place at their offsets, from any
// number of threads, so a model never has to be held in memory. Tensors lie back to back
// (no holes, as the reference parser requires); the header is padded so data starts 8-aligned.
#pragma once

#include "kernels/dtype.hpp"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace di {

/// One tensor of a file to write.
struct tensor_decl {
  std::string name;
  dtype type = dtype::f32;
  std::vector<std::int64_t> shape;  ///< as stored (packed FP4: [rows, cols / 2] bytes)

  /// Stored bytes: product of the shape times the element size.
  std::uint64_t num_bytes() const;
};

/// The header of a safetensors file as bytes (8-byte length + JSON padded with spaces to a
/// multiple of 8) and each tensor's [begin, end) in the data section, in declaration order.
struct safetensors_layout {
  std::string header;                ///< everything before the data section
  std::vector<std::uint64_t> begin;  ///< per tensor, relative to the data section
  std::vector<std::uint64_t> end;    ///< per tensor, one past the last byte
  std::uint64_t data_bytes = 0;      ///< size of the data section
  std::uint64_t file_bytes() const { return header.size() + data_bytes; }
};

/// Lays out `tensors` back to back in the order given. Names must be unique and non-empty.
safetensors_layout layout_safetensors(const std::vector<tensor_decl>& tensors,
                                      const std::map<std::string, std::string>& metadata);

/// Writes one safetensors file. The constructor creates the file (replacing one that
/// exists) with its header and full size; write() fills tensor bytes at any offset, from
/// any thread; finish() checks that every byte of every tensor was written and closes.
/// A writer destroyed before finish() removes its file.
class safetensors_writer {
 public:
  safetensors_writer(std::filesystem::path path, std::vector<tensor_decl> tensors,
                     const std::map<std::string, std::string>& metadata = {});
  ~safetensors_writer();
  safetensors_writer(const safetensors_writer&) = delete;
  safetensors_writer& operator=(const safetensors_writer&) = delete;

  const std::vector<tensor_decl>& tensors() const { return tensors_; }
  /// Index of the tensor called `name`; throws di::error when absent.
  std::size_t index_of(const std::string& name) const;
  /// Copies `bytes` into tensor `tensor` starting `offset` bytes into it. Thread-safe for
  /// disjoint ranges; throws di::error when the range falls outside the tensor.
  void write(std::size_t tensor, std::uint64_t offset, std::span<const std::uint8_t> bytes);
  /// Verifies that each tensor received exactly its size in bytes, flushes and closes.
  void finish();
  std::uint64_t file_bytes() const { return layout_.file_bytes(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::vector<tensor_decl> tensors_;
  std::map<std::string, std::size_t> index_;
  safetensors_layout layout_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> written_;  // bytes written per tensor
  int fd_ = -1;
};

/// Writes model.safetensors.index.json: {"metadata": {"total_size"}, "weight_map"}.
void write_safetensors_index(const std::filesystem::path& path,
                             const std::map<std::string, std::string>& weight_map,
                             std::uint64_t total_size);

}  // namespace di
