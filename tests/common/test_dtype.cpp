// Scalar format conversions against hand-computed values and exhaustive round trips.
#include "kernels/dtype.hpp"

#include <doctest/doctest.h>

#include <cmath>

using namespace di;

TEST_CASE("e4m3 decodes hand-computed values") {
  CHECK(e4m3_to_f32(0x00) == 0.0f);
  CHECK(e4m3_to_f32(0x38) == 1.0f);         // exp 7 (bias 7), man 0
  CHECK(e4m3_to_f32(0x3c) == 1.5f);
  CHECK(e4m3_to_f32(0x7e) == 448.0f);       // largest finite
  CHECK(e4m3_to_f32(0xfe) == -448.0f);
  CHECK(e4m3_to_f32(0x01) == std::ldexp(1.0f, -9));  // smallest subnormal
  CHECK(e4m3_to_f32(0x08) == std::ldexp(1.0f, -6));  // smallest normal
  CHECK(std::isnan(e4m3_to_f32(0x7f)));
  CHECK(std::isnan(e4m3_to_f32(0xff)));
}

TEST_CASE("e4m3 encode is the exact inverse on every finite code and rounds to nearest even") {
  for (int b = 0; b < 256; ++b) {
    float v = e4m3_to_f32(std::uint8_t(b));
    if (std::isnan(v)) continue;
    if (b == 0x80) continue;  // -0 encodes back as 0x80 too, checked below
    CHECK_MESSAGE(f32_to_e4m3(v) == b, "code " << b);
  }
  CHECK(f32_to_e4m3(-0.0f) == 0x80);
  CHECK(f32_to_e4m3(1.0625f) == 0x38);   // halfway 1.0|1.125 -> even (1.0)
  CHECK(f32_to_e4m3(1.1875f) == 0x3a);   // halfway 1.125|1.25 -> even (1.25)
  CHECK(f32_to_e4m3(1000.0f) == 0x7e);   // saturates
  CHECK(f32_to_e4m3(-1e30f) == 0xfe);
  CHECK(f32_to_e4m3(std::ldexp(1.0f, -10)) == 0x00);  // half the smallest subnormal -> even 0
  CHECK(f32_to_e4m3(std::ldexp(3.0f, -10)) == 0x02);  // 1.5 ulp -> even 2
  CHECK(f32_to_e4m3(std::ldexp(7.5f, -9)) == 0x08);   // tie 7|8 subnormal steps -> even, the smallest normal
  CHECK(f32_to_e4m3(std::ldexp(15.5f, -9)) == 0x10);  // tie 1.875|2.0 x 2^-6 -> even (2^-5)
}

TEST_CASE("e8m0 is a power of two") {
  CHECK(e8m0_to_f32(127) == 1.0f);
  CHECK(e8m0_to_f32(128) == 2.0f);
  CHECK(e8m0_to_f32(120) == 1.0f / 128.0f);
  CHECK(e8m0_to_f32(1) == std::ldexp(1.0f, -126));
  CHECK(e8m0_to_f32(0) == std::ldexp(1.0f, -127));
  CHECK(e8m0_to_f32(254) == std::ldexp(1.0f, 127));
  CHECK(std::isnan(e8m0_to_f32(255)));
}

TEST_CASE("e2m1 grid and round to nearest even") {
  const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 16; ++c) {
    float v = e2m1_to_f32(std::uint8_t(c));
    CHECK(v == ((c & 8) ? -grid[c & 7] : grid[c & 7]));
    if (c != 8) CHECK(f32_to_e2m1(v) == c);
  }
  CHECK(f32_to_e2m1(0.25f) == 0);   // tie 0|0.5 -> 0
  CHECK(f32_to_e2m1(0.75f) == 2);   // tie 0.5|1 -> 1.0 (even code)
  CHECK(f32_to_e2m1(1.25f) == 2);
  CHECK(f32_to_e2m1(1.75f) == 4);
  CHECK(f32_to_e2m1(2.5f) == 4);
  CHECK(f32_to_e2m1(3.5f) == 6);
  CHECK(f32_to_e2m1(5.0f) == 6);
  CHECK(f32_to_e2m1(5.01f) == 7);
  CHECK(f32_to_e2m1(100.0f) == 7);
  CHECK(f32_to_e2m1(-2.9f) == (8 | 5));
}

TEST_CASE("bf16 and f16") {
  CHECK(bf16_to_f32(0x3f80) == 1.0f);
  CHECK(bf16_to_f32(0xc000) == -2.0f);
  CHECK(f32_to_bf16(1.0f) == 0x3f80);
  CHECK(f32_to_bf16(bits_to_f32(0x3f808000u)) == 0x3f80);  // tie -> even
  CHECK(f32_to_bf16(bits_to_f32(0x3f818000u)) == 0x3f82);  // tie -> even (up)
  CHECK(f32_to_bf16(bits_to_f32(0x3f808001u)) == 0x3f81);
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  CHECK(f16_to_f32(0x3c00) == 1.0f);
  CHECK(f16_to_f32(0xc000) == -2.0f);
  CHECK(f16_to_f32(0x7bff) == 65504.0f);
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(std::isinf(f16_to_f32(0x7c00)));
  CHECK(std::isnan(f16_to_f32(0x7e00)));
}

TEST_CASE("dtype names round-trip") {
  for (auto t : {dtype::bf16, dtype::f16, dtype::f32, dtype::f8_e4m3, dtype::f8_e8m0, dtype::i8,
                 dtype::i32, dtype::i64}) {
    auto parsed = parse_dtype(dtype_name(t));
    REQUIRE(parsed.has_value());
    CHECK(*parsed == t);
  }
  CHECK_FALSE(parse_dtype("F8_E5M2").has_value());
  CHECK_FALSE(parse_dtype("").has_value());
}
