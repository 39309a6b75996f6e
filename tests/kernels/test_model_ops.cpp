// Tests of the model-specific ops against hand-computed values: MoE routing with sqrt-softplus
// scores, the Engram gate, the compressor's pooling (with overlap, and chunk-invariant state),
// and the mHC mixes (Sinkhorn), head mix, collapse and expand.
#include "kernels/ops.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace di {
namespace {

template <typename T>
tensor make(const tensor_shape& shape, std::vector<T> v) {
  tensor t = tensor::empty(shape, dtype_of<T>());
  REQUIRE(std::int64_t(v.size()) == t.numel());
  for (std::size_t i = 0; i < v.size(); ++i) t.data<T>()[i] = v[i];
  return t;
}

float sqrt_softplus(float z) {
  return std::sqrt(std::log1p(std::exp(z)));
}

TEST_CASE("route: bias picks, unbiased scores weigh, normalised and scaled") {
  tensor logits = make<float>({1, 3}, {0.0f, 2.0f, -30.0f});
  tensor bias = make<float>({3}, {0.0f, 0.0f, 10.0f});
  ops::routing r = ops::route(logits, bias, tensor(), {2, 1.0f, 1.5f, true, 1e-20f});
  CHECK(r.experts.data<std::int32_t>()[0] == 2);
  CHECK(r.experts.data<std::int32_t>()[1] == 1);
  const float s1 = sqrt_softplus(2.0f), s2 = sqrt_softplus(-30.0f);
  CHECK(r.weights.data<float>()[0] == doctest::Approx(1.5f * s2 / (s1 + s2)));
  CHECK(r.weights.data<float>()[1] == doctest::Approx(1.5f * s1 / (s1 + s2)));

  tensor fixed = make<std::int32_t>({1, 2}, {0, 1});  // hash routing
  ops::routing h = ops::route(logits, tensor(), fixed, {2, 1.0f, 1.0f, false, 0.0f});
  CHECK(h.weights.data<float>()[0] == doctest::Approx(sqrt_softplus(0.0f)));
  CHECK(h.weights.data<float>()[1] == doctest::Approx(s1));
  ops::routing temp = ops::route(logits, tensor(), fixed, {2, 2.0f, 1.0f, false, 0.0f});
  CHECK(temp.weights.data<float>()[1] == doctest::Approx(sqrt_softplus(1.0f)));
}

TEST_CASE("group_by_expert: offsets, token rows and weights in (token, slot) order") {
  // 3 tokens, k = 2, 4 experts: expert 1 gets (0,0) and (2,1); expert 2 none.
  const ops::routing r{make<float>({3, 2}, {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}),
                       make<std::int32_t>({3, 2}, {1, 3, 0, 3, 0, 1})};
  const ops::expert_groups g = ops::group_by_expert(r, 4);
  const std::vector<std::int32_t> offsets{0, 2, 4, 4, 6};
  const std::vector<std::int64_t> rows{1, 2, 0, 2, 0, 1};
  const std::vector<float> weights{0.3f, 0.5f, 0.1f, 0.6f, 0.2f, 0.4f};
  const std::vector<std::int32_t> slots{2, 4, 0, 5, 1, 3};  // pair (t, j) -> its grouped row
  for (int e = 0; e <= 4; ++e) CHECK(g.offsets.data<std::int32_t>()[e] == offsets[std::size_t(e)]);
  for (int i = 0; i < 6; ++i) {
    CHECK(g.rows.data<std::int64_t>()[i] == rows[std::size_t(i)]);
    CHECK(g.weights.data<float>()[i] == weights[std::size_t(i)]);
    CHECK(g.slots.data<std::int32_t>()[i] == slots[std::size_t(i)]);
  }
  const ops::routing empty{tensor::empty({0, 2}, dtype::f32), tensor::empty({0, 2}, dtype::i32)};
  CHECK(ops::group_by_expert(empty, 4).offsets.data<std::int32_t>()[4] == 0);
  CHECK_THROWS_AS(ops::group_by_expert(r, 3), di::error);  // expert 3 of 3
  CHECK_THROWS_AS(ops::group_by_expert({r.experts, r.experts}, 4), di::error);  // f32 weights
}

TEST_CASE("gather_add_rows through group_by_expert's slots: scatter_add_rows's bits") {
  // 9 tokens, k = 3 of 5 experts: the grouped rows back into their tokens by either op, from
  // the same starting y, in the same order of additions.
  const std::int64_t tokens = 9, k = 3, width = 7;
  std::vector<std::int32_t> ids;
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t j = 0; j < k; ++j) ids.push_back(std::int32_t((t * 2 + j * 3) % 5));
  // values of a fixed pseudo-random sequence (any will do: the two ops must agree bit for bit)
  std::uint32_t state = 12345u;
  auto values = [&](const tensor_shape& shape, float scale) {
    tensor t = tensor::empty(shape, dtype::f32);
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      state = state * 1664525u + 1013904223u;
      t.data<float>()[i] = scale * (float(state >> 8) / float(1u << 24) - 0.5f);
    }
    return t;
  };
  const ops::routing r{values({tokens, k}, 1.0f), make<std::int32_t>({tokens, k}, ids)};
  const ops::expert_groups g = ops::group_by_expert(r, 5);
  for (std::int64_t i = 0; i < tokens * k; ++i)  // slots invert rows
    CHECK(g.rows.data<std::int64_t>()[g.slots.data<std::int32_t>()[i]] == i / k);
  const tensor src = values({tokens * k, width}, 3.0f);
  const tensor y0 = values({tokens, width}, 1.0f);
  tensor scattered = y0.clone(), gathered = y0.clone();
  ops::scatter_add_rows(scattered, g.rows, src);
  ops::gather_add_rows(gathered, g.slots.view({tokens, k}), src);
  CHECK(std::memcmp(gathered.raw(), scattered.raw(), gathered.nbytes()) == 0);
  // a negative slot is skipped; a slot past the source rows, or slots of another row count,
  // are errors
  tensor one = tensor::zeros({1, 2}, dtype::f32);
  ops::gather_add_rows(one, make<std::int32_t>({1, 2}, {-1, 1}), make<float>({2, 2}, {1, 2, 3, 4}));
  CHECK(one.data<float>()[0] == 3.0f);
  CHECK(one.data<float>()[1] == 4.0f);
  CHECK_THROWS_AS(ops::gather_add_rows(one, make<std::int32_t>({1, 2}, {0, 2}),
                                       make<float>({2, 2}, {1, 2, 3, 4})),
                  di::error);
  CHECK_THROWS_AS(ops::gather_add_rows(one, make<std::int32_t>({2, 1}, {0, 1}),
                                       make<float>({2, 2}, {1, 2, 3, 4})),
                  di::error);
}

TEST_CASE("engram_gate: signed-sqrt sigmoid gate of the normalised dot product") {
  tensor h = make<float>({1, 1, 2}, {1, 1});
  tensor value = make<float>({1, 2}, {10, 20});
  tensor w = make<float>({1, 2}, {1, 1});
  const float g_pos = 1.0f / (1.0f + std::exp(-1.0f));
  tensor out = ops::engram_gate(h, make<float>({1, 1, 2}, {2, 0}), value, w, {0.0f, 1e-6f});
  CHECK(out.data<float>()[0] == doctest::Approx(1.0f + 10.0f * g_pos));
  CHECK(out.data<float>()[1] == doctest::Approx(1.0f + 20.0f * g_pos));
  tensor neg = ops::engram_gate(h, make<float>({1, 1, 2}, {-2, 0}), value, w, {0.0f, 1e-6f});
  CHECK(neg.data<float>()[0] == doctest::Approx(1.0f + 10.0f * (1.0f - g_pos)));
  tensor zero = ops::engram_gate(h, make<float>({1, 1, 2}, {0, 0}), value, w, {1e-20f, 1e-6f});
  CHECK(zero.data<float>()[0] == doctest::Approx(1.0f + 10.0f / (1.0f + std::exp(-1e-3f))));
}

TEST_CASE("engram_gate_kv: the keys and the value read in place give engram_gate's bits") {
  // Two tokens, two streams of 3: kv rows [key 0, key 1, value] per token.
  const tensor h = make<float>({2, 2, 3}, {1, -2, 3, 0.5f, 4, -1, 2, 2, -3, 1, 0, 7});
  const tensor kv = make<float>({2, 9}, {3, 1, -1, 0.25f, 2, 5, 10, 20, 30,  //
                                         -4, 1, 2, 6, -6, 0.5f, -1, 2, -3});
  const tensor w = make<float>({2, 3}, {1, 0.5f, 2, -1, 3, 1});
  const tensor key = make<float>({2, 2, 3}, {3, 1, -1, 0.25f, 2, 5, -4, 1, 2, 6, -6, 0.5f});
  const tensor value = make<float>({2, 3}, {10, 20, 30, -1, 2, -3});
  const ops::engram_params p{1e-20f, 1e-6f};
  const tensor want = ops::engram_gate(h, key, value, w, p);
  const tensor got = ops::engram_gate_kv(h, kv, w, p);
  for (int i = 0; i < 12; ++i) CHECK(got.data<float>()[i] == want.data<float>()[i]);
  CHECK_THROWS_AS(ops::engram_gate_kv(h, make<float>({2, 6}, std::vector<float>(12, 1.0f)), w, p),
                  di::error);  // rows of 2 x 3, not (2 + 1) x 3
}

struct compressor_state {
  tensor kv, score;
  compressor_state(int rows, int width)
      : kv(tensor::zeros({rows, width}, dtype::f32)),
        score(tensor::full({rows, width}, -std::numeric_limits<float>::infinity())) {}
};

TEST_CASE("compress_tokens: gated softmax pooling per group, state carried across calls") {
  tensor kv = make<float>({4, 1}, {1, 3, 5, 7});
  tensor score = make<float>({4, 1}, {0, std::log(3.0f), 0, 0});
  compressor_state one(2, 1);
  tensor all = ops::compress_tokens(kv, score, 0, one.kv, one.score, {2, false});  // [2, 1]
  CHECK(all.size(0) == 2);
  CHECK(all.data<float>()[0] == doctest::Approx(2.5f));
  CHECK(all.data<float>()[1] == doctest::Approx(6.0f));
  compressor_state chunked(2, 1);
  CHECK(ops::compress_tokens(kv.slice(0, 0, 1), score.slice(0, 0, 1), 0, chunked.kv, chunked.score,
                             {2, false})
            .size(0) == 0);
  tensor mid = ops::compress_tokens(kv.slice(0, 1, 3), score.slice(0, 1, 3), 1, chunked.kv,
                                    chunked.score, {2, false});
  tensor last = ops::compress_tokens(kv.slice(0, 3, 4), score.slice(0, 3, 4), 3, chunked.kv,
                                     chunked.score, {2, false});
  CHECK(mid.data<float>()[0] == all.data<float>()[0]);
  CHECK(last.data<float>()[0] == all.data<float>()[1]);
}

TEST_CASE("compress_tokens: overlapping windows pool the previous group's first half") {
  tensor kv = make<float>({4, 2}, {1, 10, 2, 20, 3, 30, 4, 40});  // [prev half, current half]
  tensor score = tensor::zeros({4, 2}, dtype::f32);
  compressor_state st(4, 2);
  tensor e = ops::compress_tokens(kv, score, 0, st.kv, st.score, {2, true});  // [2, 1]
  CHECK(e.data<float>()[0] == doctest::Approx(15.0f));  // first group: no previous group
  CHECK(e.data<float>()[1] == doctest::Approx((1.0f + 2.0f + 30.0f + 40.0f) / 4.0f));
}

TEST_CASE("hc_mixes: projection, sigmoids and a doubly stochastic comb") {
  const ops::hc_params p{2, 20, 1e-6f, 0.0f};
  tensor x = make<float>({1, 2, 1}, {3, 4});  // [tokens, hc, dim]
  std::vector<float> fn(16, 0.0f);
  fn[0] = 1.0f;  // mix 0 reads stream 0
  tensor scale = make<float>({3}, {2.0f, 1.0f, 1.0f});
  tensor base = make<float>({8}, {0.5f, 0, 0, 1, 1, 0, 0, 1});
  ops::hc_mix m = ops::hc_mixes(x, make<float>({8, 2}, fn), scale, base, p);
  auto sigmoid = [](float v) { return 1.0f / (1.0f + std::exp(-v)); };
  const float mix0 = 3.0f / std::sqrt(12.5f);
  CHECK(m.pre.data<float>()[0] == doctest::Approx(sigmoid(2.0f * mix0 + 0.5f) + 1e-6f));
  CHECK(m.pre.data<float>()[1] == doctest::Approx(sigmoid(0.0f) + 1e-6f));
  CHECK(m.post.data<float>()[0] == doctest::Approx(1.0f));
  CHECK(m.post.data<float>()[1] == doctest::Approx(2.0f * sigmoid(1.0f)));
  // comb logits [[1, 0], [0, 1]]: the row softmax is already doubly stochastic
  const float* c = m.comb.data<float>();
  CHECK(c[0] == doctest::Approx(sigmoid(1.0f)).epsilon(1e-5));
  CHECK(c[1] == doctest::Approx(1.0f - sigmoid(1.0f)).epsilon(1e-5));
  CHECK(c[0] + c[2] == doctest::Approx(1.0f).epsilon(1e-5));
  CHECK(c[2] + c[3] == doctest::Approx(1.0f).epsilon(1e-5));
}

TEST_CASE("hc_head_pre, hc_collapse and hc_expand") {
  const ops::hc_params p{2, 20, 1e-6f, 0.0f};
  tensor x = make<float>({1, 2, 2}, {1, 2, 3, 4});
  tensor fn = make<float>({2, 4}, {0, 0, 0, 0, 0, 0, 0, 0});
  tensor pre = ops::hc_head_pre(x, fn, make<float>({1}, {1.0f}), make<float>({2}, {0, 2}), p);
  CHECK(pre.data<float>()[0] == doctest::Approx(0.5f + 1e-6f));
  CHECK(pre.data<float>()[1] == doctest::Approx(1.0f / (1.0f + std::exp(-2.0f)) + 1e-6f));

  tensor y = ops::hc_collapse(x, make<float>({1, 2}, {0.5f, 2.0f}));  // [1, 2]
  CHECK(y.data<float>()[0] == 6.5f);
  CHECK(y.data<float>()[1] == 9.0f);
  // hc_collapse_norm is exactly rms_norm(hc_collapse(.)) on the CPU, with and without a weight.
  const tensor pre2 = make<float>({1, 2}, {0.5f, 2.0f}), nw = make<float>({2}, {2.0f, -1.0f});
  for (const tensor& weight : {nw, tensor()}) {
    const tensor fused = ops::hc_collapse_norm(x, pre2, weight, 1e-6f);
    const tensor two = ops::rms_norm(ops::hc_collapse(x, pre2), weight, 1e-6f);
    REQUIRE(fused.shape() == two.shape());
    for (int i = 0; i < 2; ++i) CHECK(fused.data<float>()[i] == two.data<float>()[i]);
  }
  tensor out = ops::hc_expand(make<float>({1, 2}, {1, 1}), x, make<float>({1, 2}, {2, 3}),
                              make<float>({1, 2, 2}, {0, 1, 1, 0}));  // [1, 2, 2]
  const float want[] = {5, 6, 4, 5};
  for (int i = 0; i < 4; ++i) CHECK(out.data<float>()[i] == want[i]);
}

}  // namespace
}  // namespace di
