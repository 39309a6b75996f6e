// What one forward step has to read: the weights in the checkpoint's stored formats (FP8/FP4
// codes + scales, BF16, F32) -- what the CPU backend reads, since it keeps them memory-mapped
// and decodes them inside its GEMMs -- plus the sequence caches. Used by `deepinfer bench` to
// relate measured step times to memory bandwidth. Routed experts are counted as the expected
// number of distinct experts a batch touches under uniform routing: E * (1 - (1 - k/E)^B)
// per layer.
#pragma once

#include "config/model_config.hpp"

#include <cstdint>

namespace di::cli {

struct step_bytes {
  /// Weight bytes in their stored formats. The loader widens a few small BF16 vectors (norms,
  /// Engram q/k weights: well under 0.1% of a step) to fp32; they count at their stored size.
  double weights = 0;
  double experts_touched_per_layer = 0;
};

/// Weight bytes one decode step of `batch` sequences reads.
step_bytes decode_weight_bytes(const model_config& config, int batch);

/// Active parameters per token (dense parts + top-k routed experts; tables excluded): the
/// 2 * params FLOP estimate of a prefill token.
double active_params_per_token(const model_config& config);

}  // namespace di::cli
