// Tests of the block quantizers against hand-computed values: ue8m0 scale rounding, FP8
// activation fake-quant, FP4 with ue8m0 and e4m3 scales, and the packed cache rows (which
// must decode to exactly the fake-quantized values).
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/ops.hpp"
#include "kernels/quant_math.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace di {
namespace {

tensor row_of(std::vector<float> v) {
  tensor t = tensor::empty({1, std::int64_t(v.size())}, dtype::f32);  // [1, n]
  for (std::size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = v[i];
  return t;
}

TEST_CASE("quant math: power-of-two scales round up and respect the amax floors") {
  CHECK(pow2_ceil(1.0f) == 1.0f);
  CHECK(pow2_ceil(1.5f) == 2.0f);
  CHECK(pow2_ceil(0.75f) == 1.0f);
  CHECK(pow2_ceil(0.5f) == 0.5f);
  CHECK(fp8_block_scale(448.0f) == 1.0f);
  CHECK(fp8_block_scale(449.0f) == 2.0f);
  CHECK(fp8_block_scale(224.0f) == 0.5f);
  CHECK(fp8_block_scale(0.0f) == std::ldexp(1.0f, -22));  // 1e-4 / 448 -> 2^-22
  CHECK(fp4_ue8m0_block_scale(6.0f) == 1.0f);
  CHECK(fp4_ue8m0_block_scale(6.5f) == 2.0f);
  // e4m3 scales: amax / 6 rounded to e4m3 (1/6 = 0.1667 -> 0.171875 = 1.375 * 2^-3)
  CHECK(fp4_e4m3_block_scale(1.0f) == 0.171875f);
  CHECK(fp4_e4m3_block_scale(0.0f) == 0.001953125f);  // the smallest e4m3 subnormal
}

TEST_CASE("quant math: single values on the e4m3 and e2m1 grids") {
  CHECK(fp8_fake_quant_value(1.0f, 1.0f) == 1.0f);
  CHECK(fp8_fake_quant_value(1.0625f, 1.0f) == 1.0f);    // tie -> even mantissa
  CHECK(fp8_fake_quant_value(1.1875f, 1.0f) == 1.25f);   // tie -> even (1.25 = 1.010b)
  CHECK(fp8_fake_quant_value(1000.0f, 1.0f) == 448.0f);  // clamped
  CHECK(fp8_fake_quant_value(3.0f, 0.5f) == 3.0f);
  CHECK(fp4_fake_quant_value(0.25f, 1.0f) == 0.0f);  // tie -> even code 0
  CHECK(fp4_fake_quant_value(0.75f, 1.0f) == 1.0f);  // tie -> even code 2
  CHECK(fp4_fake_quant_value(2.6f, 1.0f) == 3.0f);
  CHECK(fp4_fake_quant_value(-5.2f, 1.0f) == -6.0f);
  CHECK(fp4_fake_quant_value(100.0f, 0.5f) == 3.0f);  // clamped at 6 * scale
}

TEST_CASE("fp8_fake_quant: per block scales, only the leading num_dims") {
  // block 0 amax 448 -> scale 1; block 1 amax 3 -> scale 2^-7; trailing value untouched
  tensor x = row_of({448.0f, 1.0625f, 3.0f, 0.1f, 0.123456f});
  ops::fp8_fake_quant(x, 2, 4);
  const float* v = x.data<float>();
  CHECK(v[0] == 448.0f);
  CHECK(v[1] == 1.0f);
  CHECK(v[2] == 3.0f);
  // 0.1 / 2^-7 = 12.8 -> e4m3 grid step 1 in [8, 16): 13 -> 13 * 2^-7
  CHECK(v[3] == 13.0f * std::ldexp(1.0f, -7));
  CHECK(v[4] == 0.123456f);
  tensor bad = row_of({1.0f});
  CHECK_THROWS_AS(ops::fp8_fake_quant(bad, 2, 3), error);
}

TEST_CASE("fp4_fake_quant: ue8m0 and e4m3 scales") {
  tensor a = row_of({6.0f, 2.6f, 0.3f, -1.2f});
  ops::fp4_fake_quant(a, 4, ops::fp4_scale::ue8m0);  // scale 1
  CHECK(a.data<float>()[0] == 6.0f);
  CHECK(a.data<float>()[1] == 3.0f);
  CHECK(a.data<float>()[2] == 0.5f);
  CHECK(a.data<float>()[3] == -1.0f);
  tensor b = row_of({1.0f, 0.5f, 0.0f, -0.25f});
  ops::fp4_fake_quant(b, 4, ops::fp4_scale::e4m3);  // scale 0.171875
  const float s = 0.171875f;
  CHECK(b.data<float>()[0] == 6.0f * s);  // 5.82 -> 6
  CHECK(b.data<float>()[1] == 3.0f * s);  // 2.91 -> 3
  CHECK(b.data<float>()[2] == 0.0f);
  CHECK(b.data<float>()[3] == -1.5f * s);  // -1.4545 -> -1.5
  tensor odd = row_of({1, 2, 3});
  CHECK_THROWS_AS(ops::fp4_fake_quant(odd, 2, ops::fp4_scale::ue8m0), error);
}

void check_codec_matches_fake_quant(const cache_row_format& f, const tensor& x) {
  tensor packed = tensor::empty({x.size(0), std::int64_t(f.row_bytes())}, dtype::u8);
  ops::encode_cache_rows(x, f, packed);
  tensor decoded = tensor::empty(x.shape(), dtype::f32);
  ops::decode_cache_rows(packed, f, decoded);
  tensor fake = x.clone();
  tensor head = fake.slice(1, 0, f.quant_dims).clone();
  if (f.quant == cache_quant::fp8_ue8m0)
    ops::fp8_fake_quant(head, f.block, f.quant_dims);
  else
    ops::fp4_fake_quant(
        head, f.block,
        f.quant == cache_quant::fp4_e4m3 ? ops::fp4_scale::e4m3 : ops::fp4_scale::ue8m0);
  for (std::int64_t r = 0; r < x.size(0); ++r)
    for (int d = 0; d < f.dim(); ++d) {
      const float want = d < f.quant_dims ? head.data<float>()[r * f.quant_dims + d]
                                          : x.data<float>()[r * f.dim() + d];
      CHECK(decoded.data<float>()[r * f.dim() + d] == want);
    }
}

TEST_CASE("cache rows: byte layout and exact agreement with the fake quantizers") {
  cache_row_format fp8{cache_quant::fp8_ue8m0, 4, 8, 2};
  CHECK(fp8.row_bytes() == 8 + 2 + 8);
  cache_row_format fp4{cache_quant::fp4_e4m3, 4, 8, 0};
  CHECK(fp4.row_bytes() == 4 + 2);
  cache_row_format keys{cache_quant::fp4_ue8m0, 8, 8, 0};
  CHECK(keys.row_bytes() == 4 + 1);

  tensor x = tensor::empty({3, 10}, dtype::f32);  // [3, 10]
  for (int i = 0; i < 30; ++i) x.data<float>()[i] = std::sin(float(i) * 1.7f) * float(1 + i % 7);
  check_codec_matches_fake_quant(fp8, x);
  tensor y = x.slice(1, 0, 8).clone();
  check_codec_matches_fake_quant(fp4, y);
  check_codec_matches_fake_quant(keys, y);

  // FP4 packing: low nibble first; scale byte after the codes.
  tensor one = row_of({1.0f, -6.0f, 0, 0, 0, 0, 0, 0});
  tensor packed = tensor::empty({1, 5}, dtype::u8);
  ops::encode_cache_rows(one, keys, packed);
  CHECK(packed.data<std::uint8_t>()[0] == 0xf2);  // 1.0 = code 2 (low), -6 = code 0xf (high)
  CHECK(packed.data<std::uint8_t>()[4] == 127);   // scale 2^0
}

TEST_CASE("cache rows: a padded row stride keeps the payload's bytes and zeroes the pad") {
  const cache_row_format plain{cache_quant::fp8_ue8m0, 4, 8, 2};
  cache_row_format padded = plain;
  padded.row_align = 16;
  CHECK(padded.payload_bytes() == 18);
  CHECK(padded.row_bytes() == 32);
  tensor x = tensor::empty({3, 10}, dtype::f32);
  for (int i = 0; i < 30; ++i) x.data<float>()[i] = std::cos(float(i) * 0.9f) * float(1 + i % 5);
  tensor a = tensor::empty({3, 18}, dtype::u8), b = tensor::empty({3, 32}, dtype::u8);
  std::memset(b.data<std::uint8_t>(), 0xab, 3 * 32);  // the pad must be written, not left
  ops::encode_cache_rows(x, plain, a);
  ops::encode_cache_rows(x, padded, b);
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 32; ++i) {
      CAPTURE(r);
      CAPTURE(i);
      const std::uint8_t got = b.data<std::uint8_t>()[r * 32 + i];
      CHECK(got == (i < 18 ? a.data<std::uint8_t>()[r * 18 + i] : 0));
    }
  check_codec_matches_fake_quant(padded, x);
  cache_row_format bad = plain;
  bad.row_align = 0;
  tensor out = tensor::empty({3, 18}, dtype::u8);
  CHECK_THROWS_AS(ops::encode_cache_rows(x, bad, out), error);
}

}  // namespace
}  // namespace di
