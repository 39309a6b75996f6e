// Device helpers shared by the model kernels (kernels/cuda/model_*.cu): launch checks,
// warp/block reductions, an order-preserving key for float sorting, and the decode of 8
// consecutive values of a packed cache row (kernels/cache_format.hpp) with the project's
// scalar definitions (kernels/dtype.hpp), so decoding here equals the CPU codec bit for bit.
#pragma once

#include "kernels/cache_format.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_model_ops.hpp"
#include "kernels/cuda/kernel_attributes.hpp"
#include "kernels/dtype.hpp"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace di::cuda::detail {

inline unsigned grid_for(std::int64_t work, int per_block) {
  const std::int64_t blocks = (work + per_block - 1) / per_block;
  return unsigned(blocks < 1 ? 1 : (blocks > 0x7fffffff ? 0x7fffffff : blocks));
}

/// Throws unless a packed format is one the codec supports (the CPU's check_format).
inline void check_row_format(const cache_row_format& f, const char* what) {
  DI_CHECK(f.block > 0 && f.quant_dims >= 0 && f.quant_dims % f.block == 0 && f.raw_dims >= 0,
           "{}: {} quantized dims in blocks of {}", what, f.quant_dims, f.block);
  DI_CHECK(!f.is_fp4() || f.block % 2 == 0, "{}: FP4 blocks must be even", what);
  DI_CHECK(f.row_align >= 1 && f.row_align <= 256, "{}: row alignment {}", what, f.row_align);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// max(a, b) that returns NaN when either is NaN (fmaxf returns the other operand): softmax
/// maxima use it so that scores that are all NaN give NaN, not "nothing to attend".
__device__ __forceinline__ float max_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
__device__ __forceinline__ float warp_max_nan(float v) {
  for (int o = 16; o > 0; o >>= 1) v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
/// `scratch` holds 32 floats; the call ends with a barrier so scratch can be reused.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : 0.0f;
  r = warp_sum(r);
  __syncthreads();
  return r;
}

/// Monotone map of a float to uint32 (larger float, larger key; -inf lowest of non-NaN).
__device__ __forceinline__ std::uint32_t order_key(float f) {
  const std::uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_to_float(std::uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

/// A packed row format with its byte offsets precomputed (device code cannot call the host
/// members of cache_row_format).
struct dev_format {
  int quant = 0;  ///< cache_quant
  int block = 32, quant_dims = 0, raw_dims = 0;
  int code_bytes = 0, scale_bytes = 0;
  int payload_bytes = 0;  ///< codes + scales + raw
  int row_bytes = 0;      ///< the stride: payload_bytes plus the zero pad
  bool fp4 = false;
};

inline dev_format make_dev_format(const cache_row_format& f) {
  return {int(f.quant),
          f.block,
          f.quant_dims,
          f.raw_dims,
          int(f.code_bytes()),
          int(f.scale_bytes()),
          int(f.payload_bytes()),
          int(f.row_bytes()),
          f.is_fp4()};
}

/// A device_rows table as the kernels see it.
struct dev_rows {
  const std::uint8_t* data = nullptr;
  std::int64_t rows = 0;
  bool packed = true;
  dev_format f;
};

inline dev_rows make_dev_rows(const device_rows& t) {
  return {static_cast<const std::uint8_t*>(t.data), t.rows, t.packed, make_dev_format(t.format)};
}

/// Scale of block `b` of a packed row (e8m0, or e4m3 for fp4_e4m3).
__device__ __forceinline__ float row_scale(const std::uint8_t* row, const dev_format& f, int b) {
  const std::uint8_t code = row[f.code_bytes + b];
  return f.quant == int(cache_quant::fp4_e4m3) ? e4m3_to_f32(code) : e8m0_to_f32(code);
}

/// Value d of a packed row (byte reads; any alignment): the CPU decode_row, element-wise.
__device__ __forceinline__ float row_value(const std::uint8_t* row, const dev_format& f, int d) {
  if (d >= f.quant_dims) {
    const std::uint8_t* p = row + f.code_bytes + f.scale_bytes + (d - f.quant_dims) * 4;
    const std::uint32_t u = std::uint32_t(p[0]) | (std::uint32_t(p[1]) << 8) |
                            (std::uint32_t(p[2]) << 16) | (std::uint32_t(p[3]) << 24);
    return __uint_as_float(u);
  }
  const float s = row_scale(row, f, d / f.block);
  const float v = f.fp4 ? e2m1_to_f32(std::uint8_t((row[d / 2] >> (4 * (d % 2))) & 0xf))
                        : e4m3_to_f32(row[d]);
  return v * s;
}

/// Values [d0, d0 + 8) of row `r` of a table (f32 rows of `dim`, or packed rows).
__device__ __forceinline__ void load8(const dev_rows& t, int dim, std::int64_t r, int d0,
                                      float* v) {
  if (!t.packed) {
    const float4* p =
        reinterpret_cast<const float4*>(reinterpret_cast<const float*>(t.data) + r * dim + d0);
    const float4 a = p[0], b = p[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    return;
  }
  const std::uint8_t* row = t.data + std::size_t(r) * std::size_t(t.f.row_bytes);
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = row_value(row, t.f, d0 + i);
}

}  // namespace di::cuda::detail
