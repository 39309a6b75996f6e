// A whole checkpoint: one .safetensors file, or a directory with model.safetensors.index.json
// and its shards (or a lone model.safetensors). Files are memory-mapped; tensors are zero-copy
// views, looked up by name. Every file is validated on open, the index against its shards.
#pragma once

#include "common/mapped_file.hpp"
#include "model/checkpoint/safetensors.hpp"

#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace di {

/// Name of the shard index in a sharded checkpoint directory (Hugging Face layout).
inline constexpr std::string_view safetensors_index_name = "model.safetensors.index.json";
/// Name of the single file in an unsharded checkpoint directory.
inline constexpr std::string_view safetensors_single_name = "model.safetensors";

/// An opened, validated checkpoint. Movable; views stay valid while the checkpoint lives.
class checkpoint {
 public:
  /// Opens a .safetensors file, a model.safetensors.index.json, or a directory holding
  /// model.safetensors.index.json (sharded) or else model.safetensors. Throws di::error naming
  /// the file (and tensor) at fault.
  explicit checkpoint(const std::filesystem::path& path);

  /// The tensor called `name`, or nullptr.
  const tensor_view* find(std::string_view name) const;
  /// The tensor called `name`; throws di::error "tensor 'x' not found in <path>".
  const tensor_view& get(std::string_view name) const;
  /// All tensors, sorted by name.
  std::span<const tensor_view> tensors() const { return tensors_; }
  std::size_t num_tensors() const { return tensors_.size(); }
  /// The shards' "__metadata__" merged (for a key in several shards, the first shard by name wins).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// Total tensor bytes of each dtype present.
  std::map<dtype, std::uint64_t> bytes_per_dtype() const;
  /// The path the checkpoint was opened from.
  const std::string& path() const { return path_; }

 private:
  void load_single(const std::filesystem::path& file);
  void load_sharded(const std::filesystem::path& dir, const std::filesystem::path& index);
  // Maps and parses one file; keeps the mapping and returns its validated header.
  safetensors_header map_file(const std::filesystem::path& file);
  void add_views(const safetensors_header& header);

  std::string path_;
  std::vector<mapped_file> files_;    // one per shard, in shard-name order
  std::vector<tensor_view> tensors_;  // sorted by name, names unique
  std::map<std::string, std::string> metadata_;
};

}  // namespace di
