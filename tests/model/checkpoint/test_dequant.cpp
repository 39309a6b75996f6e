// Tests of FP8 block and MXFP4 dequantization against hand-computed values (ragged edges,
// both scale dtypes, bf16 rounding), shape validation errors, and every quantized weight of the
// two golden checkpoints.
#include "model/checkpoint/dequant.hpp"

#include "common/error.hpp"
#include "model/checkpoint/checkpoint.hpp"
#include "tests/test_support.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

namespace {

using di::dtype;

// A hand-built view over `storage` (which must outlive it).
di::tensor_view view(std::string name, dtype type, std::vector<std::int64_t> shape,
                     const std::vector<std::uint8_t>& storage) {
  return {.name = std::move(name),
          .type = type,
          .shape = std::move(shape),
          .bytes = storage,
          .file = "hand.safetensors"};
}

std::vector<std::uint8_t> f32_bytes(const std::vector<float>& values) {
  std::vector<std::uint8_t> out(values.size() * 4);
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// A ragged FP8 weight: N=40, K=70 with 32x32 blocks -> scales [2, 3]. Every weight is 1.0
// (e4m3 0x38) except two.
struct ragged_fp8 {
  std::vector<std::uint8_t> weight_bytes = std::vector<std::uint8_t>(40 * 70, 0x38);  // [40, 70]
  ragged_fp8() {
    weight_bytes[39 * 70 + 69] = 0xc4;  // -3.0
    weight_bytes[0 * 70 + 33] = 0x01;   // smallest subnormal, 2^-9
  }
  di::tensor_view weight() const { return view("w", dtype::f8_e4m3, {40, 70}, weight_bytes); }
};

}  // namespace

TEST_CASE("dequant fp8: ragged 40x70 weight with 32x32 ue8m0 blocks") {
  ragged_fp8 w;
  // [2, 3] scales 1, 2, 4 / 8, 16, 32
  std::vector<std::uint8_t> scale_bytes{127, 128, 129, 130, 131, 132};
  auto scale = view("s", dtype::f8_e8m0, {2, 3}, scale_bytes);
  auto out = di::dequant_fp8_to_f32(w.weight(), scale, {.rows = 32, .cols = 32});
  REQUIRE(out.rows == 40);
  REQUIRE(out.cols == 70);
  REQUIRE(out.values.size() == 40 * 70);
  auto at = [&](int r, int c) { return out.values[r * 70 + c]; };
  CHECK(at(0, 0) == 1.0f);
  CHECK(at(0, 31) == 1.0f);
  CHECK(at(0, 32) == 2.0f);
  CHECK(at(0, 33) == 0.00390625f);  // 2^-9 * 2
  CHECK(at(0, 64) == 4.0f);
  CHECK(at(0, 69) == 4.0f);
  CHECK(at(31, 69) == 4.0f);
  CHECK(at(32, 0) == 8.0f);
  CHECK(at(32, 32) == 16.0f);
  CHECK(at(39, 64) == 32.0f);
  CHECK(at(39, 69) == -96.0f);
  int mismatches = 0;
  for (int r = 0; r < 40; ++r)
    for (int c = 0; c < 70; ++c) {
      if ((r == 39 && c == 69) || (r == 0 && c == 33)) continue;
      mismatches += at(r, c) != std::ldexp(1.0f, (r / 32) * 3 + c / 32);
    }
  CHECK(mismatches == 0);

  auto bf16 = di::dequant_fp8_to_bf16(w.weight(), scale, {.rows = 32, .cols = 32});
  REQUIRE(bf16.values.size() == 40 * 70);
  CHECK(bf16.values[0] == 0x3f80);             // 1.0
  CHECK(bf16.values[39 * 70 + 69] == 0xc2c0);  // -96.0
  CHECK(bf16.values[39 * 70 + 64] == 0x4200);  // 32.0
}

TEST_CASE("dequant fp8: float scales, bf16 rounding, other block shapes") {
  ragged_fp8 w;
  SUBCASE("F32 scales [2, 3]") {
    auto scale_bytes = f32_bytes({0.5f, 3.0f, 0.25f, 10.0f, 1.0f, 7.0f});
    auto scale = view("s", dtype::f32, {2, 3}, scale_bytes);
    auto out = di::dequant_fp8_to_f32(w.weight(), scale, {.rows = 32, .cols = 32});
    CHECK(out.values[0] == 0.5f);
    CHECK(out.values[40] == 3.0f);
    CHECK(out.values[31 * 70 + 69] == 0.25f);
    CHECK(out.values[32 * 70 + 0] == 10.0f);
    CHECK(out.values[39 * 70 + 69] == -21.0f);
  }
  SUBCASE("bf16 output rounds to nearest even") {
    std::vector<std::uint8_t> one{0x38};
    auto scale_bytes = f32_bytes({0.1f});  // 0x3dcccccd -> bf16 0x3dcd (rounds up)
    auto out = di::dequant_fp8_to_bf16(view("w", dtype::f8_e4m3, {1, 1}, one),
                                       view("s", dtype::f32, {1, 1}, scale_bytes), {1, 1});
    CHECK(out.values == std::vector<std::uint16_t>{0x3dcd});
  }
  SUBCASE("a 3x5 weight inside one 128x128 block") {
    // [3, 5]: 1 2 4 -1 0 / .5 1.5 3 448 -448 / 2^-6 7*2^-9 -7*2^-9 1.125 2.25
    std::vector<std::uint8_t> bytes{0x38, 0x40, 0x48, 0xb8, 0x00, 0x30, 0x3c, 0x44,
                                    0x7e, 0xfe, 0x08, 0x07, 0x87, 0x39, 0x41};
    std::vector<std::uint8_t> scale_bytes{126};  // [1, 1]: 0.5
    auto out = di::dequant_fp8_to_f32(view("w", dtype::f8_e4m3, {3, 5}, bytes),
                                      view("s", dtype::f8_e8m0, {1, 1}, scale_bytes), {});
    std::vector<float> expected{0.5f,       1.0f,        2.0f,         -0.5f,   0.0f,     // row 0
                                0.25f,      0.75f,       1.5f,         224.0f,  -224.0f,  // row 1
                                0.0078125f, 7.0f / 1024, -7.0f / 1024, 0.5625f, 1.125f};
    CHECK(out.values == expected);
  }
  SUBCASE("1x32 blocks: one scale per row, as V4.1's Engram tables use") {
    std::vector<std::uint8_t> bytes(3 * 32, 0x38);  // [3, 32]
    std::vector<std::uint8_t> scale_bytes{127, 130, 124};
    auto out = di::dequant_fp8_to_f32(view("w", dtype::f8_e4m3, {3, 32}, bytes),
                                      view("s", dtype::f8_e8m0, {3, 1}, scale_bytes), {1, 32});
    CHECK(out.values[31] == 1.0f);
    CHECK(out.values[32] == 8.0f);
    CHECK(out.values[95] == 0.125f);
  }
}

TEST_CASE("dequant fp8: mismatched inputs give clear errors") {
  using doctest::Contains;
  ragged_fp8 w;
  std::vector<std::uint8_t> scale_bytes(6, 127);
  auto good_scale = view("s", dtype::f8_e8m0, {2, 3}, scale_bytes);
  auto swapped_scale = view("s", dtype::f8_e8m0, {3, 2}, scale_bytes);
  di::block_shape b32{32, 32};
  CHECK_THROWS_WITH_AS(di::dequant_fp8_to_f32(w.weight(), swapped_scale, b32),
                       "hand.safetensors: scale 's' has shape [3, 2], but weight 'w' [40, 70] "
                       "with 32x32 blocks needs [2, 3]",
                       di::error);
  CHECK_THROWS_WITH_AS(di::dequant_fp8_to_f32(w.weight(), good_scale, {128, 128}),
                       Contains("needs [1, 1]"), di::error);
  CHECK_THROWS_WITH_AS(di::dequant_fp8_to_f32(w.weight(), good_scale, {0, 32}),
                       Contains("weight 'w': block shape 0x32 must be positive"), di::error);
  auto bf16_weight = view("w", dtype::bf16, {40, 35}, w.weight_bytes);
  CHECK_THROWS_WITH_AS(di::dequant_fp8_to_f32(bf16_weight, good_scale, b32),
                       Contains("weight 'w' has dtype BF16"), di::error);
  auto i32_scale = view("s", dtype::i32, {2, 3}, scale_bytes);
  CHECK_THROWS_WITH_AS(di::dequant_fp8_to_f32(w.weight(), i32_scale, b32),
                       Contains("scale 's' has dtype I32"), di::error);
  auto flat = view("w", dtype::f8_e4m3, {2800}, w.weight_bytes);
  CHECK_THROWS_WITH_AS(di::dequant_fp8_to_f32(flat, good_scale, b32),
                       Contains("weight 'w' must be 2-D, has shape [2800]"), di::error);
  auto lying = view("w", dtype::f8_e4m3, {41, 70}, w.weight_bytes);
  CHECK_THROWS_WITH_AS(di::dequant_fp8_to_f32(lying, good_scale, b32),
                       Contains("F8_E4M3 [41, 70] does not match its 2800 bytes"), di::error);
}

namespace {

// N=2, K=40 packed FP4: [2, 20] bytes with scales [2, 2] (K=40 is not a multiple of 32).
struct packed_fp4 {
  std::vector<std::uint8_t> weight_bytes = std::vector<std::uint8_t>(2 * 20, 0x00);  // [2, 20]
  std::vector<std::uint8_t> scale_bytes{127, 129, 126, 130};  // [2, 2]: 1 4 / 0.5 8
  packed_fp4() {
    weight_bytes[0] = 0x72;                                // cols 0,1: 1.0, 6.0 (low nibble first)
    weight_bytes[1] = 0xf9;                                // cols 2,3: -0.5, -6.0
    weight_bytes[16] = 0x21;                               // cols 32,33: 0.5, 1.0
    weight_bytes[19] = 0x3c;                               // cols 38,39: -2.0, 1.5
    for (int j = 20; j < 40; ++j) weight_bytes[j] = 0x55;  // row 1: all 3.0
  }
  di::tensor_view weight() const { return view("e", dtype::i8, {2, 20}, weight_bytes); }
  di::tensor_view scale() const { return view("es", dtype::f8_e8m0, {2, 2}, scale_bytes); }
};

}  // namespace

TEST_CASE("dequant fp4: packed e2m1, low nibble first, K not a multiple of 32") {
  packed_fp4 p;
  auto out = di::dequant_fp4_to_f32(p.weight(), p.scale(), 40);
  REQUIRE(out.rows == 2);
  REQUIRE(out.cols == 40);
  std::vector<float> row0(40, 0.0f);
  row0[0] = 1.0f;
  row0[1] = 6.0f;
  row0[2] = -0.5f;
  row0[3] = -6.0f;
  row0[32] = 2.0f;
  row0[33] = 4.0f;
  row0[38] = -8.0f;
  row0[39] = 6.0f;
  CHECK(std::vector<float>(out.values.begin(), out.values.begin() + 40) == row0);
  std::vector<float> row1(40, 1.5f);
  for (int c = 32; c < 40; ++c) row1[c] = 24.0f;
  CHECK(std::vector<float>(out.values.begin() + 40, out.values.end()) == row1);

  auto bf16 = di::dequant_fp4_to_bf16(p.weight(), p.scale());
  REQUIRE(bf16.values.size() == 80);
  CHECK(bf16.values[1] == 0x40c0);   // 6.0
  CHECK(bf16.values[38] == 0xc100);  // -8.0
  CHECK(bf16.values[79] == 0x41c0);  // 24.0

  auto scale_f32 = f32_bytes({1.0f, 0.25f, 2.0f, 2.0f});
  auto with_f32 = di::dequant_fp4_to_f32(p.weight(), view("es", dtype::f32, {2, 2}, scale_f32));
  CHECK(with_f32.values[33] == 0.25f);
  CHECK(with_f32.values[40] == 6.0f);
}

TEST_CASE("dequant fp4: mismatched inputs give clear errors") {
  using doctest::Contains;
  packed_fp4 p;
  CHECK_THROWS_WITH_AS(di::dequant_fp4_to_f32(p.weight(), p.scale(), 41),
                       "hand.safetensors: weight 'e': K=41 is odd, but FP4 e2m1 packs two values "
                       "per byte (shape [2, 20] holds K=40)",
                       di::error);
  CHECK_THROWS_WITH_AS(
      di::dequant_fp4_to_f32(p.weight(), p.scale(), 38),
      "hand.safetensors: weight 'e' [2, 20] packs K=40 FP4 values per row, expected K=38",
      di::error);
  std::vector<std::uint8_t> two_scales{127, 127};
  auto one_scale_per_row = view("es", dtype::f8_e8m0, {2, 1}, two_scales);
  CHECK_THROWS_WITH_AS(di::dequant_fp4_to_f32(p.weight(), one_scale_per_row),
                       Contains("scale 'es' has shape [2, 1], but weight 'e' [2, 20] with packed "
                                "FP4 (K=40, 32 per scale) needs [2, 2]"),
                       di::error);
  auto fp8_weight = view("e", dtype::f8_e4m3, {2, 20}, p.weight_bytes);
  CHECK_THROWS_WITH_AS(di::dequant_fp4_to_f32(fp8_weight, p.scale()),
                       Contains("weight 'e' has dtype F8_E4M3"), di::error);
}

namespace {

// Dequantizes every FP8 and FP4 weight of a golden checkpoint; checks that all values are
// finite, and that sampled elements equal e4m3/e2m1(w) * scale indexed by hand.
void check_golden_dequant(const char* name, di::block_shape block) {
  di::checkpoint ckpt(di::test::shared_path("testdata/golden") / name);
  int num_fp8 = 0, num_fp4 = 0;
  for (const di::tensor_view& w : ckpt.tensors()) {
    if (w.type != dtype::f8_e4m3 && w.type != dtype::i8) continue;
    CAPTURE(w.name);
    std::string base = w.name.substr(0, w.name.size() - std::string_view("weight").size());
    const di::tensor_view& s = ckpt.get(base + "scale");
    bool is_fp8 = w.type == dtype::f8_e4m3;
    // V4.1's Engram embedding tables carry one scale per row of 32.
    bool is_engram_table = w.name.find(".engram.embed.") != std::string::npos;
    di::block_shape b = is_engram_table ? di::block_shape{1, 32} : block;
    auto out = is_fp8 ? di::dequant_fp8_to_f32(w, s, b) : di::dequant_fp4_to_f32(w, s);
    (is_fp8 ? num_fp8 : num_fp4) += 1;
    bool all_finite = true;
    float max_abs = 0;
    for (float v : out.values) {
      all_finite = all_finite && std::isfinite(v);
      max_abs = std::max(max_abs, std::fabs(v));
    }
    CHECK(all_finite);
    CHECK(max_abs > 0);
    for (std::int64_t i = 0; i < std::int64_t(out.values.size()); i += 97) {
      std::int64_t r = i / out.cols, c = i % out.cols;
      float expected;
      if (is_fp8) {
        std::uint8_t sc = s.bytes[(r / b.rows) * s.shape[1] + c / b.cols];
        expected = di::e4m3_to_f32(w.bytes[r * out.cols + c]) * di::e8m0_to_f32(sc);
      } else {
        std::uint8_t packed = w.bytes[r * (out.cols / 2) + c / 2];
        std::uint8_t nibble = c % 2 == 0 ? packed & 0xf : packed >> 4;
        expected = di::e2m1_to_f32(nibble) * di::e8m0_to_f32(s.bytes[r * s.shape[1] + c / 32]);
      }
      if (out.values[i] != expected)
        FAIL_CHECK("element " << i << ": " << out.values[i] << " != " << expected);
    }
  }
  CHECK(num_fp8 > 0);
  CHECK(num_fp4 > 0);
}

}  // namespace

TEST_CASE("dequant: every quantized weight of the golden V4.1 checkpoint (32x32 blocks)") {
  check_golden_dequant("v41_public", {32, 32});
}

TEST_CASE("dequant: every quantized weight of the golden V4 checkpoint (128x128 blocks)") {
  check_golden_dequant("v4_public", {128, 128});
}
