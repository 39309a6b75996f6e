// Tests of the dense ops against hand-computed values: embedding gathers (fp32 and FP8
// tables), row concatenation, RMSNorm, linear with and without activation quantization, the
// grouped projection, the clamped SwiGLU, the Hadamard transform and the rotary embedding.
#include "kernels/ops.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

namespace di {
namespace {

tensor make(const tensor_shape& shape, std::vector<float> v) {
  tensor t = tensor::empty(shape, dtype::f32);
  REQUIRE(std::int64_t(v.size()) == t.numel());
  for (std::size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = v[i];
  return t;
}

tensor ids_of(std::vector<std::int64_t> v) {
  tensor t = tensor::empty({std::int64_t(v.size())}, dtype::i64);
  for (std::size_t i = 0; i < v.size(); ++i) t.data<std::int64_t>()[i] = v[i];
  return t;
}

TEST_CASE("embedding: gathers rows and rejects ids outside the vocabulary") {
  tensor table = make({3, 2}, {0, 1, 10, 11, 20, 21});
  tensor out = ops::embedding(table, ids_of({2, 0, 2}));  // [3, 2]
  const float want[] = {20, 21, 0, 1, 20, 21};
  for (int i = 0; i < 6; ++i) CHECK(out.data<float>()[i] == want[i]);
  CHECK_THROWS_WITH_AS(ops::embedding(table, ids_of({3})),
                       doctest::Contains("outside the vocabulary"), error);
  CHECK_THROWS_AS(ops::embedding(table, ids_of({-1})), error);
}

TEST_CASE("embedding_fp8: e4m3 codes times e8m0 block scales") {
  std::uint8_t codes[2 * 4] = {0x38, 0x40, 0xb8, 0x00,
                               0x30, 0x38, 0x38, 0x38};  // 1, 2, -1, 0, .5, 1..
  std::uint8_t scales[2 * 2] = {127, 128, 126, 127};     // 1, 2 | 0.5, 1
  tensor c = tensor::view_of(codes, {2, 4}, dtype::u8);
  tensor s = tensor::view_of(scales, {2, 2}, dtype::u8);
  tensor out = ops::embedding_fp8(c, s, ids_of({1, 0}));  // [2, 4]
  const float want[] = {0.25f, 0.5f, 1.0f, 1.0f, 1.0f, 2.0f, -2.0f, 0.0f};
  for (int i = 0; i < 8; ++i) CHECK(out.data<float>()[i] == want[i]);
  CHECK_THROWS_AS(ops::embedding_fp8(c, s, ids_of({2})), error);
}

TEST_CASE("concat_rows stacks along dimension 0") {
  const tensor parts[] = {make({0, 2}, {}), make({1, 2}, {1, 2}), make({2, 2}, {3, 4, 5, 6})};
  tensor out = ops::concat_rows(parts);  // [3, 2]
  CHECK(out.size(0) == 3);
  for (int i = 0; i < 6; ++i) CHECK(out.data<float>()[i] == float(i + 1));
}

TEST_CASE("gather_rows, scatter_add_rows and add_inplace") {
  tensor x = make({3, 2}, {0, 1, 10, 11, 20, 21});
  tensor g = ops::gather_rows(x, ids_of({2, 0, 2}));  // [3, 2]
  const float want[] = {20, 21, 0, 1, 20, 21};
  for (int i = 0; i < 6; ++i) CHECK(g.data<float>()[i] == want[i]);
  tensor table = tensor::empty({2, 1}, dtype::i32);
  table.data<std::int32_t>()[0] = 7;
  table.data<std::int32_t>()[1] = 9;
  CHECK(ops::gather_rows(table, ids_of({1})).data<std::int32_t>()[0] == 9);
  CHECK_THROWS_AS(ops::gather_rows(x, ids_of({3})), error);
  tensor y = tensor::zeros({3, 2}, dtype::f32);
  ops::scatter_add_rows(y, ids_of({1, 1, 2}), make({3, 2}, {1, 2, 3, 4, 5, 6}));
  const float sum[] = {0, 0, 4, 6, 5, 6};
  for (int i = 0; i < 6; ++i) CHECK(y.data<float>()[i] == sum[i]);
  ops::add_inplace(y, x);
  CHECK(y.data<float>()[5] == 27.0f);
  CHECK_THROWS_AS(ops::add_inplace(y, make({2}, {1, 2})), error);
}

TEST_CASE("add_position_rows adds the table row of each position's phase") {
  tensor y = make({4, 2}, {0, 0, 1, 1, 2, 2, 3, 3});
  const tensor table = make({3, 2}, {10, 20, 30, 40, 50, 60});
  ops::add_position_rows(y, table, ids_of({0, 4, 8, -1}));  // phases 0, 1, 2, 2
  const float want[] = {10, 20, 31, 41, 52, 62, 53, 63};
  for (int i = 0; i < 8; ++i) CHECK(y.data<float>()[i] == want[i]);
  CHECK_THROWS_AS(ops::add_position_rows(y, table, ids_of({0, 1})), error);  // 2 positions, 4 rows
  CHECK_THROWS_AS(ops::add_position_rows(y, make({3, 1}, {1, 2, 3}), ids_of({0, 1, 2, 3})),
                  error);  // table width 1, rows of 2
  tensor empty = tensor::zeros({0, 2}, dtype::f32);
  ops::add_position_rows(empty, table, ids_of({}));
}

TEST_CASE("rms_norm: weighted and unweighted") {
  tensor x = make({2, 2}, {3, 4, 0, 0});
  tensor w = make({2}, {2, 0.5f});
  tensor y = ops::rms_norm(x, w, 0.0f);  // rms of (3, 4) = sqrt(12.5)
  const float r = 1.0f / std::sqrt(12.5f);
  CHECK(y.data<float>()[0] == doctest::Approx(2 * 3 * r));
  CHECK(y.data<float>()[1] == doctest::Approx(0.5f * 4 * r));
  tensor z = ops::rms_norm(x, tensor(), 1.0f);
  CHECK(z.data<float>()[0] == doctest::Approx(3.0f / std::sqrt(13.5f)));
  CHECK(z.data<float>()[2] == 0.0f);
}

TEST_CASE("linear: x W^T, with FP8 activation quantization per block") {
  tensor x = make({1, 4}, {1.125f, 2.0f, 3.0f, 0.1f});
  tensor w = make({2, 4}, {1, 0, 0, 0, 1, 1, 1, 1});
  tensor plain = ops::linear(x, w);  // [1, 2]
  CHECK(plain.data<float>()[0] == 1.125f);
  CHECK(plain.data<float>()[1] == doctest::Approx(6.225f));
  // blocks of 2, both with scale 2^-7: 1.125 (144) and 2 (256) and 3 (384) are on the e4m3
  // grid; 0.1 (12.8) rounds to 13
  tensor q = ops::linear(x, w, {2});
  CHECK(q.data<float>()[0] == 1.125f);
  CHECK(q.data<float>()[1] == doctest::Approx(1.125f + 2.0f + 3.0f + 13.0f / 128.0f));
  tensor tie = make({1, 2}, {1.0625f, 2.0f});  // 136 at scale 2^-7: tie -> 128
  CHECK(ops::linear(tie, make({1, 2}, {1, 0}), {2}).data<float>()[0] == 1.0f);
  CHECK_THROWS_AS(ops::linear(x, make({1, 3}, {1, 2, 3})), error);
}

TEST_CASE("grouped_linear: each group projects only its own slice") {
  tensor x = make({1, 2, 2}, {1, 2, 3, 4});           // [rows, groups, in]
  tensor w = make({4, 2}, {1, 0, 0, 1, 1, 1, 2, 0});  // groups of 2 outputs
  tensor y = ops::grouped_linear(x, w);               // [1, 2, 2]
  const float want[] = {1, 2, 7, 6};
  for (int i = 0; i < 4; ++i) CHECK(y.data<float>()[i] == want[i]);
}

TEST_CASE("swiglu: gate clamped above, up clamped on both sides, optional row scale") {
  tensor g = make({2, 2}, {20.0f, 0.0f, 1.0f, -3.0f});
  tensor u = make({2, 2}, {-30.0f, 5.0f, 2.0f, 1.0f});
  tensor scale = make({2}, {1.0f, 0.5f});
  tensor y = ops::swiglu(g, u, 10.0f, scale);
  auto silu = [](float v) { return v / (1.0f + std::exp(-v)); };
  CHECK(y.data<float>()[0] == doctest::Approx(silu(10.0f) * -10.0f));
  CHECK(y.data<float>()[1] == 0.0f);
  CHECK(y.data<float>()[2] == doctest::Approx(0.5f * silu(1.0f) * 2.0f));
  CHECK(y.data<float>()[3] == doctest::Approx(0.5f * silu(-3.0f)));
  tensor free = ops::swiglu(g, u, 0.0f, tensor());
  CHECK(free.data<float>()[0] == doctest::Approx(silu(20.0f) * -30.0f));
}

TEST_CASE("hadamard: normalised Sylvester transform") {
  tensor x = make({2, 4}, {1, 0, 0, 0, 1, 2, 3, 4});
  ops::hadamard(x);
  const float want[] = {0.5f, 0.5f, 0.5f, 0.5f, 5.0f, -1.0f, -2.0f, 0.0f};
  for (int i = 0; i < 8; ++i) CHECK(x.data<float>()[i] == doctest::Approx(want[i]));
  tensor bad = make({1, 3}, {1, 2, 3});
  CHECK_THROWS_AS(ops::hadamard(bad), error);
}

TEST_CASE("rotary: interleaved pairs of the trailing dims, inverse undoes it") {
  tensor x = make({2, 1, 4}, {7, 1, 2, 3, 7, 1, 2, 3});  // [tokens, heads, dim]
  tensor freq = make({1}, {0.5f});                       // one pair: the last two dims
  tensor pos = ids_of({0, 2});
  ops::rotary(x, pos, freq, false);
  CHECK(x.data<float>()[0] == 7);  // untouched leading dims
  CHECK(x.data<float>()[2] == 2);  // position 0: identity
  const float c = std::cos(1.0f), s = std::sin(1.0f);
  CHECK(x.data<float>()[6] == doctest::Approx(2 * c - 3 * s));
  CHECK(x.data<float>()[7] == doctest::Approx(2 * s + 3 * c));
  ops::rotary(x, pos, freq, true);
  CHECK(x.data<float>()[6] == doctest::Approx(2.0f));
  CHECK(x.data<float>()[7] == doctest::Approx(3.0f));
  CHECK_THROWS_AS(ops::rotary(x, ids_of({0}), freq, false), error);
}

TEST_CASE("norm_rope_quant: rms_norm, then rotary, then FP8 fake quantization") {
  const tensor x = make({2, 4}, {1, -2, 3, 0.5f, 4, 1, -1, 2});  // [tokens, dim]
  const tensor w = make({4}, {1, 2, 0.5f, 1});
  const tensor freq = make({1}, {0.25f});
  const tensor pos = ids_of({3, 9});
  for (const std::int64_t quant_dims : {std::int64_t(0), std::int64_t(2), std::int64_t(4)}) {
    tensor want = ops::rms_norm(x, w, 1e-6f);
    ops::rotary(want, pos, freq, false);
    ops::fp8_fake_quant(want, 2, quant_dims);
    const tensor got = ops::norm_rope_quant(x, w, 1e-6f, pos, freq, 2, quant_dims);
    REQUIRE(got.shape() == want.shape());
    for (std::int64_t i = 0; i < got.numel(); ++i)
      CHECK(got.data<float>()[i] == want.data<float>()[i]);
  }
}

}  // namespace
}  // namespace di
