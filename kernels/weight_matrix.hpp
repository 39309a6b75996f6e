// A linear layer's weight in the format the checkpoint stores it: fp32, BF16, FP8 e4m3 with
// one ue8m0 scale per block, or packed MXFP4 e2m1 with one scale per 32 inputs. The linear ops
// decode it inside their dot products, so the values can stay a view into the memory-mapped
// checkpoint (1 byte per FP8 parameter, half a byte per FP4 one) instead of an fp32 copy.
#pragma once

#include "kernels/tensor.hpp"

#include <cstdint>
#include <string_view>

namespace di {

/// Rows x columns of weight elements that share one scale.
struct scale_block {
  std::int64_t rows = 1;
  std::int64_t cols = 1;
};

/// Elements per MXFP4 scale along the input dimension.
inline constexpr std::int64_t mxfp4_block_cols = 32;
/// Bytes of a packed FP4 row (four 32-input scale blocks) and rows that
/// weight_matrix::interleaved permutes as one unit.
inline constexpr std::int64_t fp4_interleave_bytes = 64;
inline constexpr std::int64_t fp4_interleave_rows = 32;

/// A weight matrix [rows, cols] (output features x input features) in its stored format.
/// Copying copies the handles, not the bytes.
struct weight_matrix {
  /// f32 or bf16 [rows, cols]; f8_e4m3 [rows, cols]; or i8 [rows, cols / 2] holding two e2m1
  /// values per byte, low nibble first. Bytes may be unaligned (checkpoint views).
  tensor values;
  /// f8_e8m0 or f32 [ceil(rows / block.rows), ceil(cols / block.cols)] for f8_e4m3 and i8
  /// values; undefined for f32 and bf16 values.
  tensor scales;
  /// Elements per scale (FP8: the checkpoint's weight_block_size; FP4: 1 x 32).
  scale_block block;
  /// Packed FP4 on a CUDA device only (cuda::with_fp4_layout), laid out in the order the
  /// decode GEMM's lanes read it: stripes of fp4_interleave_rows rows, each a sequence of runs
  /// (fp4_interleave_bytes of every row: four 32-input scale blocks u of 16 bytes, quarters t
  /// of 4 bytes); within a run, row r = 16m + 8h + g of the stripe sends quarter t of block u
  /// to byte ((2m + h) * 32 + 4g + t) * 16 + 4u. One warp load then reads 512 contiguous
  /// bytes, and a warp's rows over its K range are one contiguous stretch of memory. Same
  /// bytes, same scales.
  bool interleaved = false;
  /// CUDA, FP8 with 128 x 128 blocks: the scales as cuBLASLt's block-scaled FP8 GEMM reads them
  /// (f32 [ceil(rows / 128), ceil(cols / 128) rounded up to 4]), made once by
  /// cuda::with_lt_scales (the model upload does); undefined otherwise, and then that GEMM
  /// converts the scales on every call. Derived data: weight_to does not carry it.
  tensor lt_scales;
  /// CUDA, f32 values that are bf16 values exactly (a bf16 checkpoint matrix decoded to fp32):
  /// the same matrix as bf16 [rows, cols], made once by cuda::with_bf16_copy (the model upload
  /// does). linear then multiplies more than f32_gemv's rows on the bf16 tensor cores, the
  /// input split into two bf16 parts (exact products, fp32 sums) instead of with SGEMM.
  /// Derived data: weight_to does not carry it.
  tensor bf16_values;
  /// CUDA, dense FP8 with 32-input scale blocks (V4.1): the same codes in the order the decode
  /// GEMM's MMA takes them (u8 [stripes * (cols / 32) * 512], made once by
  /// cuda::with_decode_tiles; the model upload does unless DEEPINFER_TILE_GEMV=0): per 16-row
  /// stripe and 32-input step a 512-byte tile holding, for lane 4g + t, row g's inputs 8t..8t+7
  /// then row g + 8's (rows past the matrix zero). The decode GEMM (1..8 rows) reads these
  /// instead of `values`; everything else reads `values`. A second copy of the codes: derived
  /// data, weight_to does not carry it.
  tensor decode_tiles;

  weight_matrix() = default;
  /// A plain f32 or bf16 matrix [rows, cols] (implicit: a dense tensor is a weight matrix).
  weight_matrix(tensor dense);  // NOLINT(google-explicit-constructor)
  /// FP8 e4m3 codes [rows, cols] with `scales` per `block`.
  static weight_matrix fp8(tensor codes, tensor scales, scale_block block);
  /// Packed e2m1 [rows, cols / 2] with `scales` [rows, ceil(cols / 32)].
  static weight_matrix fp4(tensor packed, tensor scales);

  bool defined() const { return values.defined(); }
  std::int64_t rows() const { return values.size(0); }
  /// Input features (two per byte for packed FP4).
  std::int64_t cols() const;
  /// Bytes a full pass over the matrix reads: values plus scales.
  std::size_t nbytes() const;
};

/// Throws di::error, naming `what`, unless `w` is a matrix on a device of `kind` whose values
/// and scales have the dtypes and shapes the comments of weight_matrix require.
void check_weight_matrix(const weight_matrix& w, std::string_view what,
                         device_kind kind = device_kind::cpu);

/// A copy of `w` (values and scales, same format) on `dev`; an interleaved weight stays on
/// CUDA devices (cuda::with_fp4_layout turns it back first).
weight_matrix weight_to(const weight_matrix& w, device dev);

}  // namespace di
