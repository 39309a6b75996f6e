// GPU tests of the indexer and the router against their CPU twins: index scores over f32 and
// packed FP4 keys, top-k / masked top-k / candidate blocks (exactly equal, ties and -inf
// included), MoE routing (same experts, weights to fp32 rounding) with bias, hash routing and
// V4.1's normalisation.
#include "gpu_test_util.hpp"
#include <cstring>
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cuda/cuda_model_ops.hpp"

namespace di {
namespace {

using test::dbuf;

std::vector<std::int32_t> ints(const tensor& t) {
  return {t.data<std::int32_t>(), t.data<std::int32_t>() + t.numel()};
}

TEST_CASE("cuda index_scores: f32 keys and packed FP4 keys read in place") {
  DI_REQUIRE_GPU();
  const cache_row_format f{cache_quant::fp4_ue8m0, 32, 128, 0};
  for (int tokens : {1, 3})
    for (std::int64_t entries : {1, 65, 300}) {
      CAPTURE(tokens);
      CAPTURE(entries);
      const int heads = 32, dim = 128;
      tensor q = test::randn({tokens, heads, dim});
      tensor flat = q.view({tokens * heads, dim});  // the indexer's FP4 queries
      cpu::fp4_fake_quant(flat, 32, ops::fp4_scale::ue8m0);
      const tensor keys = test::randn({entries, dim});
      const tensor w = test::randn({tokens, heads});
      tensor packed = tensor::empty({entries, std::int64_t(f.row_bytes())}, dtype::u8);
      cpu::encode_cache_rows(keys, f, packed);
      tensor keys_dec = tensor::empty({entries, dim}, dtype::f32);
      cpu::decode_cache_rows(packed, f, keys_dec);
      const dbuf dq(q), dw(w), dk(keys), dp(packed);
      for (bool use_packed : {false, true}) {
        const tensor want = cpu::index_scores(q, use_packed ? keys_dec : keys, w);
        dbuf out(want.nbytes());
        cuda::index_scores_params p;
        p.q = dq.get<float>();
        p.weights = dw.get<float>();
        p.keys = {use_packed ? dp.get() : dk.get(), entries, use_packed, f};
        p.scores = out.get<float>();
        p.tokens = tokens;
        p.heads = heads;
        p.dim = dim;
        cuda::launch_index_scores(p, nullptr);
        const tensor got = out.to_host(want.shape(), dtype::f32);
        CHECK(test::max_scaled_err(got, want, 1e-4, 1e-3) <= 1.0);
      }
    }
}

TEST_CASE("cuda index_scores with per-token key rows: each token's own keys, in place") {
  // Batched decode: token t scores rows key_rows[t, e] of one packed key table; a row < 0
  // scores 0. Each token's scores equal index_scores of that token over its own keys.
  DI_REQUIRE_GPU();
  const cache_row_format f{cache_quant::fp4_ue8m0, 32, 128, 0};
  const int heads = 64, dim = 128, tokens = 3;
  const std::int64_t table = 200, entries = 70;
  tensor q = test::randn({tokens, heads, dim});
  tensor flat = q.view({tokens * heads, dim});
  cpu::fp4_fake_quant(flat, 32, ops::fp4_scale::ue8m0);
  const tensor w = test::randn({tokens, heads});
  const tensor keys = test::randn({table, dim});
  tensor packed = tensor::empty({table, std::int64_t(f.row_bytes())}, dtype::u8);
  cpu::encode_cache_rows(keys, f, packed);
  tensor dec = tensor::empty({table, dim}, dtype::f32);
  cpu::decode_cache_rows(packed, f, dec);
  tensor rows = tensor::empty({tokens, entries}, dtype::i32);
  const std::int64_t valid[tokens] = {70, 3, 0};
  for (int t = 0; t < tokens; ++t)
    for (std::int64_t e = 0; e < entries; ++e)
      rows.data<std::int32_t>()[t * entries + e] =
          e < valid[t] ? std::int32_t((e * 37 + t * 11) % table) : -1;
  const dbuf dq(q), dw(w), dp(packed), dr(rows);
  dbuf out(std::size_t(tokens * entries) * 4);
  cuda::index_scores_params p;
  p.q = dq.get<float>();
  p.weights = dw.get<float>();
  p.keys = {dp.get(), table, true, f};
  p.scores = out.get<float>();
  p.tokens = tokens;
  p.heads = heads;
  p.dim = dim;
  p.key_rows = dr.get<std::int32_t>();
  p.entries = entries;
  cuda::launch_index_scores(p, nullptr);
  const tensor got = out.to_host({tokens, entries}, dtype::f32);
  for (int t = 0; t < tokens; ++t) {
    CAPTURE(t);
    tensor own = tensor::zeros({entries, dim}, dtype::f32);  // a missing row: zero key, score 0
    for (std::int64_t e = 0; e < valid[t]; ++e)
      std::memcpy(own.data<float>() + e * dim,
                  dec.data<float>() + rows.data<std::int32_t>()[t * entries + e] * dim, dim * 4);
    const tensor want = cpu::index_scores(q.slice(0, t, t + 1).clone(), own,
                                          w.slice(0, t, t + 1).clone());
    CHECK(test::max_scaled_err(got.slice(0, t, t + 1).clone(), want, 1e-4, 1e-3) <= 1.0);
  }
}

/// Scores on a coarse grid (many ties) with some -inf.
tensor tie_scores(std::int64_t rows, std::int64_t n) {
  tensor s = tensor::empty({rows, n}, dtype::f32);
  std::uniform_int_distribution<int> v(-40, 40);
  for (std::int64_t i = 0; i < s.numel(); ++i) {
    const int x = v(test::rng());
    s.data<float>()[i] = x == -40 ? -INFINITY : float(x) * 0.25f;
  }
  return s;
}

TEST_CASE("cuda topk and masked_topk: the CPU's picks and order exactly") {
  DI_REQUIRE_GPU();
  struct shape {
    std::int64_t rows, n;
    int k;
  };
  // k == n (every entry picked: the selection skipped) at 5, 40, 300 and 2048 entries; k past
  // 1024 (two sort positions per thread).
  for (const shape& sh :
       {shape{1, 1, 1}, shape{3, 5, 5}, shape{4, 1000, 512}, shape{2, 5000, 2048},
        shape{5, 3000, 1}, shape{0, 10, 3}, shape{2, 70000, 512}, shape{3, 40, 40},
        shape{2, 300, 300}, shape{2, 2048, 2048}, shape{2, 1500, 1100}, shape{3, 1001, 7},
        shape{2, 33, 1}, shape{2, 3000, 700}}) {
    CAPTURE(sh.n);
    CAPTURE(sh.k);
    // (3000 x 700: every score the same -- one digit in every radix pass, every pick a tie
    // taken by the lowest index.)
    tensor s = sh.n > 4000 ? test::randn({sh.rows, sh.n}) : tie_scores(sh.rows, sh.n);
    if (sh.n == 3000 && sh.k == 700)
      for (std::int64_t i = 0; i < s.numel(); ++i) s.data<float>()[i] = 0.5f;
    const dbuf ds(s);
    dbuf out(std::size_t(sh.rows) * sh.k * 4);
    cuda::topk_params p;
    p.scores = ds.get<float>();
    p.out = out.get<std::int32_t>();
    p.rows = sh.rows;
    p.n = sh.n;
    p.k = sh.k;
    cuda::launch_topk(p, nullptr);
    CHECK(ints(out.to_host({sh.rows, sh.k}, dtype::i32)) == ints(cpu::topk(s, sh.k)));

    // masked: visible prefix per row and a random allowed mask
    tensor visible = tensor::empty({sh.rows}, dtype::i64);
    tensor allowed = tensor::empty({sh.rows, sh.n}, dtype::u8);
    std::uniform_int_distribution<std::int64_t> vis(0, sh.n);
    for (std::int64_t r = 0; r < sh.rows; ++r) visible.data<std::int64_t>()[r] = vis(test::rng());
    for (std::int64_t i = 0; i < allowed.numel(); ++i)
      allowed.data<std::uint8_t>()[i] = std::uint8_t(test::rng()() % 4 != 0);
    // masked_topk's order (index_order): the picks in entry order, -1 after them; with a map,
    // the same launch writes map[r, pick]
    tensor all_visible = tensor::zeros({sh.rows}, dtype::i64);
    for (std::int64_t r = 0; r < sh.rows; ++r) all_visible.data<std::int64_t>()[r] = sh.n;
    tensor map = tensor::empty({sh.rows, sh.n}, dtype::i32);
    for (std::int64_t i = 0; i < map.numel(); ++i)
      map.data<std::int32_t>()[i] = std::int32_t(test::rng()() % 100000);
    const dbuf dv(visible), da(allowed), dm(map);
    dbuf mapped(std::size_t(sh.rows) * sh.k * 4);
    p.index_order = true;
    out.poison();
    cuda::launch_topk(p, nullptr);  // no mask
    CHECK(ints(out.to_host({sh.rows, sh.k}, dtype::i32)) ==
          ints(cpu::masked_topk(s, all_visible, tensor(), sh.k)));
    for (bool with_allowed : {false, true}) {
      out.poison();
      mapped.poison();
      p.visible = dv.get<std::int64_t>();
      p.allowed = with_allowed ? da.get<std::uint8_t>() : nullptr;
      p.map = dm.get<std::int32_t>();
      p.mapped = mapped.get<std::int32_t>();
      cuda::launch_topk(p, nullptr);
      const std::vector<std::int32_t> want =
          ints(cpu::masked_topk(s, visible, with_allowed ? allowed : tensor(), sh.k));
      CHECK(ints(out.to_host({sh.rows, sh.k}, dtype::i32)) == want);
      std::vector<std::int32_t> want_rows(want.size());
      for (std::size_t i = 0; i < want.size(); ++i) {
        const std::int64_t r = std::int64_t(i) / sh.k;
        want_rows[i] = want[i] < 0 ? -1 : map.data<std::int32_t>()[r * sh.n + want[i]];
      }
      CHECK(ints(mapped.to_host({sh.rows, sh.k}, dtype::i32)) == want_rows);
    }
    p.map = nullptr;
    p.mapped = nullptr;
    p.visible = nullptr;
    p.allowed = nullptr;
  }
  cuda::topk_params bad;
  bad.rows = 1;
  bad.n = 3;
  bad.k = 4;
  CHECK_THROWS_AS(cuda::launch_topk(bad, nullptr), error);
}

TEST_CASE("cuda candidate_blocks: the CPU's kept entries exactly") {
  DI_REQUIRE_GPU();
  for (std::int64_t entries : {1, 17, 1000, 20000}) {
    CAPTURE(entries);
    const std::int64_t tokens = 3;
    const int block = 8, topk_blocks = 64;
    const tensor s = test::randn({tokens, entries});
    tensor visible = tensor::empty({tokens}, dtype::i64);
    std::uniform_int_distribution<std::int64_t> vis(0, entries);
    for (std::int64_t t = 0; t < tokens; ++t) visible.data<std::int64_t>()[t] = vis(test::rng());
    const dbuf ds(s), dv(visible);
    dbuf keep(std::size_t(tokens * entries));
    dbuf work(cuda::candidate_blocks_work_bytes(tokens, entries, block, topk_blocks));
    cuda::launch_candidate_blocks({ds.get<float>(), dv.get<std::int64_t>(),
                                   keep.get<std::uint8_t>(), tokens, entries, topk_blocks, block,
                                   work.get()},
                                  nullptr);
    const tensor want = cpu::candidate_blocks(s, visible, topk_blocks, block);
    CHECK(test::bytes_equal(keep.to_host(want.shape(), dtype::u8), want));
  }
}

TEST_CASE("cuda route: same experts as the CPU, weights to fp32 rounding") {
  DI_REQUIRE_GPU();
  struct cfg {
    int experts, k;
    bool bias, fixed, normalize;
    float eps, temp;
  };
  for (const cfg& c : {cfg{384, 6, true, false, true, 1e-20f, 1.0f},
                       cfg{256, 6, true, true, true, 0.0f, 1.0f},
                       cfg{256, 8, false, false, false, 0.0f, 0.7f}, cfg{5, 1, true, false, false, 0, 1}}) {
    for (std::int64_t tokens : {0, 1, 37}) {
      CAPTURE(c.experts);
      CAPTURE(tokens);
      const tensor logits = test::randn({tokens, c.experts}, 3.0f);
      const tensor bias = test::randn({c.experts}, 0.3f);
      tensor fixed = tensor::empty({tokens, c.k}, dtype::i32);
      for (std::int64_t i = 0; i < fixed.numel(); ++i)
        fixed.data<std::int32_t>()[i] = std::int32_t(test::rng()() % unsigned(c.experts));
      const ops::router_params rp{c.k, c.temp, 1.5f, c.normalize, c.eps};
      const ops::routing want =
          cpu::route(logits, c.bias ? bias : tensor(), c.fixed ? fixed : tensor(), rp);
      const dbuf dl(logits), db(bias), df(fixed);
      dbuf w(std::size_t(tokens) * c.k * 4), e(std::size_t(tokens) * c.k * 4);
      cuda::route_params p;
      p.logits = dl.get<float>();
      p.bias = c.bias ? db.get<float>() : nullptr;
      p.fixed = c.fixed ? df.get<std::int32_t>() : nullptr;
      p.weights = w.get<float>();
      p.experts_out = e.get<std::int32_t>();
      p.tokens = tokens;
      p.experts = c.experts;
      p.top_k = c.k;
      p.gate_temp = c.temp;
      p.route_scale = 1.5f;
      p.normalize = c.normalize;
      p.normalize_eps = c.eps;
      cuda::launch_route(p, nullptr);
      CHECK(ints(e.to_host({tokens, c.k}, dtype::i32)) == ints(want.experts));
      CHECK(test::max_scaled_err(w.to_host({tokens, c.k}, dtype::f32), want.weights, 1e-5, 1e-7) <=
            1.0);
    }
  }
}

TEST_CASE("cuda topk and route: NaN scores rank as on the CPU, below every number") {
  // A NaN's order key sorted it first (or, negative, below -inf), and a router row of NaN
  // named expert 0x7fffffff and wrote past its shared table.
  DI_REQUIRE_GPU();
  const float nan = NAN, inf = INFINITY;
  tensor s = test::randn({3, 40});
  for (std::int64_t e = 0; e < 40; ++e) s.data<float>()[e] = nan;  // row 0: all NaN
  for (std::int64_t e = 40; e < 80; e += 3) s.data<float>()[e] = e % 2 ? nan : -nan;
  s.data<float>()[81] = -inf;
  const dbuf ds(s);
  for (int k : {5, 40}) {
    CAPTURE(k);
    dbuf out(std::size_t(3) * k * 4);
    cuda::topk_params p;
    p.scores = ds.get<float>();
    p.out = out.get<std::int32_t>();
    p.rows = 3;
    p.n = 40;
    p.k = k;
    cuda::launch_topk(p, nullptr);
    CHECK(ints(out.to_host({3, k}, dtype::i32)) == ints(cpu::topk(s, k)));
    p.index_order = true;  // masked_topk's order: the same picks
    tensor visible = tensor::empty({3}, dtype::i64);
    for (int r = 0; r < 3; ++r) visible.data<std::int64_t>()[r] = 40;
    cuda::launch_topk(p, nullptr);
    CHECK(ints(out.to_host({3, k}, dtype::i32)) == ints(cpu::masked_topk(s, visible, tensor(), k)));
  }
  const int experts = 16, top = 4;
  tensor logits = test::randn({2, experts}, 3.0f);
  for (int e = 0; e < experts; ++e) logits.data<float>()[e] = nan;  // token 0: all NaN
  logits.data<float>()[experts + 3] = nan;
  const tensor bias = test::randn({experts}, 0.3f);
  const ops::router_params rp{top, 1.0f, 1.5f, true, 1e-20f};
  const ops::routing want = cpu::route(logits, bias, tensor(), rp);
  const dbuf dl(logits), db(bias);
  dbuf w(std::size_t(2) * top * 4), e(std::size_t(2) * top * 4);
  cuda::route_params p;
  p.logits = dl.get<float>();
  p.bias = db.get<float>();
  p.weights = w.get<float>();
  p.experts_out = e.get<std::int32_t>();
  p.tokens = 2;
  p.experts = experts;
  p.top_k = top;
  p.gate_temp = 1.0f;
  p.route_scale = 1.5f;
  p.normalize = true;
  p.normalize_eps = 1e-20f;
  cuda::launch_route(p, nullptr);
  CHECK(ints(e.to_host({2, top}, dtype::i32)) == ints(want.experts));
  CHECK(ints(want.experts)[0] == 0);  // all NaN: experts in index order
  const tensor got_w = w.to_host({2, top}, dtype::f32);
  for (int j = 0; j < top; ++j) CHECK(std::isnan(got_w.data<float>()[j]));
}

}  // namespace
}  // namespace di
