// What one forward step has to read: weights in their stored format (FP8/FP4 + scales, BF16,
// F32) and as fp32 (what the CPU reference backend keeps after dequantizing on load), plus
// the sequence caches. Used by `deepinfer bench` to relate measured step times to memory
// bandwidth. Routed experts are counted as the expected number of distinct experts a batch
// touches under uniform routing: E * (1 - (1 - k/E)^B) per layer.
#pragma once

#include "config/model_config.hpp"

#include <cstdint>

namespace di::cli {

struct step_bytes {
  double stored = 0;   ///< weights in the checkpoint's formats
  double fp32 = 0;     ///< the same weights as fp32 (Engram tables stay FP8)
  double experts_touched_per_layer = 0;
};

/// Weight bytes one decode step of `batch` sequences reads.
step_bytes decode_weight_bytes(const model_config& config, int batch);

/// Active parameters per token (dense parts + top-k routed experts; tables excluded): the
/// 2 * params FLOP estimate of a prefill token.
double active_params_per_token(const model_config& config);

}  // namespace di::cli
