// The safetensors format: a validating header parser and zero-copy tensor views. The parser is
// a pure function of the file's bytes (so it can be fuzzed without files) and checks everything
// it reads: lengths, JSON, dtypes, shapes, offsets, overlaps and duplicate names.
#pragma once

#include "kernels/dtype.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace di {

/// Largest header accepted (the limit of the reference implementation as well).
inline constexpr std::uint64_t max_safetensors_header_bytes = 100'000'000;

/// One tensor as a header describes it.
struct tensor_entry {
  std::string name;
  dtype type = dtype::f32;
  std::vector<std::int64_t> shape;  // every dim >= 0; [] is a scalar
  std::uint64_t begin = 0;          // first byte, relative to the data section
  std::uint64_t end = 0;            // one past the last byte, relative to the data section
};

/// A validated safetensors header.
struct safetensors_header {
  std::uint64_t data_offset = 0;                // where the data section starts: 8 + header length
  std::vector<tensor_entry> tensors;            // sorted by name, names unique
  std::map<std::string, std::string> metadata;  // "__metadata__"; empty when absent
};

/// Parses and validates the header of the safetensors file whose whole content is `file_bytes`;
/// `file` names it in error messages. Throws di::error (naming the file and, where one is at
/// fault, the tensor) on any defect. Never reads outside `file_bytes`.
safetensors_header parse_safetensors_header(std::span<const std::uint8_t> file_bytes,
                                            std::string_view file);

/// A zero-copy view of one tensor inside a mapped file. The bytes are not aligned to the
/// element size: read them with memcpy.
struct tensor_view {
  std::string name;
  dtype type = dtype::f32;
  std::vector<std::int64_t> shape;
  std::span<const std::uint8_t> bytes;  // exactly num_elements() * dtype_size(type) bytes
  std::string file;                     // the file the bytes live in

  /// Product of the shape (1 for a scalar).
  std::int64_t num_elements() const;
};

/// "[128, 32]": how shapes appear in error messages.
std::string format_shape(std::span<const std::int64_t> shape);

/// Number of elements of `shape` times `element_size` bytes; nullopt when a dim is negative or
/// the product overflows 64 bits.
std::optional<std::uint64_t> checked_byte_size(std::span<const std::int64_t> shape,
                                               std::uint64_t element_size);

}  // namespace di
