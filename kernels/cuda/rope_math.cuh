// Device helpers shared by the kernels that rotate (rotary, norm_rope_quant) and normalise
// (rms_norm, norm_rope_quant) rows, so that each computes exactly what the CPU twin does.
// C++17 (included by .cu files).
#pragma once

#include <cuda_runtime.h>

namespace di::cuda::detail {

/// cos and sin (negated when `inverse`) of the angle position * inv_freq, the product rounded
/// to fp32 and the functions evaluated in double precision, as the CPU computes them.
__device__ __forceinline__ float2 rope_cos_sin(float position, float inv_freq, bool inverse) {
  const float angle = __fmul_rn(position, inv_freq);
  const float s = float(sin(double(angle)));
  return make_float2(float(cos(double(angle))), inverse ? -s : s);
}

/// (re, im) rotated by (c, s) with separate roundings (no FMA contraction), as the CPU does.
__device__ __forceinline__ float2 rope_rotate(float re, float im, float c, float s) {
  return make_float2(__fsub_rn(__fmul_rn(re, c), __fmul_rn(im, s)),
                     __fadd_rn(__fmul_rn(re, s), __fmul_rn(im, c)));
}

/// Sum of v over the block (blockDim.x a multiple of 32): a butterfly per warp, then every
/// thread adds the warps' sums in warp order. `scratch` holds 32 floats; ends with a barrier.
__device__ __forceinline__ float block_sum_in_order(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < int(blockDim.x / 32); ++w) total += scratch[w];
  __syncthreads();
  return total;
}

}  // namespace di::cuda::detail
