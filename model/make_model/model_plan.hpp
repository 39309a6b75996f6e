// What a generated checkpoint will contain before any byte is drawn: every tensor the config
// implies (expected_weights), paired with its block scale, assigned to shards, ordered inside
// each shard, and counted (parameters per group, bytes per dtype) for `--dry-run`.
#pragma once

#include "config/model_config.hpp"
#include "model/checkpoint/dequant.hpp"
#include "model/make_model/safetensors_writer.hpp"
#include "model/weight_spec.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace di {

/// How a generated tensor is stored.
enum class storage_kind { plain, fp8_blocks, fp4_blocks };

/// One tensor whose values are generated, with the scale tensor its quantization fills.
struct planned_tensor {
  weight_spec weight;
  std::optional<weight_spec> scale;  ///< ue8m0 block scales of fp8_blocks / fp4_blocks
  storage_kind storage = storage_kind::plain;
  block_shape block;      ///< fp8_blocks: elements per scale
  std::int64_t rows = 1;  ///< logical matrix (1-D tensors: one row)
  std::int64_t cols = 1;  ///< logical columns (packed FP4: twice the stored bytes)
  int shard = 0;
};

/// Where a stored tensor lives: shard file and its index in that shard's declaration list.
struct tensor_slot {
  int shard = 0;
  std::size_t index = 0;
};

struct model_plan {
  std::vector<planned_tensor> tensors;                  ///< in expected_weights order
  std::vector<std::string> shard_files;                 ///< "model.safetensors" or numbered
  std::vector<std::vector<tensor_decl>> shard_tensors;  ///< write order inside each shard
  std::map<std::string, tensor_slot> slots;             ///< stored name -> shard and index
  std::map<dtype, std::uint64_t> bytes_per_dtype;
  std::uint64_t total_bytes = 0;  ///< tensor bytes (headers excluded)
  std::map<weight_group, std::int64_t> params_per_group;
  std::int64_t total_params = 0;
  std::int64_t active_params_per_token = 0;  ///< as `deepinfer inspect` counts it
  std::size_t num_stored_tensors() const { return slots.size(); }
};

/// Default largest shard: 4 GiB of tensor bytes.
inline constexpr std::uint64_t default_max_shard_bytes = std::uint64_t(4) << 30;

/// Plans the checkpoint of `config`. A weight and its scale share a shard; a new shard starts
/// when the next pair would push the current one past `max_shard_bytes` (one checkpoint
/// file when everything fits). Inside a shard, tensors are ordered by element size (largest
/// first), then by name, as the reference safetensors writer orders them, so every tensor
/// starts aligned to its element size.
model_plan plan_model(const model_config& config, std::uint64_t max_shard_bytes);

}  // namespace di
