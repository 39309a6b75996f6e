// Tests of make-model's quantizers against the project's dequantizers: scales are the
// smallest sufficient power of two, values round-trip within the format's rounding error,
// FP4 packs the low nibble first, and ragged blocks are handled.
#include "model/make_model/quantize.hpp"

#include "kernels/dtype.hpp"
#include "model/make_model/weight_init.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace {

di::tensor_view view(std::string name, di::dtype type, std::vector<std::int64_t> shape,
                     const std::vector<std::uint8_t>& storage) {
  return {.name = std::move(name),
          .type = type,
          .shape = std::move(shape),
          .bytes = storage,
          .file = "mem"};
}

std::vector<float> random_matrix(std::int64_t rows, std::int64_t cols, float std,
                                 std::uint64_t key) {
  std::vector<float> v(std::size_t(rows * cols));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std * di::counter_normal(key, i);
  return v;
}

}  // namespace

TEST_CASE("ue8m0 scale: smallest power of two with amax / scale <= max") {
  CHECK(di::e8m0_to_f32(di::ue8m0_scale_for(448.0f, 448.0f)) == 1.0f);
  CHECK(di::e8m0_to_f32(di::ue8m0_scale_for(449.0f, 448.0f)) == 2.0f);
  CHECK(di::e8m0_to_f32(di::ue8m0_scale_for(447.0f, 448.0f)) == 1.0f);
  CHECK(di::e8m0_to_f32(di::ue8m0_scale_for(224.0f, 448.0f)) == 0.5f);
  CHECK(di::e8m0_to_f32(di::ue8m0_scale_for(6.0f, 6.0f)) == 1.0f);
  CHECK(di::e8m0_to_f32(di::ue8m0_scale_for(0.75f, 6.0f)) == 0.125f);
  CHECK(di::e8m0_to_f32(di::ue8m0_scale_for(0.76f, 6.0f)) == 0.25f);
  // zero blocks get the scale of amax 1e-4
  CHECK(di::ue8m0_scale_for(0.0f, 448.0f) == di::ue8m0_scale_for(1e-4f, 448.0f));
}

TEST_CASE("fp8 blocks: ragged 70x45 matrix with 32x32 blocks round-trips through dequant") {
  const std::int64_t rows = 70, cols = 45;
  auto w = random_matrix(rows, cols, 0.05f, 7);
  w[3] = 2.5f;  // an outlier sets block (0, 0)'s scale
  std::vector<std::uint8_t> q(std::size_t(rows * cols)), s(3 * 2);
  di::quantize_fp8_blocks(w.data(), rows, cols, {32, 32}, q.data(), s.data());
  CHECK(di::e8m0_to_f32(s[0]) == 0.0078125f);  // 2.5 / 448 -> 2^-7
  auto deq = di::dequant_fp8_to_f32(view("w", di::dtype::f8_e4m3, {rows, cols}, q),
                                    view("s", di::dtype::f8_e8m0, {3, 2}, s), {32, 32});
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      float scale = di::e8m0_to_f32(s[std::size_t((r / 32) * 2 + c / 32)]);
      float x = w[std::size_t(r * cols + c)], y = deq.values[std::size_t(r * cols + c)];
      // e4m3: 3 mantissa bits (relative error <= 2^-4), subnormal step 2^-9 x scale
      REQUIRE(std::fabs(x - y) <= std::max(std::fabs(x) / 16.0f, scale * 0.001953125f));
    }
  // every block uses its range: its largest value lands in the top binade of e4m3
  for (int b = 0; b < 6; ++b) {
    float amax = 0;
    int br = b / 2, bc = b % 2;
    for (std::int64_t r = br * 32; r < std::min<std::int64_t>(rows, br * 32 + 32); ++r)
      for (std::int64_t c = bc * 32; c < std::min<std::int64_t>(cols, bc * 32 + 32); ++c)
        amax = std::max(amax, std::fabs(w[std::size_t(r * cols + c)]));
    float ratio = amax / di::e8m0_to_f32(s[std::size_t(b)]);
    CHECK(ratio <= 448.0f);
    CHECK(ratio > 224.0f);
  }
}

TEST_CASE("fp4 blocks: low nibble first, one scale per 32 inputs, saturating grid") {
  // one row of 64: first block exactly representable at scale 1, second at scale 1/2
  std::vector<float> w(64, 0.0f);
  w[0] = 1.0f;                                             // code 2
  w[1] = -6.0f;                                            // code 0xf
  w[2] = 0.25f;                                            // tie between 0 and 0.5 -> even code 0
  w[3] = 0.3f;                                             // -> 0.5, code 1
  for (int i = 32; i < 64; ++i) w[std::size_t(i)] = 3.0f;  // amax 3 -> scale 0.5, value 6
  std::vector<std::uint8_t> q(32), s(2);
  di::quantize_fp4_blocks(w.data(), 1, 64, q.data(), s.data());
  CHECK(di::e8m0_to_f32(s[0]) == 1.0f);
  CHECK(di::e8m0_to_f32(s[1]) == 0.5f);
  CHECK(q[0] == 0xf2);  // low nibble = element 0 (1.0), high nibble = element 1 (-6.0)
  CHECK(q[1] == 0x10);  // element 2 -> 0, element 3 -> 0.5
  CHECK(q[16] == 0x77);
}

TEST_CASE("fp4 blocks: random 17x96 matrix round-trips within the e2m1 grid spacing") {
  const std::int64_t rows = 17, cols = 96;
  auto w = random_matrix(rows, cols, 0.1f, 11);
  std::vector<std::uint8_t> q(std::size_t(rows * cols / 2)), s(std::size_t(rows * 3));
  di::quantize_fp4_blocks(w.data(), rows, cols, q.data(), s.data());
  auto deq = di::dequant_fp4_to_f32(view("w", di::dtype::i8, {rows, cols / 2}, q),
                                    view("s", di::dtype::f8_e8m0, {rows, 3}, s), cols);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      float scale = di::e8m0_to_f32(s[std::size_t(r * 3 + c / 32)]);
      float x = w[std::size_t(r * cols + c)], y = deq.values[std::size_t(r * cols + c)];
      REQUIRE(std::fabs(x - y) <= 0.25f * std::max(std::fabs(x), scale) + 1e-7f);
    }
}

TEST_CASE("fp4 blocks: bytes equal the reference f32_to_e2m1 packing, ties and signs included") {
  // every grid point, every midpoint (ties), just around them, negatives and zeros, scale 1
  std::vector<float> w;
  for (float m : {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f,
                  5.0f, 6.0f})
    for (float x : {m, std::nextafter(m, 0.0f), std::nextafter(m, 7.0f)})
      w.insert(w.end(), {x, -x});
  auto noise = random_matrix(1, 256, 2.0f, 5);
  w.insert(w.end(), noise.begin(), noise.end());
  w.resize((w.size() + 31) / 32 * 32, 6.0f);  // every block's amax is 6: scale exactly 1
  for (std::size_t b = 0; b < w.size(); b += 32) w[b + 31] = 6.0f;
  for (float& x : w) x = std::clamp(x, -6.0f, 6.0f);
  const std::int64_t cols = std::int64_t(w.size());
  std::vector<std::uint8_t> q(w.size() / 2), s(w.size() / 32);
  di::quantize_fp4_blocks(w.data(), 1, cols, q.data(), s.data());
  for (std::uint8_t e : s) REQUIRE(di::e8m0_to_f32(e) == 1.0f);
  int mismatches = 0;
  for (std::size_t i = 0; i < w.size(); i += 2) {
    std::uint8_t expect = std::uint8_t(di::f32_to_e2m1(w[i]) | (di::f32_to_e2m1(w[i + 1]) << 4));
    mismatches += q[i / 2] != expect;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("bf16 conversion rounds to nearest even") {
  std::vector<float> v = {1.0f, di::bits_to_f32(0x3f808000u), di::bits_to_f32(0x3f818000u), -2.0f};
  std::vector<std::uint8_t> out(8);
  di::convert_to_bf16(v.data(), 4, out.data());
  std::uint16_t h[4];
  std::memcpy(h, out.data(), 8);
  CHECK(h[0] == 0x3f80);
  CHECK(h[1] == 0x3f80);  // tie -> even
  CHECK(h[2] == 0x3f82);  // tie -> even (up)
  CHECK(h[3] == 0xc000);
}
