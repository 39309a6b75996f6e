// Element types of checkpoints and tensors, and scalar conversions between them and fp32.
// These scalar functions are the definition of each format for the whole project: the CPU
// backend, the loaders and the CUDA kernels (host+device) all use them.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#if defined(__CUDACC__)
#define DI_HOST_DEVICE __host__ __device__
#else
#define DI_HOST_DEVICE
#endif

namespace di {

/// Storage types. `fp4_e2m1x2` is the checkpoint's "I8" for routed experts: two FP4 e2m1
/// values per byte, low nibble first.
enum class dtype : std::uint8_t {
  bf16,
  f16,
  f32,
  f8_e4m3,
  f8_e8m0,
  i8,
  i32,
  i64,
  u8,
  bool_,
  f64,
  i16,
};

/// Size of one stored element in bytes (i8 also stores two packed FP4 values per element).
constexpr std::size_t dtype_size(dtype t) {
  switch (t) {
    case dtype::bf16: case dtype::f16: case dtype::i16: return 2;
    case dtype::f32: case dtype::i32: return 4;
    case dtype::i64: case dtype::f64: return 8;
    case dtype::f8_e4m3: case dtype::f8_e8m0: case dtype::i8: case dtype::u8:
    case dtype::bool_: return 1;
  }
  return 0;
}

/// The safetensors spelling ("BF16", "F8_E4M3", ...).
constexpr std::string_view dtype_name(dtype t) {
  switch (t) {
    case dtype::bf16: return "BF16";
    case dtype::f16: return "F16";
    case dtype::f32: return "F32";
    case dtype::f8_e4m3: return "F8_E4M3";
    case dtype::f8_e8m0: return "F8_E8M0";
    case dtype::i8: return "I8";
    case dtype::i32: return "I32";
    case dtype::i64: return "I64";
    case dtype::u8: return "U8";
    case dtype::bool_: return "BOOL";
    case dtype::f64: return "F64";
    case dtype::i16: return "I16";
  }
  return "?";
}

/// Parses a safetensors dtype string; nullopt for types we do not support.
inline std::optional<dtype> parse_dtype(std::string_view s) {
  for (auto t : {dtype::bf16, dtype::f16, dtype::f32, dtype::f8_e4m3, dtype::f8_e8m0, dtype::i8,
                 dtype::i32, dtype::i64, dtype::u8, dtype::bool_, dtype::f64, dtype::i16})
    if (dtype_name(t) == s) return t;
  return std::nullopt;
}

DI_HOST_DEVICE inline float bits_to_f32(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
DI_HOST_DEVICE inline std::uint32_t f32_to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ---- bf16: the upper half of an fp32 --------------------------------------------------
DI_HOST_DEVICE inline float bf16_to_f32(std::uint16_t h) { return bits_to_f32(std::uint32_t(h) << 16); }
/// Round-to-nearest-even; NaN stays NaN (quiet).
DI_HOST_DEVICE inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u = f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return std::uint16_t(u >> 16);
}

// ---- f16 (IEEE binary16) ---------------------------------------------------------------
DI_HOST_DEVICE inline float f16_to_f32(std::uint16_t h) {
  std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t man = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    float v = float(man) * 5.9604644775390625e-08f;
    return bits_to_f32(f32_to_bits(v) | sign);
  }
  if (exp == 31) return bits_to_f32(sign | 0x7f800000u | (man << 13));
  return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

// ---- FP8 e4m3 (the "fn" variant: bias 7, no infinities, S.1111.111 is NaN, max 448) ----
DI_HOST_DEVICE inline float e4m3_to_f32(std::uint8_t b) {
  std::uint32_t exp = (b >> 3) & 0xfu;
  std::uint32_t man = b & 0x7u;
  float mag;
  if (exp == 0xf && man == 0x7) {
    mag = NAN;
  } else if (exp == 0) {
    mag = float(man) * 0.001953125f;  // man/8 * 2^-6
  } else {
    mag = bits_to_f32(((exp + 120) << 23) | (man << 20));
  }
  return (b & 0x80) ? -mag : mag;
}

/// fp32 -> e4m3 with round-to-nearest-even, saturating at ±448 (inputs are pre-scaled so
/// |x| <= 448; saturation keeps an outlier finite instead of turning it into NaN).
DI_HOST_DEVICE inline std::uint8_t f32_to_e4m3(float f) {
  std::uint32_t u = f32_to_bits(f);
  std::uint8_t sign = std::uint8_t((u >> 24) & 0x80u);
  std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return std::uint8_t(sign | 0x7f);     // NaN
  if (a >= 0x43e00000u) return std::uint8_t(sign | 0x7e);    // >= 448 (and inf): saturate
  if (a < 0x3c800000u) {                                    // below 2^-6: subnormal grid 2^-9
    float q = bits_to_f32(a) * 512.0f;                      // exact scaling
    // round half to even on the integer grid [0, 8]
    float r = std::nearbyint(q);
    return std::uint8_t(sign | std::uint8_t(r));            // r == 8 encodes 2^-6 correctly
  }
  // normal: keep 3 mantissa bits, RNE on the dropped 20 bits
  std::uint32_t rounded = a + 0x7ffffu + ((a >> 20) & 1u);
  std::uint32_t exp = (rounded >> 23) - 120;
  std::uint32_t man = (rounded >> 20) & 0x7u;
  if (exp > 15 || (exp == 15 && man == 7)) return std::uint8_t(sign | 0x7e);
  return std::uint8_t(sign | (exp << 3) | man);
}

// ---- E8M0 (ue8m0): a power-of-two scale 2^(e-127); 0xff is NaN ---------------------------
DI_HOST_DEVICE inline float e8m0_to_f32(std::uint8_t e) {
  if (e == 0xff) return NAN;
  if (e == 0) return bits_to_f32(0x00400000u);  // 2^-127 is subnormal in fp32
  return bits_to_f32(std::uint32_t(e) << 23);
}

// ---- FP4 e2m1: S.EE.M, values {0, 0.5, 1, 1.5, 2, 3, 4, 6} -------------------------------
DI_HOST_DEVICE inline float e2m1_to_f32(std::uint8_t nibble) {
  constexpr float mags[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float m = mags[nibble & 0x7u];
  return (nibble & 0x8u) ? -m : m;
}

/// fp32 -> e2m1 with round-to-nearest-even on the e2m1 grid, saturating at ±6 (NaN -> ±6).
DI_HOST_DEVICE inline std::uint8_t f32_to_e2m1(float f) {
  // midpoints between neighbouring grid values; at a tie the even code wins
  constexpr float mids[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  std::uint8_t sign = std::signbit(f) ? 0x8 : 0x0;
  float a = std::fabs(f);
  if (!(a == a)) return std::uint8_t(sign | 0x7);
  std::uint8_t code = 0;
  for (int i = 0; i < 7; ++i)
    if (a > mids[i] || (a == mids[i] && (i & 1))) code = std::uint8_t(i + 1);
  return std::uint8_t(sign | code);
}

}  // namespace di
