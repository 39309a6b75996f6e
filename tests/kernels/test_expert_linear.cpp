// The CPU expert_linear (all MoE experts' projections in one call) against one linear per
// expert on its rows: same results bit for bit, rows outside every expert zero, bad offsets
// rejected.
#include "kernels/ops.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <random>

namespace di {
namespace {

TEST_CASE("expert_linear equals a linear per expert over its row range") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const std::int64_t experts = 4, out = 6, in = 64;
  tensor w = tensor::empty({experts * out, in}, dtype::f32);  // [experts * out, in]
  for (std::int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = u(rng);
  const std::int32_t counts[experts] = {2, 0, 3, 1};
  tensor offsets = tensor::empty({experts + 1}, dtype::i32);
  offsets.data<std::int32_t>()[0] = 0;
  for (int e = 0; e < experts; ++e)
    offsets.data<std::int32_t>()[e + 1] = offsets.data<std::int32_t>()[e] + counts[e];
  const std::int64_t rows = 8;  // two rows past the last expert
  tensor x = tensor::empty({rows, in}, dtype::f32);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
  for (int act : {0, 32}) {
    const tensor y = ops::expert_linear(x, offsets, weight_matrix(w), {act, 0});
    REQUIRE(y.shape() == tensor_shape({rows, out}));
    for (int e = 0; e < experts; ++e) {
      const std::int32_t b = offsets.data<std::int32_t>()[e],
                         end = offsets.data<std::int32_t>()[e + 1];
      if (b == end) continue;
      const tensor want =
          ops::linear(x.slice(0, b, end).clone(),
                      weight_matrix(w.slice(0, e * out, (e + 1) * out).clone()), {act});
      CHECK(std::memcmp(y.data<float>() + b * out, want.data<float>(), want.nbytes()) == 0);
    }
    for (std::int64_t i = 6 * out; i < rows * out; ++i) CHECK(y.data<float>()[i] == 0.0f);
    // Two weights over the same rows (w1 and w3): each exactly its own expert_linear.
    tensor w3 = tensor::empty({experts * out, in}, dtype::f32);
    for (std::int64_t i = 0; i < w3.numel(); ++i) w3.data<float>()[i] = u(rng);
    const auto [y1, y3] =
        ops::expert_linear_pair(x, offsets, weight_matrix(w), weight_matrix(w3), {act, 0});
    CHECK(std::memcmp(y1.data<float>(), y.data<float>(), y.nbytes()) == 0);
    const tensor want3 = ops::expert_linear(x, offsets, weight_matrix(w3), {act, 0});
    CHECK(std::memcmp(y3.data<float>(), want3.data<float>(), want3.nbytes()) == 0);
  }
  // A pair whose second weight does not split into the experts is a clear error.
  const tensor w_odd = tensor::zeros({experts * out + 1, in}, dtype::f32);
  CHECK_THROWS_AS(ops::expert_linear_pair(x, offsets, weight_matrix(w), weight_matrix(w_odd), {}),
                  di::error);
  offsets.data<std::int32_t>()[2] = 99;
  CHECK_THROWS_AS(ops::expert_linear(x, offsets, weight_matrix(w), {}), di::error);
  CHECK_THROWS_AS(ops::expert_linear_pair(x, offsets, weight_matrix(w), weight_matrix(w), {}),
                  di::error);
}

TEST_CASE("expert_linear: rows_all_grouped with rows outside every expert is a clear error") {
  // The promise (every row in some expert's range) let CUDA leave the output unzeroed; nothing
  // checked it, so a caller that broke it got rows of whatever the memory held.
  const std::int64_t experts = 2, out = 4, in = 32, rows = 5;
  const tensor w = tensor::zeros({experts * out, in}, dtype::f32);
  const tensor x = tensor::zeros({rows, in}, dtype::f32);
  tensor offsets = tensor::empty({experts + 1}, dtype::i32);
  const auto set = [&](std::int32_t a, std::int32_t b, std::int32_t c) {
    offsets.data<std::int32_t>()[0] = a;
    offsets.data<std::int32_t>()[1] = b;
    offsets.data<std::int32_t>()[2] = c;
  };
  ops::expert_linear_params grouped;
  grouped.rows_all_grouped = true;
  set(0, 2, 5);  // every row grouped: the promise holds
  CHECK(ops::expert_linear(x, offsets, weight_matrix(w), grouped).shape() ==
        tensor_shape({rows, out}));
  CHECK_NOTHROW(ops::expert_linear_pair(x, offsets, weight_matrix(w), weight_matrix(w), grouped));
  // the last row, the first row, every row outside
  const std::int32_t broken[][3] = {{0, 2, 4}, {1, 2, 5}, {0, 0, 0}};
  for (const auto& o : broken) {
    CAPTURE(o[0]);
    CAPTURE(o[2]);
    set(o[0], o[1], o[2]);
    // Without the promise, rows outside every range are zero, as documented.
    CHECK_NOTHROW(ops::expert_linear(x, offsets, weight_matrix(w), {}));
    CHECK_THROWS_WITH_AS(ops::expert_linear(x, offsets, weight_matrix(w), grouped),
                         doctest::Contains("rows_all_grouped is set, but the experts' ranges "
                                           "cover rows"),
                         di::error);
    CHECK_THROWS_WITH_AS(
        ops::expert_linear_pair(x, offsets, weight_matrix(w), weight_matrix(w), grouped),
        doctest::Contains("rows_all_grouped"), di::error);
  }
}

}  // namespace
}  // namespace di
