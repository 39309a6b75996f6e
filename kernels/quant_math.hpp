// Scalar definitions of the block quantizers DeepSeek's reference kernels apply to
// activations and caches: FP8 e4m3 with power-of-two (ue8m0) scales, FP4 e2m1 with ue8m0 or
// e4m3 scales. Each is "quantize then dequantize" on one element given its block's scale;
// the CPU ops and (later) the CUDA kernels share these so both round identically.
#pragma once

#include "kernels/dtype.hpp"

#include <cstdint>

namespace di {

inline constexpr float fp8_e4m3_max = 448.0f;
inline constexpr float fp4_e2m1_max = 6.0f;
/// Lower bound on a block's amax for FP8 activation scales (the reference kernel's 1e-4).
inline constexpr float fp8_amax_floor = 1e-4f;
/// Lower bounds for FP4 blocks: 6 * 2^-126 (ue8m0 scales), 6 * 2^-9 (e4m3 scales, keeps an
/// all-zero block's scale at the smallest e4m3 subnormal instead of 0).
inline constexpr float fp4_ue8m0_amax_floor = 6.0f * 1.1754943508222875e-38f;
inline constexpr float fp4_e4m3_amax_floor = 6.0f * 0.001953125f;

/// 2^ceil(log2(t)) for a positive normal fp32 `t`, read off the bits exactly as the
/// reference's fast_log2_ceil/fast_pow2 do (exponent, plus one for a nonzero mantissa).
DI_HOST_DEVICE inline float pow2_ceil(float t) {
  std::uint32_t bits = f32_to_bits(t);
  int e = int((bits >> 23) & 0xffu) - 127 + ((bits & 0x7fffffu) != 0 ? 1 : 0);
  if (e < -126) e = -126;
  if (e > 127) e = 127;
  return bits_to_f32(std::uint32_t(e + 127) << 23);
}

/// The ue8m0 scale of an FP8 block with absolute maximum `amax`.
DI_HOST_DEVICE inline float fp8_block_scale(float amax) {
  const float inv_max = 1.0f / fp8_e4m3_max;  // the kernel's fp32 constant 1/448
  return pow2_ceil((amax > fp8_amax_floor ? amax : fp8_amax_floor) * inv_max);
}

/// x's e4m3 code under `scale`: e4m3(clamp(x / s, ±448)).
DI_HOST_DEVICE inline std::uint8_t fp8_code(float x, float scale) {
  float q = x / scale;
  q = q > fp8_e4m3_max ? fp8_e4m3_max : (q < -fp8_e4m3_max ? -fp8_e4m3_max : q);
  return f32_to_e4m3(q);
}

/// x quantized to e4m3 under `scale` and dequantized: e4m3(clamp(x / s, ±448)) * s.
DI_HOST_DEVICE inline float fp8_fake_quant_value(float x, float scale) {
  return e4m3_to_f32(fp8_code(x, scale)) * scale;
}

/// The ue8m0 scale of an FP4 block (indexer queries and keys).
DI_HOST_DEVICE inline float fp4_ue8m0_block_scale(float amax) {
  const float inv_max = 1.0f / fp4_e2m1_max;
  return pow2_ceil((amax > fp4_ue8m0_amax_floor ? amax : fp4_ue8m0_amax_floor) * inv_max);
}

/// The e4m3 scale of an FP4 block (V4.1 compressed KV): e4m3(max(amax, 6 * 2^-9) / 6).
DI_HOST_DEVICE inline float fp4_e4m3_block_scale(float amax) {
  float a = amax > fp4_e4m3_amax_floor ? amax : fp4_e4m3_amax_floor;
  return e4m3_to_f32(f32_to_e4m3(a / fp4_e2m1_max));
}

/// x quantized to e2m1 under `scale` and dequantized: e2m1(clamp(x / s, ±6)) * s.
DI_HOST_DEVICE inline float fp4_fake_quant_value(float x, float scale) {
  float q = x / scale;
  q = q > fp4_e2m1_max ? fp4_e2m1_max : (q < -fp4_e2m1_max ? -fp4_e2m1_max : q);
  return e2m1_to_f32(f32_to_e2m1(q)) * scale;
}

}  // namespace di
