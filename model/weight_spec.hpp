// The tensors a DeepSeek-V4.1 / V4 checkpoint must contain for a given config: official
// (bare) names, stored dtype and shape. Used to verify checkpoints (`deepinfer inspect`),
// to generate random-weight models, and by the loader of the forward pass.
#pragma once

#include "config/model_config.hpp"
#include "kernels/dtype.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace di {

/// What a tensor is for; inspect groups parameter counts by it.
enum class weight_group { embedding, attention, compressor, indexer, mhc, moe_gate, routed_experts,
                          shared_experts, engram, norm, head };

struct weight_spec {
  std::string name;                 ///< e.g. "layers.3.attn.wq_a.weight"
  dtype type;
  std::vector<std::int64_t> shape;  ///< as stored (FP4 experts: [rows, cols / 2] bytes)
  weight_group group;
  int layer = -1;                   ///< -1 for model-level tensors
  /// Logical parameters held (FP4: two per stored byte; scales count 0).
  std::int64_t num_params() const;
  bool is_scale() const;
};

/// Every tensor the config implies, in a stable order (model-level first, then by layer).
std::vector<weight_spec> expected_weights(const model_config& config);

/// Name prefixes of tensors a checkpoint may carry that this engine does not verify yet
/// (speculative-decoding drafters, vision tower).
const std::vector<std::string>& unverified_weight_prefixes();

std::string to_string(weight_group group);

}  // namespace di
