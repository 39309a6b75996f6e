// The model ops reached through the op interface (kernels/ops.cpp dispatch) with tensors on
// the GPU, against the same ops on the CPU: outputs come back on the device with the CPU's
// shapes and values.
#include "gpu_test_util.hpp"
#include "kernels/cuda/cuda_model_twins.hpp"
#include "kernels/ops.hpp"

#include <cmath>
#include <cstring>

namespace di {
namespace {

const device gpu{device_kind::cuda, 0};

TEST_CASE("ops dispatch: attention, selection, routing, codecs, mHC on CUDA tensors") {
  DI_REQUIRE_GPU();
  const tensor q = test::randn({3, 64, 512}), kv = test::randn({200, 512});
  const tensor sinks = test::randn({64});
  tensor idx = tensor::empty({3, 150}, dtype::i32);
  for (std::int64_t i = 0; i < idx.numel(); ++i)
    idx.data<std::int32_t>()[i] = std::int32_t(test::rng()() % 201) - 1;
  const tensor want = ops::sparse_attention(q, kv, sinks, idx, {0.05f});
  const tensor got = ops::sparse_attention(q.to(gpu), kv.to(gpu), sinks.to(gpu), idx.to(gpu), {0.05f});
  CHECK(got.dev() == gpu);
  CHECK(test::rel_l2(got.to(cpu_device), want) < 6e-3);

  const tensor scores = test::randn({4, 3000});
  tensor visible = tensor::empty({4}, dtype::i64);
  for (int t = 0; t < 4; ++t) visible.data<std::int64_t>()[t] = 100 + 700 * t;
  const tensor top = ops::masked_topk(scores.to(gpu), visible.to(gpu), tensor(), 512).to(cpu_device);
  const tensor top_cpu = ops::masked_topk(scores, visible, tensor(), 512);
  CHECK(test::bytes_equal(top, top_cpu));

  const tensor logits = test::randn({9, 384}, 3.0f), bias = test::randn({384}, 0.3f);
  const ops::router_params rp{6, 1.0f, 1.5f, true, 1e-20f};
  const ops::routing r_cpu = ops::route(logits, bias, tensor(), rp);
  const ops::routing r_gpu = ops::route(logits.to(gpu), bias.to(gpu), tensor(), rp);
  CHECK(test::bytes_equal(r_gpu.experts.to(cpu_device), r_cpu.experts));
  CHECK(test::max_scaled_err(r_gpu.weights.to(cpu_device), r_cpu.weights, 1e-5, 1e-7) <= 1.0);

  const cache_row_format f{cache_quant::fp4_e4m3, 16, 512, 0};
  const tensor x = test::randn({17, 512});
  tensor packed_cpu = tensor::empty({17, std::int64_t(f.row_bytes())}, dtype::u8);
  tensor packed_gpu = tensor::empty({17, std::int64_t(f.row_bytes())}, dtype::u8, gpu);
  ops::encode_cache_rows(x, f, packed_cpu);
  ops::encode_cache_rows(x.to(gpu), f, packed_gpu);
  CHECK(test::bytes_equal(packed_gpu.to(cpu_device), packed_cpu));
  tensor dec = tensor::empty({17, 512}, dtype::f32, gpu), dec_cpu = tensor::empty({17, 512}, dtype::f32);
  ops::decode_cache_rows(packed_gpu, f, dec);
  ops::decode_cache_rows(packed_cpu, f, dec_cpu);
  CHECK(test::bytes_equal(dec.to(cpu_device), dec_cpu));

  const tensor streams = test::randn({5, 4, 256}), fn = test::randn({24, 1024}, 0.05f);
  const tensor scale = test::randn({3}), base = test::randn({24});
  const ops::hc_params hp{};
  const ops::hc_mix m_cpu = ops::hc_mixes(streams, fn, scale, base, hp);
  const ops::hc_mix m_gpu = ops::hc_mixes(streams.to(gpu), fn.to(gpu), scale.to(gpu), base.to(gpu), hp);
  CHECK(test::max_scaled_err(m_gpu.comb.to(cpu_device), m_cpu.comb, 1e-3, 1e-4) <= 1.0);
}

TEST_CASE("sparse_attention on CUDA: a NaN score gives NaN, as on the CPU") {
  // The softmax maxima were fmaxf, which skips NaN: a row whose scores were all NaN read as
  // "nothing to attend" and gave zeros. Short and long index lists: one split and several.
  DI_REQUIRE_GPU();
  for (std::int64_t k : {150, 3000}) {
    CAPTURE(k);
    const std::int64_t entries = k + 10;
    tensor q = test::randn({3, 64, 512}), kv = test::randn({entries, 512});
    for (std::int64_t i = 0; i < 64 * 512; ++i) q.data<float>()[i] = NAN;  // token 0: all NaN
    kv.data<float>()[7 * 512 + 3] = NAN;                                    // row 7: one NaN
    const tensor sinks = test::randn({64});
    tensor idx = tensor::empty({3, k}, dtype::i32);
    for (std::int64_t t = 0; t < 3; ++t)
      for (std::int64_t j = 0; j < k; ++j)  // token 1 reads row 7; tokens 0 and 2 do not
        idx.data<std::int32_t>()[t * k + j] = std::int32_t(t == 1 ? j : j + 10);
    const tensor want = ops::sparse_attention(q, kv, sinks, idx, {0.05f});
    const tensor got =
        ops::sparse_attention(q.to(gpu), kv.to(gpu), sinks.to(gpu), idx.to(gpu), {0.05f})
            .to(cpu_device);
    std::int64_t nan_rows = 0;
    for (std::int64_t t = 0; t < 2; ++t)
      for (std::int64_t h = 0; h < 64; ++h) {
        const float* g = got.data<float>() + (t * 64 + h) * 512;
        nan_rows += std::isnan(g[0]) && std::isnan(g[511]) ? 1 : 0;
        CHECK(std::isnan(want.data<float>()[(t * 64 + h) * 512]));
      }
    CHECK(nan_rows == 128);  // every head of tokens 0 and 1
    const tensor last_cpu = want.slice(0, 2, 3), last_gpu = got.slice(0, 2, 3);
    CHECK(test::rel_l2(last_gpu, last_cpu) < 6e-3);  // the finite token as before
  }
}

TEST_CASE("hc_collapse_norm: the CPU's rms_norm(hc_collapse) in one kernel, batch-invariant") {
  DI_REQUIRE_GPU();
  // V4.1 / V4 widths, a width below a warp, one stream, no weight; past the register budget
  // (12000 > 8192) or past 4 streams the op runs the two kernels.
  struct shape {
    std::int64_t tokens, hc, dim;
    bool weighted;
  };
  // Each width with one block per token and, where the width allows it, a cluster of 4.
  const bool cluster_before = cuda::hc_collapse_norm_cluster();
  for (const bool cluster : {false, true})
    for (const shape sh :
         {shape{1, 4, 5120, true}, shape{7, 4, 4096, true}, shape{3, 4, 33, true},
          shape{130, 1, 512, false}, shape{0, 4, 5120, true}, shape{2, 4, 12000, true},
          shape{3, 6, 512, true}, shape{2, 3, 1000, true}}) {
      cuda::set_hc_collapse_norm_cluster(cluster);
      CAPTURE(cluster);
      CAPTURE(sh.tokens);
      CAPTURE(sh.hc);
      CAPTURE(sh.dim);
      const tensor x = test::randn({sh.tokens, sh.hc, sh.dim}),
                   pre = test::randn({sh.tokens, sh.hc});
      const tensor w = sh.weighted ? test::randn({sh.dim}) : tensor();
      const tensor want = ops::rms_norm(ops::hc_collapse(x, pre), w, 1e-6f);
      const tensor got =
          ops::hc_collapse_norm(x.to(gpu), pre.to(gpu), w.defined() ? w.to(gpu) : w, 1e-6f)
              .to(cpu_device);
      REQUIRE(got.shape() == want.shape());
      CHECK(test::max_scaled_err(got, want, 1e-5, 1e-5) <= 1.0);
      if (sh.tokens > 1) {  // token 0 alone: the same bits
        const tensor one = ops::hc_collapse_norm(x.slice(0, 0, 1).clone().to(gpu),
                                                 pre.slice(0, 0, 1).clone().to(gpu),
                                                 w.defined() ? w.to(gpu) : w, 1e-6f)
                               .to(cpu_device);
        CHECK(test::bytes_equal(one, got.slice(0, 0, 1).clone()));
      }
    }
  cuda::set_hc_collapse_norm_cluster(cluster_before);
}

TEST_CASE("attention_packed: the FP8 window ring and FP4 entries read in place") {
  DI_REQUIRE_GPU();
  const cache_row_format wf{cache_quant::fp8_ue8m0, 32, 512, 0}, ef{cache_quant::fp4_e4m3, 16, 512, 0};
  const tensor q = test::randn({2, 64, 512}), sinks = test::randn({64});
  const tensor wx = test::randn({128, 512}), ex = test::randn({300, 512});
  tensor wp = tensor::empty({128, std::int64_t(wf.row_bytes())}, dtype::u8);
  tensor ep = tensor::empty({300, std::int64_t(ef.row_bytes())}, dtype::u8);
  ops::encode_cache_rows(wx, wf, wp);
  ops::encode_cache_rows(ex, ef, ep);
  tensor wd = tensor::empty({128, 512}, dtype::f32), ed = tensor::empty({300, 512}, dtype::f32);
  ops::decode_cache_rows(wp, wf, wd);
  ops::decode_cache_rows(ep, ef, ed);
  tensor widx = tensor::empty({2, 128}, dtype::i32), eidx = tensor::empty({2, 100}, dtype::i32);
  tensor all = tensor::empty({2, 228}, dtype::i32);
  for (int t = 0; t < 2; ++t) {
    for (int j = 0; j < 128; ++j)
      all.data<std::int32_t>()[t * 228 + j] = widx.data<std::int32_t>()[t * 128 + j] = (j * 7 + t) % 128;
    for (int j = 0; j < 100; ++j) {
      const std::int32_t e = (j * 3 + t) % 300;
      eidx.data<std::int32_t>()[t * 100 + j] = e;
      all.data<std::int32_t>()[t * 228 + 128 + j] = 128 + e;
    }
  }
  const tensor parts[] = {wd, ed};
  const tensor want = ops::sparse_attention(q, ops::concat_rows(parts), sinks, all, {0.044f});
  const tensor got = cuda::attention_packed(q.to(gpu), sinks.to(gpu), wp.to(gpu), wf, widx.to(gpu),
                                            ep.to(gpu), ef, eidx.to(gpu), 0.044f);
  CHECK(test::rel_l2(got.to(cpu_device), want) < 6e-3);
}

}  // namespace
}  // namespace di

namespace di {
namespace {

TEST_CASE("encode_cache_rows_at and index_scores_packed: pool rows and FP4 keys in place") {
  DI_REQUIRE_GPU();
  const device dev{device_kind::cuda, 0};
  const cache_row_format kf{cache_quant::fp4_ue8m0, 32, 128, 0};
  const tensor keys = test::randn({90, 128});
  tensor pool = tensor::zeros({200, std::int64_t(kf.row_bytes())}, dtype::u8, dev);
  tensor dst = tensor::empty({90}, dtype::i64);
  for (int i = 0; i < 90; ++i) dst.data<std::int64_t>()[i] = 199 - 2 * i;
  cuda::encode_cache_rows_at(keys.to(dev), kf, pool, dst.to(dev));
  tensor want_rows = tensor::empty({90, std::int64_t(kf.row_bytes())}, dtype::u8);
  ops::encode_cache_rows(keys, kf, want_rows);
  const tensor host_pool = pool.to(cpu_device);
  bool same = true;
  for (int i = 0; i < 90; ++i)
    same = same && std::memcmp(host_pool.data<std::uint8_t>() + (199 - 2 * i) * kf.row_bytes(),
                               want_rows.data<std::uint8_t>() + i * kf.row_bytes(), kf.row_bytes()) == 0;
  CHECK(same);

  const tensor q = test::randn({2, 32, 128}), w = test::randn({2, 32});
  tensor dec = tensor::empty({90, 128}, dtype::f32);
  ops::decode_cache_rows(want_rows, kf, dec);
  const tensor want = ops::index_scores(q, dec, w);
  const tensor got = cuda::index_scores_packed(q.to(dev), want_rows.to(dev), kf, w.to(dev));
  CHECK(test::max_scaled_err(got.to(cpu_device), want, 1e-4, 1e-3) <= 1.0);
}


TEST_CASE("group_by_expert: the CPU's offsets, rows and weights exactly, edge sizes included") {
  DI_REQUIRE_GPU();
  struct shape {
    std::int64_t tokens;
    int k, experts;
  };
  // 0 tokens, one token, decode batches, a prefill over several 4096-pair chunks, 1024 experts;
  // up to 1024 pairs of up to 640 experts the one-thread-per-pair kernel (exactly 1024 pairs,
  // 640 experts; one past either bound takes the one-block kernel); past
  // group_experts_one_block_pairs (2048) pairs the chunked kernels: 8800 pairs of 256,
  // 4800 of 1024 experts, a v41-flash-L4 prefill's 12288 of 384, and exactly one past the bound
  for (const shape c :
       {shape{0, 6, 256}, shape{1, 6, 256}, shape{64, 8, 384}, shape{3, 1, 7}, shape{128, 8, 384},
        shape{128, 6, 256}, shape{64, 6, 640}, shape{64, 6, 641}, shape{171, 6, 640},
        shape{1100, 8, 256}, shape{40, 16, 1024}, shape{300, 16, 1024}, shape{2048, 6, 384},
        shape{2049, 1, 64}, shape{2048, 1, 64}}) {
    CAPTURE(c.tokens);
    CAPTURE(c.experts);
    const tensor logits = test::randn({c.tokens, c.experts}, 3.0f);
    const ops::router_params rp{c.k, 1.0f, 1.5f, true, 1e-20f};
    const ops::routing r = ops::route(logits, tensor(), tensor(), rp);
    const ops::expert_groups want = ops::group_by_expert(r, c.experts);
    const ops::routing rg{r.weights.to(gpu), r.experts.to(gpu)};
    const ops::expert_groups got = ops::group_by_expert(rg, c.experts);
    CHECK(got.rows.dev() == gpu);
    CHECK(test::bytes_equal(got.offsets.to(cpu_device), want.offsets));
    CHECK(test::bytes_equal(got.rows.to(cpu_device), want.rows));
    CHECK(test::bytes_equal(got.weights.to(cpu_device), want.weights));
    CHECK(test::bytes_equal(got.slots.to(cpu_device), want.slots));
    CHECK(want.offsets.data<std::int32_t>()[c.experts] == c.tokens * c.k);
    // The grouped rows back into their tokens: gather_add_rows through the slots gives
    // scatter_add_rows's bits, on the GPU and against the CPU (the same additions in order).
    const std::int64_t width = 1100;  // two column runs, the second partial
    const tensor src = test::randn({c.tokens * c.k, width});
    const tensor y0 = test::randn({c.tokens, width});
    tensor want_y = y0.clone();
    ops::scatter_add_rows(want_y, want.rows, src);
    tensor scattered = y0.to(gpu), gathered = y0.to(gpu);
    ops::scatter_add_rows(scattered, got.rows, src.to(gpu));
    ops::gather_add_rows(gathered, got.slots.view({c.tokens, c.k}), src.to(gpu));
    CHECK(test::bytes_equal(gathered.to(cpu_device), scattered.to(cpu_device)));
    CHECK(test::bytes_equal(gathered.to(cpu_device), want_y));
  }
  const tensor bad = tensor::empty({2, 3}, dtype::f32, gpu);
  CHECK_THROWS_AS(ops::group_by_expert({bad, bad}, 8), di::error);  // experts must be i32
}

}  // namespace
}  // namespace di
