// CPU dequantization of block-scaled checkpoint weights to fp32 or bf16: FP8 e4m3 with 2-D
// block scales (dense layers) and MXFP4 e2m1 with one scale per 32 inputs (routed experts).
// This is the reference the CPU backend loads with and the CUDA kernels are checked against.
#pragma once

#include "model/checkpoint/safetensors.hpp"

#include <cstdint>
#include <optional>
#include <vector>

namespace di {

/// A dense row-major host matrix.
template <typename T>
struct host_matrix {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::vector<T> values;  // [rows, cols]
};

/// Rows x cols of weight elements that share one scale: quantization_config.weight_block_size
/// (32x32 for V4.1, 128x128 for V4; V4.1's Engram embedding tables use 1x32).
struct block_shape {
  std::int64_t rows = 128;
  std::int64_t cols = 128;
};

/// Elements per MXFP4 scale (along K).
inline constexpr std::int64_t fp4_block_cols = 32;

/// FP8 e4m3 `weight` [N, K] times its block `scale` [ceil(N/block.rows), ceil(K/block.cols)]
/// (F8_E8M0 or F32) -> fp32 [N, K]. Throws di::error naming both tensors on any mismatch.
host_matrix<float> dequant_fp8_to_f32(const tensor_view& weight, const tensor_view& scale,
                                      block_shape block);
/// As dequant_fp8_to_f32, rounded to bf16 (round-to-nearest-even), stored as raw bits.
host_matrix<std::uint16_t> dequant_fp8_to_bf16(const tensor_view& weight, const tensor_view& scale,
                                               block_shape block);

/// Packed FP4 e2m1 `weight` I8 [N, K/2] (two values per byte, low nibble first) times `scale`
/// [N, ceil(K/32)] (F8_E8M0 or F32) -> fp32 [N, K]. `cols`, when given, is the K the caller
/// expects (from the model config) and must match the packing.
host_matrix<float> dequant_fp4_to_f32(const tensor_view& weight, const tensor_view& scale,
                                      std::optional<std::int64_t> cols = std::nullopt);
/// As dequant_fp4_to_f32, rounded to bf16 bits.
host_matrix<std::uint16_t> dequant_fp4_to_bf16(const tensor_view& weight, const tensor_view& scale,
                                               std::optional<std::int64_t> cols = std::nullopt);

}  // namespace di
