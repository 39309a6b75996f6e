// Incremental-state tests on both golden checkpoints: prefill in chunks of 1, 7 and 64 tokens
// gives the one-pass logits (within 1e-4), and a batch of two sequences in one forward call
// gives each sequence's own result.
#include "kernels/ops.hpp"
#include "tests/model/forward/golden.hpp"

#include <doctest/doctest.h>

#include <fmt/format.h>

namespace di::test {
namespace {

/// Logits [positions, vocab] at the golden positions, prefilling in chunks of `chunk` tokens.
tensor chunked_logits(golden_case& g, std::int64_t chunk) {
  const std::vector<std::int64_t> ids = g.i64("input_ids"), wanted = g.i64("positions");
  kv_block_pool pool(g.model->layout(), 64);
  sequence_state state(pool, 1024);
  std::vector<tensor> rows;
  for (std::int64_t start = 0; start < std::int64_t(ids.size()); start += chunk) {
    const std::int64_t end = std::min<std::int64_t>(start + chunk, std::int64_t(ids.size()));
    std::vector<std::int64_t> picked;
    for (std::int64_t p : wanted)
      if (p >= start && p < end) picked.push_back(p - start);
    std::vector<std::int64_t> pos;
    const auto tokens = std::span(ids).subspan(std::size_t(start), std::size_t(end - start));
    forward_output out = run_one(*g.model, request_for(state, tokens, pos, picked));
    rows.push_back(out.logits);
  }
  return ops::concat_rows(rows);
}

double max_abs_diff(const tensor& a, const tensor& b) {
  REQUIRE(a.shape() == b.shape());
  double m = 0.0;
  for (std::int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
  return m;
}

void check_chunked(const std::string& name) {
  golden_case& g = golden(name);
  g.model->set_options({true});
  const std::int64_t whole = std::int64_t(g.i64("input_ids").size());
  const tensor one_pass = chunked_logits(g, whole);  // [8, vocab]
  for (std::int64_t chunk : {1, 7, 64}) {
    const double d = max_abs_diff(chunked_logits(g, chunk), one_pass);
    MESSAGE(fmt::format("{} chunks of {}: max|d| vs one pass {:.3e}", name, chunk, d));
    CHECK(d <= 1e-4);
  }
}

TEST_CASE("golden v41_public: chunked prefill equals one pass") {
  check_chunked("v41_public");
}

TEST_CASE("golden v4_public: chunked prefill equals one pass") {
  check_chunked("v4_public");
}

TEST_CASE("batched forward: two sequences in one call compute what they compute alone") {
  for (const char* name : {"v41_public", "v4_public"}) {
    golden_case& g = golden(name);
    g.model->set_options({true});
    const std::vector<std::int64_t> ids = g.i64("input_ids");
    const std::span<const std::int64_t> all(ids);
    kv_block_pool pool(g.model->layout(), 64);
    // Alone: sequence a = first 100 tokens, sequence b = first 40 then 60 more.
    sequence_state a1(pool, 512), b1(pool, 512);
    std::vector<std::int64_t> p1, p2, p3, p4, p5, p6;
    const forward_output a_alone = run_one(*g.model, request_for(a1, all.first(100), p1, {99}));
    run_one(*g.model, request_for(b1, all.first(40), p2, {}));
    const forward_output b_alone =
        run_one(*g.model, request_for(b1, all.subspan(40, 60), p3, {59}));
    // Together: b's first chunk alone, then a's prefill and b's second chunk in one call.
    sequence_state a2(pool, 512), b2(pool, 512);
    run_one(*g.model, request_for(b2, all.first(40), p4, {}));
    std::vector<forward_request> batch{request_for(a2, all.first(100), p5, {99}),
                                       request_for(b2, all.subspan(40, 60), p6, {59})};
    const std::vector<forward_output> both = g.model->forward(batch);
    const double da = max_abs_diff(both[0].logits, a_alone.logits);
    const double db = max_abs_diff(both[1].logits, b_alone.logits);
    MESSAGE(fmt::format("{} batched vs alone: max|d| {:.3e}, {:.3e}", name, da, db));
    CHECK(da <= 1e-4);
    CHECK(db <= 1e-4);
  }
}

}  // namespace
}  // namespace di::test
