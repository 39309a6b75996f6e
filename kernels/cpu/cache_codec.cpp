// CPU reference of the packed cache rows (kernels/cache_format.hpp): encode quantizes with
// the same scale rules as the fake quantizers, so decode(encode(x)) equals the fake-quantized
// x bit for bit.
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/quant_math.hpp"

#include <cmath>
#include <cstring>

namespace di::cpu {

namespace {

void check_format(const cache_row_format& f) {
  DI_CHECK(f.block > 0 && f.quant_dims % f.block == 0 && f.raw_dims >= 0,
           "cache row format: {} quantized dims in blocks of {}", f.quant_dims, f.block);
  DI_CHECK(!f.is_fp4() || f.block % 2 == 0, "cache row format: FP4 blocks must be even");
  DI_CHECK(f.row_align >= 1 && f.row_align <= 256, "cache row format: row alignment {}",
           f.row_align);
}

/// Scale of one block and the byte that stores it.
struct block_scale {
  float value;
  std::uint8_t code;
};

block_scale choose_scale(cache_quant q, float amax) {
  switch (q) {
    case cache_quant::fp8_ue8m0: {
      const float s = fp8_block_scale(amax);
      return {s, std::uint8_t(f32_to_bits(s) >> 23)};
    }
    case cache_quant::fp4_ue8m0: {
      const float s = fp4_ue8m0_block_scale(amax);
      return {s, std::uint8_t(f32_to_bits(s) >> 23)};
    }
    case cache_quant::fp4_e4m3: {
      const std::uint8_t code =
          f32_to_e4m3((amax > fp4_e4m3_amax_floor ? amax : fp4_e4m3_amax_floor) / fp4_e2m1_max);
      return {e4m3_to_f32(code), code};
    }
  }
  return {1.0f, 127};
}

float scale_of(cache_quant q, std::uint8_t code) {
  return q == cache_quant::fp4_e4m3 ? e4m3_to_f32(code) : e8m0_to_f32(code);
}

void encode_row(const float* x, const cache_row_format& f, std::uint8_t* out) {
  std::uint8_t* codes = out;
  std::uint8_t* scales = out + f.code_bytes();
  if (f.is_fp4()) std::memset(codes, 0, f.code_bytes());
  for (int b = 0; b < f.quant_dims; b += f.block) {
    float amax = 0.0f;
    for (int i = 0; i < f.block; ++i) amax = std::fmax(amax, std::fabs(x[b + i]));
    const block_scale s = choose_scale(f.quant, amax);
    scales[b / f.block] = s.code;
    for (int i = b; i < b + f.block; ++i) {
      if (f.quant == cache_quant::fp8_ue8m0) {
        const float q = std::fmin(std::fmax(x[i] / s.value, -fp8_e4m3_max), fp8_e4m3_max);
        codes[i] = f32_to_e4m3(q);
      } else {
        const float q = std::fmin(std::fmax(x[i] / s.value, -fp4_e2m1_max), fp4_e2m1_max);
        codes[i / 2] |= std::uint8_t(f32_to_e2m1(q) << (4 * (i % 2)));
      }
    }
  }
  std::memcpy(out + f.code_bytes() + f.scale_bytes(), x + f.quant_dims,
              std::size_t(f.raw_dims) * sizeof(float));
  std::memset(out + f.payload_bytes(), 0, f.row_bytes() - f.payload_bytes());
}

void decode_row(const std::uint8_t* row, const cache_row_format& f, float* out) {
  const std::uint8_t* codes = row;
  const std::uint8_t* scales = row + f.code_bytes();
  for (int i = 0; i < f.quant_dims; ++i) {
    const float s = scale_of(f.quant, scales[i / f.block]);
    const float v = f.is_fp4() ? e2m1_to_f32(std::uint8_t((codes[i / 2] >> (4 * (i % 2))) & 0xf))
                               : e4m3_to_f32(codes[i]);
    out[i] = v * s;
  }
  std::memcpy(out + f.quant_dims, row + f.code_bytes() + f.scale_bytes(),
              std::size_t(f.raw_dims) * sizeof(float));
}

}  // namespace

void encode_cache_rows(const tensor& x, const cache_row_format& fmt, tensor& out) {
  check_format(fmt);
  check_cpu_tensor(x, dtype::f32, 2, "encode_cache_rows input");
  DI_CHECK(x.size(1) == fmt.dim(), "encode_cache_rows: rows of {}, format holds {}", x.size(1),
           fmt.dim());
  check_tensor(out, dtype::u8, {x.size(0), std::int64_t(fmt.row_bytes())},
               "encode_cache_rows output");
  for (std::int64_t r = 0; r < x.size(0); ++r)
    encode_row(x.data<float>() + r * fmt.dim(), fmt,
               out.data<std::uint8_t>() + r * std::int64_t(fmt.row_bytes()));
}

void decode_cache_rows(const tensor& rows, const cache_row_format& fmt, tensor& out) {
  check_format(fmt);
  check_tensor(rows, dtype::u8, {rows.size(0), std::int64_t(fmt.row_bytes())},
               "decode_cache_rows input");
  check_tensor(out, dtype::f32, {rows.size(0), fmt.dim()}, "decode_cache_rows output");
  for (std::int64_t r = 0; r < rows.size(0); ++r)
    decode_row(rows.data<std::uint8_t>() + r * std::int64_t(fmt.row_bytes()), fmt,
               out.data<float>() + r * fmt.dim());
}

}  // namespace di::cpu
