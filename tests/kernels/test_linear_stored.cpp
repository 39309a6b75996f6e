// Tests of the linear ops on weights in their stored format against the reference they
// replace: dequantize the whole matrix on the host (model/checkpoint/dequant), then multiply
// in fp32. Decoding is exact and the accumulation order is the same, so the outputs must be
// bitwise equal -- on random FP8/FP4 matrices with ragged scale blocks, tiny and odd shapes,
// unaligned BF16/F32 views, both activation-quantization settings and the parallel path.
#include "kernels/ops.hpp"
#include "model/checkpoint/dequant.hpp"

#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace di {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

/// Owned bytes of a stored tensor, viewable both as a tensor and as a checkpoint tensor_view.
struct stored_bytes {
  std::vector<std::uint8_t> bytes;
  std::vector<std::int64_t> shape;
  dtype type = dtype::u8;

  tensor as_tensor() const { return tensor::view_of(bytes.data(), tensor_shape(shape), type); }
  tensor_view as_view(const char* name) const {
    return {name, type, shape, {bytes.data(), bytes.size()}, "test"};
  }
};

stored_bytes random_bytes(std::mt19937& rng, std::vector<std::int64_t> shape, dtype type,
                          bool skip_nan_codes) {
  stored_bytes s{{}, std::move(shape), type};
  std::int64_t n = 1;
  for (std::int64_t d : s.shape) n *= d;
  s.bytes.resize(std::size_t(n));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : s.bytes) {
    do b = std::uint8_t(byte(rng));
    while (skip_nan_codes && (b & 0x7f) == 0x7f);
  }
  return s;
}

/// ue8m0 scales around 1 (2^-12 .. 2^8), so that products stay normal fp32 numbers.
stored_bytes random_scales(std::mt19937& rng, std::int64_t rows, std::int64_t cols) {
  stored_bytes s{std::vector<std::uint8_t>(std::size_t(rows * cols)), {rows, cols}, dtype::f8_e8m0};
  std::uniform_int_distribution<int> exponent(115, 135);
  for (auto& b : s.bytes) b = std::uint8_t(exponent(rng));
  return s;
}

tensor random_input(std::mt19937& rng, std::int64_t rows, std::int64_t cols) {
  tensor x = tensor::empty({rows, cols}, dtype::f32);  // [rows, cols]
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = normal(rng);
  return x;
}

tensor as_tensor(const host_matrix<float>& m) {
  tensor t = tensor::empty({m.rows, m.cols}, dtype::f32);  // [rows, cols]
  std::memcpy(t.data<float>(), m.values.data(), m.values.size() * sizeof(float));
  return t;
}

bool bitwise_equal(const tensor& a, const tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

struct fp8_case {
  std::int64_t rows, out, in;
  scale_block block;
};

TEST_CASE("linear on FP8 block-scaled weights equals dequantize-then-linear, bitwise") {
  std::mt19937 rng(7);
  const fp8_case cases[] = {
      {1, 1, 1, {32, 32}},       {3, 33, 47, {32, 32}},       {2, 7, 5, {4, 2}},
      {5, 130, 300, {128, 128}}, {1, 67, 129, {32, 32}},      {0, 5, 8, {4, 4}},
      {17, 64, 64, {32, 32}},    {4, 1000, 1100, {128, 128}},  // parallel, many tiles
  };
  for (const fp8_case& c : cases) {
    const stored_bytes codes = random_bytes(rng, {c.out, c.in}, dtype::f8_e4m3, true);
    const stored_bytes scales =
        random_scales(rng, ceil_div(c.out, c.block.rows), ceil_div(c.in, c.block.cols));
    const weight_matrix w = weight_matrix::fp8(codes.as_tensor(), scales.as_tensor(), c.block);
    const tensor dense = as_tensor(
        dequant_fp8_to_f32(codes.as_view("w"), scales.as_view("s"), {c.block.rows, c.block.cols}));
    const tensor x = random_input(rng, c.rows, c.in);
    for (int act : {0, int(c.block.cols)}) {
      INFO(fmt::format("rows {} out {} in {} block {}x{} act {}", c.rows, c.out, c.in, c.block.rows,
                       c.block.cols, act));
      CHECK(bitwise_equal(ops::linear(x, w, {act}), ops::linear(x, dense, {act})));
      // A pair of weights over the same input: each exactly its own linear.
      const auto [ya, yb] = ops::linear_pair(x, w, dense, {act});
      CHECK(bitwise_equal(ya, ops::linear(x, w, {act})));
      CHECK(bitwise_equal(yb, ops::linear(x, dense, {act})));
    }
  }
}

TEST_CASE("linear on FP8 weights with F32 scales equals dequantize-then-linear, bitwise") {
  std::mt19937 rng(11);
  const stored_bytes codes = random_bytes(rng, {9, 70}, dtype::f8_e4m3, true);
  stored_bytes scales{std::vector<std::uint8_t>(2 * 3 * 4), {2, 3}, dtype::f32};
  std::uniform_real_distribution<float> any(0.01f, 3.0f);  // not powers of two: rounding shows
  for (int i = 0; i < 6; ++i) {
    const float s = any(rng);
    std::memcpy(scales.bytes.data() + 4 * i, &s, 4);
  }
  const weight_matrix w = weight_matrix::fp8(codes.as_tensor(), scales.as_tensor(), {8, 32});
  const tensor dense =
      as_tensor(dequant_fp8_to_f32(codes.as_view("w"), scales.as_view("s"), {8, 32}));
  const tensor x = random_input(rng, 3, 70);
  CHECK(bitwise_equal(ops::linear(x, w), ops::linear(x, dense)));
}

TEST_CASE("linear on packed MXFP4 weights equals dequantize-then-linear, bitwise") {
  std::mt19937 rng(13);
  const std::int64_t shapes[][3] = {{1, 1, 2},   {3, 5, 34}, {2, 67, 100},
                                    {1, 16, 64}, {0, 3, 32}, {4, 1100, 1024}};
  for (const auto& s : shapes) {
    const std::int64_t rows = s[0], out = s[1], in = s[2];
    const stored_bytes packed = random_bytes(rng, {out, in / 2}, dtype::i8, false);
    const stored_bytes scales = random_scales(rng, out, ceil_div(in, mxfp4_block_cols));
    const weight_matrix w = weight_matrix::fp4(packed.as_tensor(), scales.as_tensor());
    const tensor dense = as_tensor(dequant_fp4_to_f32(packed.as_view("w"), scales.as_view("s")));
    const tensor x = random_input(rng, rows, in);
    for (int act : {0, 32}) {
      INFO(fmt::format("rows {} out {} in {} act {}", rows, out, in, act));
      CHECK(w.cols() == in);
      CHECK(bitwise_equal(ops::linear(x, w, {act}), ops::linear(x, dense, {act})));
    }
  }
}

TEST_CASE("linear reads unaligned BF16 and F32 views exactly as their fp32 widening") {
  std::mt19937 rng(17);
  const std::int64_t out = 37, in = 29;
  const tensor x = random_input(rng, 2, in);
  const tensor dense = random_input(rng, out, in);
  // bf16 and f32 copies of `dense` one byte into a buffer, as a checkpoint view may be
  std::vector<std::uint8_t> bf16_buf(std::size_t(2 * out * in + 1)), f32_buf(4 * out * in + 1);
  tensor widened = tensor::empty({out, in}, dtype::f32);  // [out, in] the bf16 values as fp32
  for (std::int64_t i = 0; i < out * in; ++i) {
    const std::uint16_t h = f32_to_bf16(dense.data<float>()[i]);
    std::memcpy(bf16_buf.data() + 1 + 2 * i, &h, 2);
    widened.data<float>()[i] = bf16_to_f32(h);
  }
  std::memcpy(f32_buf.data() + 1, dense.raw(), dense.nbytes());
  const tensor bf16_view = tensor::view_of(bf16_buf.data() + 1, {out, in}, dtype::bf16);
  const tensor f32_view = tensor::view_of(f32_buf.data() + 1, {out, in}, dtype::f32);
  CHECK(bitwise_equal(ops::linear(x, bf16_view), ops::linear(x, widened)));
  CHECK(bitwise_equal(ops::linear(x, f32_view), ops::linear(x, dense)));
  tensor id = tensor::empty({1}, dtype::i64);  // the embedding of a bf16 view widens its row
  id.data<std::int64_t>()[0] = 3;
  CHECK(std::memcmp(ops::embedding(bf16_view, id).raw(), widened.data<float>() + 3 * in,
                    std::size_t(in) * 4) == 0);
}

TEST_CASE("grouped_linear on FP8 weights: groups cutting through scale blocks, bitwise") {
  std::mt19937 rng(19);
  const std::int64_t rows = 3, groups = 3, per_group = 11, in = 40;  // blocks of 4x16
  const stored_bytes codes = random_bytes(rng, {groups * per_group, in}, dtype::f8_e4m3, true);
  const stored_bytes scales = random_scales(rng, ceil_div(groups * per_group, 4), ceil_div(in, 16));
  const weight_matrix w = weight_matrix::fp8(codes.as_tensor(), scales.as_tensor(), {4, 16});
  const tensor dense =
      as_tensor(dequant_fp8_to_f32(codes.as_view("w"), scales.as_view("s"), {4, 16}));
  const tensor x = random_input(rng, rows * groups, in).view({rows, groups, in});
  CHECK(bitwise_equal(ops::grouped_linear(x, w), ops::grouped_linear(x, dense)));
}

TEST_CASE("every e4m3 code and every e2m1 nibble decodes as kernels/dtype.hpp defines") {
  std::vector<std::uint8_t> codes(256), e8m0 = {124};  // scale 2^-3
  for (int i = 0; i < 256; ++i) codes[std::size_t(i)] = std::uint8_t(i);
  const weight_matrix fp8 =
      weight_matrix::fp8(tensor::view_of(codes.data(), {256, 1}, dtype::f8_e4m3),
                         tensor::view_of(e8m0.data(), {1, 1}, dtype::f8_e8m0), {256, 1});
  const tensor y8 = ops::linear(tensor::full({1, 1}, 1.0f), fp8);  // [1, 256]
  for (int i = 0; i < 256; ++i) {
    const float want = e4m3_to_f32(std::uint8_t(i)) * 0.125f, got = y8.data<float>()[i];
    INFO("e4m3 code " << i);
    CHECK((got == want || (std::isnan(got) && std::isnan(want))));
  }
  std::vector<std::uint8_t> packed(32), fp4_scale(32, 127);
  for (int i = 0; i < 16; ++i) {
    packed[std::size_t(i)] = std::uint8_t(i);            // low nibble
    packed[std::size_t(16 + i)] = std::uint8_t(i << 4);  // high nibble
  }
  const weight_matrix fp4 =
      weight_matrix::fp4(tensor::view_of(packed.data(), {32, 1}, dtype::i8),
                         tensor::view_of(fp4_scale.data(), {32, 1}, dtype::f8_e8m0));
  const tensor y4 = ops::linear(tensor::full({1, 2}, 1.0f), fp4);  // [1, 32]
  for (int i = 0; i < 16; ++i) {
    INFO("e2m1 nibble " << i);
    CHECK(y4.data<float>()[i] == e2m1_to_f32(std::uint8_t(i)));
    CHECK(y4.data<float>()[16 + i] == e2m1_to_f32(std::uint8_t(i)));
  }
}

TEST_CASE("stored-format weights: mismatched scales and shapes are clear errors") {
  std::vector<std::uint8_t> codes(8 * 8), scales(4);
  const tensor c = tensor::view_of(codes.data(), {8, 8}, dtype::f8_e4m3);
  const tensor s = tensor::view_of(scales.data(), {2, 2}, dtype::f8_e8m0);
  const tensor x = tensor::full({1, 8}, 1.0f);
  CHECK_THROWS_WITH_AS(ops::linear(x, weight_matrix::fp8(c, s, {2, 2})),
                       doctest::Contains("do not fit"), error);  // needs [4, 4]
  CHECK_THROWS_WITH_AS(ops::linear(x, weight_matrix(c)), doctest::Contains("without scales"),
                       error);
  CHECK_THROWS_AS(ops::linear(tensor::full({1, 7}, 1.0f), weight_matrix::fp8(c, s, {4, 4})), error);
  CHECK_THROWS_WITH_AS(
      ops::linear(x, weight_matrix::fp4(tensor::view_of(codes.data(), {8, 4}, dtype::i8), s)),
      doctest::Contains("do not fit"), error);  // needs [8, 1]
  CHECK(ops::linear(x, weight_matrix::fp8(c, s, {4, 4})).size(1) == 8);
  // A pair is refused when either weight does not fit (nothing of the other one is returned).
  CHECK_THROWS_WITH_AS(
      ops::linear_pair(x, weight_matrix::fp8(c, s, {4, 4}), weight_matrix::fp8(c, s, {2, 2})),
      doctest::Contains("do not fit"), error);
  CHECK_THROWS_AS(ops::linear_pair(tensor::full({1, 7}, 1.0f), weight_matrix::fp8(c, s, {4, 4}),
                                   weight_matrix::fp8(c, s, {4, 4})),
                  error);
  // The interleaved FP4 layout exists on CUDA devices only: a CPU weight claiming it, or
  // leaving a device for the CPU, is refused rather than read in the wrong order.
  std::vector<std::uint8_t> packed(2 * 64), fp4_scales(2 * 4);
  weight_matrix il = weight_matrix::fp4(tensor::view_of(packed.data(), {2, 64}, dtype::i8),
                                        tensor::view_of(fp4_scales.data(), {2, 4}, dtype::f8_e8m0));
  il.interleaved = true;
  CHECK_THROWS_WITH_AS(check_weight_matrix(il, "w"), doctest::Contains("interleaved"), error);
  CHECK_THROWS_WITH_AS(ops::linear(tensor::full({1, 128}, 1.0f), il),
                       doctest::Contains("interleaved"), error);
  CHECK_THROWS_WITH_AS(weight_to(il, cpu_device), doctest::Contains("interleaved"), error);
  il.interleaved = false;
  check_weight_matrix(il, "w");
  // Derived data (cuBLASLt's scale layout) belongs to the source device: not carried.
  il.lt_scales = tensor::full({1, 4}, 1.0f);
  const weight_matrix moved = weight_to(il, cpu_device);
  CHECK_FALSE(moved.lt_scales.defined());
  CHECK(moved.values.defined());
}

}  // namespace
}  // namespace di
