// Weight quantization of generated checkpoints, the inverse of model/checkpoint/dequant:
// FP8 e4m3 with 2-D power-of-two (ue8m0) block scales and MXFP4 e2m1 (packed two per byte,
// low nibble first) with one ue8m0 scale per 32 inputs. Each scale is the smallest power of
// two that brings the block's largest magnitude within the format's range, as the official
// kernels choose it.
#pragma once

#include "model/checkpoint/dequant.hpp"

#include <cstdint>

namespace di {

/// Largest finite magnitude of FP8 e4m3 and of FP4 e2m1.
inline constexpr float e4m3_max = 448.0f;
inline constexpr float e2m1_max = 6.0f;

/// The ue8m0 byte of 2^ceil(log2(amax / max_value)); amax below 1e-4 counts as 1e-4 (all
/// zero blocks get a small finite scale, as in the official act_quant).
std::uint8_t ue8m0_scale_for(float amax, float max_value);

/// FP8: `values` [num_rows, cols] -> e4m3 `out` [num_rows, cols] and ue8m0 `scales`
/// [ceil(num_rows / block.rows), ceil(cols / block.cols)]. The rows must start on a block
/// boundary of the whole tensor (a ragged last block is fine).
void quantize_fp8_blocks(const float* values, std::int64_t num_rows, std::int64_t cols,
                         block_shape block, std::uint8_t* out, std::uint8_t* scales);

/// MXFP4: `values` [num_rows, cols] (cols even) -> packed `out` [num_rows, cols / 2] and
/// ue8m0 `scales` [num_rows, ceil(cols / 32)].
void quantize_fp4_blocks(const float* values, std::int64_t num_rows, std::int64_t cols,
                         std::uint8_t* out, std::uint8_t* scales);

/// `count` floats -> little-endian bf16 (round to nearest even) into `out` (2 x count bytes).
void convert_to_bf16(const float* values, std::int64_t count, std::uint8_t* out);

}  // namespace di
