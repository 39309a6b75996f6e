// Rotary frequencies of the two rope kinds of DeepSeek-V4/V4.1: sliding-window-only layers
// rotate with `rope_theta` unscaled; compressed layers (their queries, window KV, compressed
// entries and indexer) with `compress_rope_theta` and YaRN frequency interpolation.
#pragma once

#include "config/model_config.hpp"
#include "kernels/tensor.hpp"

namespace di {

/// inv_freq [rope_head_dim / 2] f32 for a layer with (`compressed`) or without a compressed
/// branch, computed in fp32 as the reference's precompute_freqs_cis does.
tensor rope_inv_freq(const model_config& config, bool compressed);

}  // namespace di
