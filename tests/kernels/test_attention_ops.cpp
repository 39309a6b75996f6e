// Tests of attention with sinks and of the selection ops against hand-computed values:
// sparse attention (sink in the denominator only, unused slots, empty rows), indexer scores,
// top-k (order, ties, -inf picks), visibility/candidate masks, candidate blocks.
#include "kernels/ops.hpp"

#include <doctest/doctest.h>

#include <cmath>
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

std::vector<std::int32_t> ints(const tensor& t) {
  return {t.data<std::int32_t>(), t.data<std::int32_t>() + t.numel()};
}

TEST_CASE("sparse_attention: softmax over the named rows plus a denominator-only sink") {
  tensor kv = make<float>({3, 2}, {1, 0, 0, 1, 1, 1});
  tensor q = make<float>({2, 2, 2}, {1, 0, 0, 2, 1, 0, 0, 2});  // [tokens, heads, dim]
  tensor sinks = make<float>({2}, {-1e30f, 0.0f});
  tensor idx = make<std::int32_t>({2, 3}, {0, 2, -1, -1, -1, -1});
  tensor o = ops::sparse_attention(q, kv, sinks, idx, {1.0f});  // [2, 2, 2]
  const float* p = o.data<float>();
  // head 0: equal scores on rows 0 and 2, no sink mass
  CHECK(p[0] == doctest::Approx(1.0f));
  CHECK(p[1] == doctest::Approx(0.5f));
  // head 1: scores 0 and 2, sink 0 adds exp(0 - 2) to the denominator
  const float e = std::exp(-2.0f), denom = 1.0f + 2.0f * e;
  CHECK(p[2] == doctest::Approx((1.0f + e) / denom));
  CHECK(p[3] == doctest::Approx(1.0f / denom));
  for (int i = 4; i < 8; ++i) CHECK(p[i] == 0.0f);  // a token with nothing to attend
  tensor bad = make<std::int32_t>({2, 3}, {0, 3, -1, -1, -1, -1});
  CHECK_THROWS_AS(ops::sparse_attention(q, kv, sinks, bad, {1.0f}), error);
}

TEST_CASE("sparse_attention: a NaN score gives NaN, even when every score is NaN") {
  // fmax skips NaN: scores that were all NaN once read as "nothing to attend" and gave zeros,
  // so a NaN weight (attn_norm) left the logits finite instead of failing the step.
  const float nan = NAN;
  tensor kv = make<float>({2, 2}, {1, 0, 0, 1});
  tensor q = make<float>({3, 1, 2}, {nan, nan, 1, 0, 1, 0});  // [tokens, heads, dim]
  tensor sinks = make<float>({1}, {0.0f});
  tensor idx = make<std::int32_t>({3, 2}, {0, 1, 0, 1, -1, -1});
  tensor bad_kv = kv.clone();
  tensor o = ops::sparse_attention(q, kv, sinks, idx, {1.0f});  // [3, 1, 2]
  CHECK(std::isnan(o.data<float>()[0]));                        // every score NaN
  CHECK(std::isnan(o.data<float>()[1]));
  CHECK(std::isfinite(o.data<float>()[2]));  // finite rows are untouched
  CHECK(o.data<float>()[4] == 0.0f);         // nothing to attend stays zero
  CHECK(o.data<float>()[5] == 0.0f);
  bad_kv.data<float>()[2] = nan;  // one row NaN: one NaN score among finite ones
  tensor o2 = ops::sparse_attention(q, bad_kv, sinks, idx, {1.0f});
  CHECK(std::isnan(o2.data<float>()[2]));
  CHECK(std::isnan(o2.data<float>()[3]));
}

TEST_CASE("index_scores: relu of each head's dot product, weighted and summed") {
  tensor q = make<float>({1, 2, 2}, {1, 0, 0, 1});
  tensor keys = make<float>({2, 2}, {2, -1, -1, 3});
  tensor w = make<float>({1, 2}, {0.5f, 2.0f});
  tensor s = ops::index_scores(q, keys, w);  // [1, 2]
  CHECK(s.data<float>()[0] == 1.0f);
  CHECK(s.data<float>()[1] == 6.0f);
}

TEST_CASE("topk: descending, lower index first on ties, -inf picks as -1") {
  const float inf = INFINITY;
  tensor s = make<float>({1, 4}, {3, 1, -inf, 3});
  CHECK(ints(ops::topk(s, 3)) == std::vector<std::int32_t>{0, 3, 1});
  CHECK(ints(ops::topk(s, 4)) == std::vector<std::int32_t>{0, 3, 1, -1});
  CHECK_THROWS_AS(ops::topk(s, 5), error);
}

TEST_CASE("topk: NaN scores rank below every number but above -inf") {
  const float nan = NAN, inf = INFINITY;
  tensor s = make<float>({1, 6}, {nan, 2, -inf, 5, nan, -3});
  CHECK(ints(ops::topk(s, 3)) == std::vector<std::int32_t>{3, 1, 5});
  CHECK(ints(ops::topk(s, 6)) == std::vector<std::int32_t>{3, 1, 5, 0, 4, -1});
}

TEST_CASE("masked_topk: hides entries past the visible count and outside the mask") {
  tensor s = make<float>({1, 4}, {5, 4, 3, 2});
  tensor vis = make<std::int64_t>({1}, {3});
  tensor allowed = make<std::uint8_t>({1, 4}, {1, 0, 1, 1});
  CHECK(ints(ops::masked_topk(s, vis, allowed, 3)) == std::vector<std::int32_t>{0, 2, -1});
  CHECK(ints(ops::masked_topk(s, vis, tensor(), 2)) == std::vector<std::int32_t>{0, 1});
}

TEST_CASE("masked_topk: topk's picks in entry order, masked picks after them") {
  // scores 1, 9, 3, 9, -inf, 7: topk(4) is 1, 3, 5, 2 (ties: the lower index first)
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  tensor s = make<float>({2, 6}, {1, 9, 3, 9, ninf, 7, 2, 2, 2, 2, 2, 2});
  tensor vis = make<std::int64_t>({2}, {6, 2});
  CHECK(ints(ops::topk(s, 4)) == std::vector<std::int32_t>{1, 3, 5, 2, 0, 1, 2, 3});
  CHECK(ints(ops::masked_topk(s, vis, tensor(), 4)) ==
        std::vector<std::int32_t>{1, 2, 3, 5, 0, 1, -1, -1});
  // every entry picked: the -inf one comes back as -1, last
  CHECK(ints(ops::masked_topk(s, vis, tensor(), 6)) ==
        std::vector<std::int32_t>{0, 1, 2, 3, 5, -1, 0, 1, -1, -1, -1, -1});
}

TEST_CASE("candidate_blocks: best blocks by their best visible entry, newest block pinned") {
  tensor s = make<float>({2, 6}, {1, 9, 2, 2, 5, 0, 1, 1, 1, 1, 1, 1});
  tensor vis = make<std::int64_t>({2}, {5, 0});
  tensor keep = ops::candidate_blocks(s, vis, 2, 2);  // [2, 6]
  const std::vector<std::uint8_t> got(keep.data<std::uint8_t>(), keep.data<std::uint8_t>() + 12);
  // token 0: blocks {0: 9, 1: 2, 2: pinned} -> blocks 2 and 0; token 1: nothing reachable
  CHECK(got == std::vector<std::uint8_t>{1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0});
}

}  // namespace
}  // namespace di
