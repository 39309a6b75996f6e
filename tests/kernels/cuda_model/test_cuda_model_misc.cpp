// GPU tests of the remaining model kernels against their CPU twins: SwiGLU, the compressor's state
// machine over chained calls (V4.1 ratio 2, V4 overlapping ratio 4, ratio 128), mHC mixing / head
// mix / collapse / expand, and the Engram gate.
#include <cstring>
#include <utility>
#include "gpu_test_util.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cuda/cuda_model_ops.hpp"

namespace di {
namespace {

using test::dbuf;
const device gpu{device_kind::cuda, 0};

TEST_CASE("cuda swiglu: clamped and plain, with and without row scales") {
  DI_REQUIRE_GPU();
  for (std::int64_t rows : {0, 1, 45})
    for (float limit : {0.0f, 10.0f})
      for (bool scaled : {false, true}) {
        const std::int64_t inter = 2304;
        const tensor g = test::randn({rows, inter}, 6.0f), u = test::randn({rows, inter}, 6.0f);
        const tensor s = test::randn({rows});
        const tensor want = cpu::swiglu(g, u, limit, scaled ? s : tensor());
        const dbuf dg(g), du(u), ds(s);
        dbuf out(want.nbytes());
        cuda::launch_swiglu({dg.get<float>(), du.get<float>(), scaled ? ds.get<float>() : nullptr,
                             out.get<float>(), rows, inter, limit},
                            nullptr);
        CHECK(test::max_scaled_err(out.to_host(want.shape(), dtype::f32), want, 1e-5, 1e-6) <= 1.0);
      }
}

/// The compressors' shapes: V4.1 ratio 2, V4's overlapping ratio 4, ratio 128.
struct compressor_shape {
  int ratio;
  bool overlap;
  int dim;
};
constexpr compressor_shape compressor_shapes[] = {{2, false, 512}, {4, true, 128}, {128, false, 64}};

TEST_CASE("cuda compress_tokens: pooled entries and carried state over chained calls") {
  DI_REQUIRE_GPU();
  for (const compressor_shape& c : compressor_shapes) {
    CAPTURE(c.ratio);
    const int coff = c.overlap ? 2 : 1, width = coff * c.dim, srows = coff * c.ratio;
    tensor skv = tensor::zeros({srows, width}, dtype::f32);
    tensor ssc = tensor::full({srows, width}, -INFINITY);
    dbuf dskv(skv), dssc(ssc);
    std::int64_t start = 0;
    for (std::int64_t n : {1, 3, 0, 300, 1, 7}) {
      CAPTURE(n);
      const tensor kv = test::randn({n, width}), sc = test::randn({n, width}, 2.0f);
      const tensor want = cpu::compress_tokens(kv, sc, start, skv, ssc, {c.ratio, c.overlap});
      const dbuf dkv(kv), dsc(sc);
      dbuf out(want.nbytes());
      cuda::compress_params p;
      p.kv = dkv.get<float>();
      p.score = dsc.get<float>();
      p.state_kv = dskv.get<float>();
      p.state_score = dssc.get<float>();
      p.out = out.get<float>();
      p.n = n;
      p.start = start;
      p.width = width;
      p.ratio = c.ratio;
      p.overlap = c.overlap;
      cuda::launch_compress_tokens(p, nullptr);
      CHECK(test::max_scaled_err(out.to_host(want.shape(), dtype::f32), want, 1e-5, 1e-6) <= 1.0);
      CHECK(test::bytes_equal(dskv.to_host(skv.shape(), dtype::f32), skv));
      CHECK(test::bytes_equal(dssc.to_host(ssc.shape(), dtype::f32), ssc));
      start += n;
    }
  }
}

TEST_CASE("cuda compress_decode: one row per sequence through states in a slot arena") {
  // Three sequences at different phases of their groups (one completing, one not, one
  // completing with V4's overlap shift) with their states at scattered arena slots: each
  // state and each completed entry equals compress_tokens' on the CPU, bit for bit in the
  // state; slots of other sequences are untouched.
  DI_REQUIRE_GPU();
  for (const compressor_shape& c : compressor_shapes) {
    CAPTURE(c.ratio);
    const int coff = c.overlap ? 2 : 1, width = coff * c.dim, srows = coff * c.ratio;
    const std::size_t state_bytes = 2 * std::size_t(srows) * width * 4;
    const std::size_t offset = 48, stride = (offset + state_bytes + 15) / 16 * 16;
    const std::vector<std::int32_t> slots = {3, 0, 1};
    const std::vector<std::int64_t> starts = {std::int64_t(c.ratio) - 1, c.ratio,
                                              3 * std::int64_t(c.ratio) - 1};
    const std::int64_t b = std::int64_t(slots.size());
    // Host states after feeding each sequence its first starts[i] rows on the CPU.
    std::vector<tensor> skv, ssc;
    tensor arena = test::randn({std::int64_t(4 * stride / 4)});  // 4 slots, random filler
    for (std::int64_t i = 0; i < b; ++i) {
      skv.push_back(tensor::zeros({srows, width}, dtype::f32));
      ssc.push_back(tensor::full({srows, width}, -INFINITY));
      const tensor kv = test::randn({starts[std::size_t(i)], width});
      const tensor sc = test::randn({starts[std::size_t(i)], width}, 2.0f);
      cpu::compress_tokens(kv, sc, 0, skv.back(), ssc.back(), {c.ratio, c.overlap});
      auto* at = reinterpret_cast<std::uint8_t*>(arena.raw()) + slots[std::size_t(i)] * stride + offset;
      std::memcpy(at, skv.back().raw(), state_bytes / 2);
      std::memcpy(at + state_bytes / 2, ssc.back().raw(), state_bytes / 2);
    }
    const tensor kv = test::randn({b, width}), sc = test::randn({b, width}, 2.0f);
    const tensor ids = tensor::view_of(slots.data(), {b}, dtype::i32);
    const tensor st = tensor::view_of(starts.data(), {b}, dtype::i64);
    const dbuf da(arena), dkv(kv), dsc(sc), dids(ids), dst(st);
    dbuf out(std::size_t(b) * c.dim * 4);
    cuda::compress_decode_params p;
    p.kv = dkv.get<float>();
    p.score = dsc.get<float>();
    p.slots = da.get<std::uint8_t>();
    p.slot_stride = stride;
    p.state_offset = offset;
    p.slot_ids = dids.get<std::int32_t>();
    p.starts = dst.get<std::int64_t>();
    p.out = out.get<float>();
    p.batch = b;
    p.width = width;
    p.ratio = c.ratio;
    p.overlap = c.overlap;
    cuda::launch_compress_decode(p, nullptr);
    const tensor got_out = out.to_host({b, c.dim}, dtype::f32);
    const tensor got_arena = da.to_host(arena.shape(), dtype::f32);
    for (std::int64_t i = 0; i < b; ++i) {
      CAPTURE(i);
      const tensor want = cpu::compress_tokens(kv.slice(0, i, i + 1), sc.slice(0, i, i + 1),
                                               starts[std::size_t(i)], skv[std::size_t(i)],
                                               ssc[std::size_t(i)], {c.ratio, c.overlap});
      const auto* at = reinterpret_cast<const std::uint8_t*>(got_arena.raw()) +
                       slots[std::size_t(i)] * stride + offset;
      CHECK(std::memcmp(at, skv[std::size_t(i)].raw(), state_bytes / 2) == 0);
      CHECK(std::memcmp(at + state_bytes / 2, ssc[std::size_t(i)].raw(), state_bytes / 2) == 0);
      CHECK(want.size(0) == ((starts[std::size_t(i)] + 1) % c.ratio == 0 ? 1 : 0));
      if (want.size(0) == 1)
        CHECK(test::max_scaled_err(got_out.slice(0, i, i + 1).clone(), want, 1e-5, 1e-6) <= 1.0);
    }
    // slot 2 belongs to no sequence: its bytes are as they were
    CHECK(std::memcmp(reinterpret_cast<const std::uint8_t*>(got_arena.raw()) + 2 * stride,
                      reinterpret_cast<const std::uint8_t*>(arena.raw()) + 2 * stride,
                      stride) == 0);
  }
}

TEST_CASE("cuda entry_rows and map_rows: pool rows from block tables, picks to rows") {
  DI_REQUIRE_GPU();
  const int per_block = 4, max_blocks = 3;
  const std::vector<std::int32_t> tables = {7, 2, 5, 1, 0, 0, 9, 3, 0};  // [3, 3]
  const std::vector<std::int64_t> counts = {9, 2, 0};
  const std::int64_t b = 3, n = 10;
  const dbuf dt(tables.data(), tables.size() * 4), dc(counts.data(), counts.size() * 8);
  dbuf map(std::size_t(b * n) * 4);
  cuda::launch_entry_rows({.tables = dt.get<std::int32_t>(),
                           .counts = dc.get<std::int64_t>(),
                           .out = map.get<std::int32_t>(),
                           .batch = b,
                           .entries = n,
                           .max_blocks = max_blocks,
                           .per_block = per_block},
                          nullptr);
  const tensor got = map.to_host({b, n}, dtype::i32);
  for (std::int64_t i = 0; i < b; ++i)
    for (std::int64_t e = 0; e < n; ++e) {
      const std::int32_t want =
          e < counts[std::size_t(i)]
              ? tables[std::size_t(i * max_blocks + e / per_block)] * per_block + std::int32_t(e % per_block)
              : -1;
      CHECK(got.data<std::int32_t>()[i * n + e] == want);
    }
  const std::vector<std::int32_t> picks = {0, 8, -1, 9, 1, 0, 3, 12, 0, -1, 5, 2};  // [3, 4]
  const dbuf dp(picks.data(), picks.size() * 4);
  dbuf rows(picks.size() * 4);
  cuda::launch_map_rows({.idx = dp.get<std::int32_t>(),
                         .map = map.get<std::int32_t>(),
                         .out = rows.get<std::int32_t>(),
                         .batch = b,
                         .k = 4,
                         .n = n},
                        nullptr);
  const tensor mapped = rows.to_host({b, 4}, dtype::i32);
  for (std::int64_t i = 0; i < b; ++i)
    for (std::int64_t j = 0; j < 4; ++j) {
      const std::int32_t pick = picks[std::size_t(i * 4 + j)];
      const std::int32_t want = pick < 0 || pick >= n ? -1 : got.data<std::int32_t>()[i * n + pick];
      CHECK(mapped.data<std::int32_t>()[i * 4 + j] == want);
    }
}

TEST_CASE("cuda hc_mixes, hc_head_pre, hc_collapse, hc_expand") {
  DI_REQUIRE_GPU();
  // hc 2 / 3 / 4 take the 8 / 16 / 24-mix kernels; widths below, at and above one 512-element
  // chunk and not a multiple of it; token counts around the 4-token tile, and 64 (at width
  // 4096 a block of hc_mix_partials takes several tiles: the batch-invariance check below
  // compares it with token 0 alone).
  for (int hc : {2, 3, 4})
    for (std::int64_t tokens : {0, 1, 5, 9, 64}) {
      for (std::int64_t dim : {64, 100, 4096}) {
        CAPTURE(hc);
        CAPTURE(tokens);
        CAPTURE(dim);
        const std::int64_t mixes = (2 + hc) * hc;
        const tensor x = test::randn({tokens, hc, dim});
        const tensor fn = test::randn({mixes, hc * dim}, 0.02f);
        const tensor scale = test::randn({3}), base = test::randn({mixes});
        const ops::hc_params hp{hc, 20, 1e-6f, 1e-6f};
        const ops::hc_mix want = cpu::hc_mixes(x, fn, scale, base, hp);
        const dbuf dx(x), dfn(fn), ds(scale), db(base);
        dbuf pre(std::size_t(tokens) * hc * 4), post(std::size_t(tokens) * hc * 4),
            comb(std::size_t(tokens) * hc * hc * 4);
        cuda::hc_mixes_params p;
        p.x = dx.get<float>();
        p.fn = dfn.get<float>();
        p.scale = ds.get<float>();
        p.base = db.get<float>();
        p.pre = pre.get<float>();
        p.post = post.get<float>();
        p.comb = comb.get<float>();
        p.tokens = tokens;
        p.dim = dim;
        p.hc = hc;
        dbuf work(cuda::hc_mixes_workspace_bytes(p));
        p.workspace = work.get<float>();
        p.workspace_bytes = work.bytes();
        pre.poison();
        post.poison();
        comb.poison();
        cuda::launch_hc_mixes(p, nullptr);
        CHECK(test::max_scaled_err(pre.to_host({tokens, hc}, dtype::f32), want.pre, 1e-4, 1e-5) <=
              1.0);
        CHECK(test::max_scaled_err(post.to_host({tokens, hc}, dtype::f32), want.post, 1e-4, 1e-5) <=
              1.0);
        CHECK(test::max_scaled_err(comb.to_host({tokens, hc, hc}, dtype::f32), want.comb, 1e-3,
                                   1e-4) <= 1.0);

        if (tokens > 1) {  // batch invariance: the first and the last token alone give the
          // same bits as in the batch
          const tensor batch_comb = comb.to_host({tokens, hc, hc}, dtype::f32);
          for (std::int64_t t : {std::int64_t(0), tokens - 1}) {
            CAPTURE(t);
            comb.poison();
            p.tokens = 1;
            p.x = dx.get<float>() + t * hc * dim;
            cuda::launch_hc_mixes(p, nullptr);
            CHECK(test::bytes_equal(comb.to_host({1, hc, hc}, dtype::f32),
                                    batch_comb.slice(0, t, t + 1).clone()));
          }
          p.tokens = tokens;
          p.x = dx.get<float>();
        }

        // V4 head mix: fn [hc, hc*dim], scale [1]
        const tensor hfn = fn.slice(0, 0, hc).clone(), hscale = scale.slice(0, 0, 1).clone();
        const tensor hbase = base.slice(0, 0, hc).clone();
        const tensor want_pre = cpu::hc_head_pre(x, hfn, hscale, hbase, hp);
        const dbuf dhfn(hfn), dhs(hscale), dhb(hbase);
        pre.poison();
        p.fn = dhfn.get<float>();
        p.scale = dhs.get<float>();
        p.base = dhb.get<float>();
        p.head_pre = true;
        cuda::launch_hc_mixes(p, nullptr);
        CHECK(test::max_scaled_err(pre.to_host({tokens, hc}, dtype::f32), want_pre, 1e-4, 1e-5) <=
              1.0);

        const tensor y = test::randn({tokens, dim});
        const dbuf dy(y), dpre(want.pre), dpost(want.post), dcomb(want.comb);
        dbuf col(std::size_t(tokens * dim) * 4), exp(x.nbytes());
        cuda::launch_hc_collapse(
            {dx.get<float>(), dpre.get<float>(), col.get<float>(), tokens, dim, hc}, nullptr);
        cuda::launch_hc_expand({dy.get<float>(), dx.get<float>(), dpost.get<float>(),
                                dcomb.get<float>(), exp.get<float>(), tokens, dim, hc},
                               nullptr);
        const tensor want_col = cpu::hc_collapse(x, want.pre);
        const tensor want_exp = cpu::hc_expand(y, x, want.post, want.comb);
        CHECK(test::max_scaled_err(col.to_host(want_col.shape(), dtype::f32), want_col, 1e-5,
                                   1e-5) <= 1.0);
        CHECK(test::max_scaled_err(exp.to_host(want_exp.shape(), dtype::f32), want_exp, 1e-5,
                                   1e-5) <= 1.0);
        // The 4-column kernel (dim % 4 == 0: 64, 4096) and the one-column kernel (100, or
        // switched off) give the same bits.
        const bool vec_before = cuda::hc_expand_vec();
        cuda::set_hc_expand_vec(!vec_before);
        dbuf exp2(x.nbytes());
        cuda::launch_hc_expand({dy.get<float>(), dx.get<float>(), dpost.get<float>(),
                                dcomb.get<float>(), exp2.get<float>(), tokens, dim, hc},
                               nullptr);
        cuda::set_hc_expand_vec(vec_before);
        CHECK(test::bytes_equal(exp2.to_host(want_exp.shape(), dtype::f32),
                                exp.to_host(want_exp.shape(), dtype::f32)));
      }
    }
}

TEST_CASE("cuda engram_gate") {
  DI_REQUIRE_GPU();
  // Widths of 16-byte rows (V4, V4.1) and one that is not (the kernel's scalar path).
  for (const auto& [tokens, d] : {std::pair<std::int64_t, std::int64_t>{0, 4096},
                                  {1, 4096},
                                  {7, 4096},
                                  {1, 5120},
                                  {3, 1001}}) {
    CAPTURE(tokens);
    CAPTURE(d);
    const int hc = 4;
    const tensor h = test::randn({tokens, hc, d}), key = test::randn({tokens, hc, d});
    const tensor value = test::randn({tokens, d}), weight = test::randn({hc, d});
    const ops::engram_params ep{};
    const tensor want_g = cpu::engram_gate(h, key, value, weight, ep);
    const dbuf dh(h), dk(key), dv(value), dw(weight);
    dbuf og(h.nbytes());
    cuda::launch_engram_gate({dh.get<float>(), dk.get<float>(), dv.get<float>(), dw.get<float>(),
                              og.get<float>(), tokens, d, hc, ep.eps, ep.clamp},
                             nullptr);
    CHECK(test::max_scaled_err(og.to_host(want_g.shape(), dtype::f32), want_g, 1e-4, 1e-4) <= 1.0);

    // engram_gate_kv: the same keys and value as one projection row per token ([keys, value]),
    // read in place -- the bits of the launch on the separate tensors above.
    tensor kv = tensor::empty({tokens, (hc + 1) * d}, dtype::f32);
    for (std::int64_t t = 0; t < tokens; ++t) {
      std::memcpy(kv.data<float>() + t * (hc + 1) * d, key.data<float>() + t * hc * d,
                  std::size_t(hc * d) * 4);
      std::memcpy(kv.data<float>() + (t * (hc + 1) + hc) * d, value.data<float>() + t * d,
                  std::size_t(d) * 4);
    }
    const tensor got_kv = ops::engram_gate_kv(h.to(gpu), kv.to(gpu), weight.to(gpu), ep);
    CHECK(test::bytes_equal(got_kv.to(cpu_device), og.to_host(want_g.shape(), dtype::f32)));
    CHECK(test::bytes_equal(cpu::engram_gate_kv(h, kv, weight, ep), want_g));
  }
}

}  // namespace
}  // namespace di
