// GPU tests of the cache-row codecs (bit-exact against the CPU codec, through ring/pool row
// maps) and of the fused sparse attention with sinks (against the CPU's decode + attention,
// bf16 tolerance): V4.1 decode shape, prefill tokens with partial windows, unused and
// out-of-range slots, head counts past 64 and below 16, head dims 128/256/512, f32 and V4 rows
// (packed and padded: the same bits), forced splits.
#include "gpu_test_util.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cuda/cuda_model_ops.hpp"

#include <algorithm>
#include <numeric>

namespace di {
namespace {

using test::dbuf;

cache_row_format fp8_window(int dim) { return {cache_quant::fp8_ue8m0, 32, dim, 0}; }
cache_row_format fp4_compressed(int dim) { return {cache_quant::fp4_e4m3, 16, dim, 0}; }
cache_row_format fp4_keys(int dim) { return {cache_quant::fp4_ue8m0, 32, dim, 0}; }
cache_row_format v4_window(int dim) { return {cache_quant::fp8_ue8m0, 64, dim - 64, 64}; }
/// V4's rows as the cache layout keeps them: padded to 16 bytes (720 at 512), staged.
cache_row_format v4_padded(int dim) {
  return {cache_quant::fp8_ue8m0, 64, dim - 64, 64, 16};
}

/// Rows with a different magnitude per row and some all-zero / tiny blocks.
tensor cache_input(std::int64_t rows, int dim) {
  tensor x = test::randn({rows, dim});
  std::uniform_real_distribution<float> mag(-12.0f, 6.0f);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float m = std::exp2(mag(test::rng()));
    for (int d = 0; d < dim; ++d) x.data<float>()[r * dim + d] *= m;
    if (r % 5 == 3)
      for (int d = 0; d < std::min(dim, 32); ++d) x.data<float>()[r * dim + d] = 0.0f;
  }
  return x;
}

tensor packed(const tensor& x, const cache_row_format& f) {
  tensor out = tensor::empty({x.size(0), std::int64_t(f.row_bytes())}, dtype::u8);
  cpu::encode_cache_rows(x, f, out);
  return out;
}

TEST_CASE("cuda encode/decode_cache_rows: bytes and values equal to the CPU codec") {
  DI_REQUIRE_GPU();
  const cache_row_format formats[] = {fp8_window(512),
                                      fp4_compressed(512),
                                      fp4_keys(128),
                                      v4_window(512),
                                      v4_padded(512),
                                      v4_padded(128),
                                      {cache_quant::fp8_ue8m0, 64, 448, 0}};
  for (const cache_row_format& f : formats) {
    for (std::int64_t rows : {0, 1, 7, 300}) {
      CAPTURE(int(f.quant));
      CAPTURE(rows);
      const tensor x = cache_input(rows, f.dim());
      const tensor want = packed(x, f);
      const dbuf dx(x);
      dbuf dout(want.nbytes());
      cuda::launch_encode_cache_rows({dx.get<float>(), dout.get<std::uint8_t>(), nullptr, rows, f},
                                     nullptr);
      CHECK(test::bytes_equal(dout.to_host(want.shape(), dtype::u8), want));

      // Scattered into a pool through a row map (ring slots), read back through a gather.
      std::vector<std::int64_t> map(static_cast<std::size_t>(rows));
      std::iota(map.begin(), map.end(), 0);
      std::shuffle(map.begin(), map.end(), test::rng());
      for (auto& m : map) m = m * 2 + 1;  // every other pool row
      const dbuf dmap(map.data(), map.size() * 8);
      dbuf pool(std::size_t(2 * rows + 2) * f.row_bytes());
      cuda::launch_encode_cache_rows(
          {dx.get<float>(), pool.get<std::uint8_t>(), dmap.get<std::int64_t>(), rows, f}, nullptr);
      dbuf dec(std::size_t(rows) * f.dim() * 4);
      cuda::launch_decode_cache_rows(
          {pool.get<std::uint8_t>(), dmap.get<std::int64_t>(), dec.get<float>(), rows, f}, nullptr);
      tensor want_dec = tensor::empty({rows, f.dim()}, dtype::f32);
      cpu::decode_cache_rows(want, f, want_dec);
      CHECK(test::bytes_equal(dec.to_host(want_dec.shape(), dtype::f32), want_dec));
    }
  }
}

/// One attention case: packed (or f32) pools, index lists with -1 and out-of-range slots.
struct attn_case {
  int tokens, heads, dim, win_k, ext_k;
  std::int64_t win_rows, ext_rows;
  cache_row_format win_fmt, ext_fmt;
  bool f32_tables = false;
  int splits = 0;
};

tensor random_indices(int tokens, int k, std::int64_t rows, double unused, bool bad) {
  tensor idx = tensor::empty({tokens, k}, dtype::i32);
  std::uniform_int_distribution<std::int64_t> pick(0, std::max<std::int64_t>(rows - 1, 0));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (std::int64_t i = 0; i < idx.numel(); ++i) {
    std::int32_t v = rows > 0 ? std::int32_t(pick(test::rng())) : -1;
    if (u(test::rng()) < unused) v = -1;
    if (bad && u(test::rng()) < 0.02) v = std::int32_t(rows + 5);  // ignored by the kernel
    idx.data<std::int32_t>()[i] = v;
  }
  // The first token attends nothing (zeros), as a sequence's very first query can't.
  if (tokens > 2)
    for (int j = 0; j < k; ++j) idx.data<std::int32_t>()[j] = -1;
  return idx;
}

/// Runs one case against the CPU (and the cluster merge against the combine kernel); returns
/// the combine kernel's output.
tensor run_attention_case(const attn_case& c) {
  CAPTURE(c.tokens);
  CAPTURE(c.heads);
  CAPTURE(c.dim);
  CAPTURE(c.win_k);
  CAPTURE(c.ext_k);
  CAPTURE(c.splits);
  const tensor q = test::randn({c.tokens, c.heads, c.dim});
  const tensor sinks = test::randn({c.heads}, 2.0f);
  const tensor win_x = test::randn({c.win_rows, c.dim});
  const tensor ext_x = test::randn({c.ext_rows, c.dim});
  const tensor win_idx = random_indices(c.tokens, c.win_k, c.win_rows, 0.15, !c.f32_tables);
  const tensor ext_idx = random_indices(c.tokens, c.ext_k, c.ext_rows, 0.1, !c.f32_tables);

  // CPU reference: decoded pools stacked, combined index lists.
  tensor win_dec = win_x, ext_dec = ext_x, win_p, ext_p;
  if (!c.f32_tables) {
    win_p = packed(win_x, c.win_fmt);
    ext_p = packed(ext_x, c.ext_fmt);
    win_dec = tensor::empty(win_x.shape(), dtype::f32);
    ext_dec = tensor::empty(ext_x.shape(), dtype::f32);
    cpu::decode_cache_rows(win_p, c.win_fmt, win_dec);
    cpu::decode_cache_rows(ext_p, c.ext_fmt, ext_dec);
  }
  const tensor parts[] = {win_dec, ext_dec};
  const tensor pool = cpu::concat_rows(parts);
  tensor idx = tensor::empty({c.tokens, c.win_k + c.ext_k}, dtype::i32);
  for (int t = 0; t < c.tokens; ++t) {
    for (int j = 0; j < c.win_k; ++j) {
      const std::int32_t v = win_idx.data<std::int32_t>()[t * c.win_k + j];
      idx.data<std::int32_t>()[t * (c.win_k + c.ext_k) + j] = v >= c.win_rows ? -1 : v;
    }
    for (int j = 0; j < c.ext_k; ++j) {
      const std::int32_t v = ext_idx.data<std::int32_t>()[t * c.ext_k + j];
      idx.data<std::int32_t>()[t * (c.win_k + c.ext_k) + c.win_k + j] =
          v < 0 || v >= c.ext_rows ? -1 : std::int32_t(c.win_rows + v);
    }
  }
  const float scale = 1.0f / std::sqrt(float(c.dim));
  const tensor want = cpu::sparse_attention(q, pool, sinks, idx, {scale});

  const dbuf dq(q), dsinks(sinks), dwin_idx(win_idx), dext_idx(ext_idx);
  const dbuf dwin(c.f32_tables ? win_x : win_p), dext(c.f32_tables ? ext_x : ext_p);
  dbuf dout(q.nbytes());
  cuda::attention_params p;
  p.q = dq.get<float>();
  p.out = dout.get<float>();
  p.sinks = dsinks.get<float>();
  p.tokens = c.tokens;
  p.heads = c.heads;
  p.dim = c.dim;
  p.softmax_scale = scale;
  p.window = {dwin.get(), c.win_rows, !c.f32_tables, c.win_fmt};
  p.window_idx = dwin_idx.get<std::int32_t>();
  p.window_k = c.win_k;
  p.extra = {dext.get(), c.ext_rows, !c.f32_tables, c.ext_fmt};
  p.extra_idx = dext_idx.get<std::int32_t>();
  p.extra_k = c.ext_k;
  p.num_splits = c.splits;
  // First through the combine kernel (the default merges two splits in a cluster); its split
  // (the wave model prices the merge by how it is done: pinned below for the same split).
  cuda::set_attention_cluster(0);
  const int splits = cuda::attention_splits(p);
  dbuf work(cuda::attention_workspace_bytes(p));
  p.workspace = work.get();
  p.workspace_bytes = work.bytes();
  cuda::launch_attention(p, nullptr);
  cuda::set_attention_cluster(-1);
  const tensor got = dout.to_host(q.shape(), dtype::f32);
  // bf16 q and probabilities on the tensor cores: ~3 significant digits.
  CHECK(test::rel_l2(got, want) < 6e-3);
  CHECK(test::max_scaled_err(got, want, 3e-2, 3e-2) <= 1.0);
  if (c.tokens > 2)
    for (int i = 0; i < c.heads * c.dim; ++i) REQUIRE(got.data<float>()[i] == 0.0f);
  // The same splits merged inside a thread-block cluster (set_attention_cluster): the combine
  // kernel's arithmetic in its order, so its bits; no workspace where a cluster holds them.
  if (splits > 1 && c.tokens > 0) {
    p.num_splits = splits;
    cuda::set_attention_cluster(1);
    const std::size_t need = cuda::attention_workspace_bytes(p);
    if (splits <= 8) CHECK(need == 0);  // a portable cluster size always fits
    if (need > 0) MESSAGE("attention: clusters of " << splits << " splits do not fit: combined");
    dbuf dout2(q.nbytes());
    p.out = dout2.get<float>();
    p.workspace = need > 0 ? work.get() : nullptr;
    p.workspace_bytes = need > 0 ? work.bytes() : 0;
    cuda::launch_attention(p, nullptr);
    cuda::set_attention_cluster(-1);
    const tensor clustered = dout2.to_host(q.shape(), dtype::f32);
    CHECK(test::bytes_equal(clustered, got));
  }
  return got;
}

TEST_CASE("cuda attention: V4.1 decode over the FP8 window and FP4 compressed entries") {
  DI_REQUIRE_GPU();
  for (int tokens : {1, 3, 33})
    for (int splits : {0, 1, 3})
      run_attention_case({tokens, 64, 512, 128, 512, 300, 900, fp8_window(512),
                          fp4_compressed(512), false, splits});
}

TEST_CASE("cuda attention: edge sizes, heads past 64, head dims 128-512, f32 and V4 rows") {
  DI_REQUIRE_GPU();
  run_attention_case({0, 64, 512, 128, 512, 10, 10, fp8_window(512), fp4_compressed(512)});
  run_attention_case({4, 64, 512, 128, 0, 200, 1, fp8_window(512), fp4_compressed(512)});
  run_attention_case({5, 100, 128, 70, 33, 90, 50, fp8_window(128), fp4_compressed(128)});
  run_attention_case({3, 8, 128, 1, 1, 3, 3, fp8_window(128), fp4_compressed(128)});
  run_attention_case({9, 4, 128, 20, 7, 30, 12, fp8_window(128), fp4_compressed(128)});
  run_attention_case({6, 64, 256, 129, 65, 140, 70, fp8_window(256), fp4_compressed(256)});
  run_attention_case({7, 64, 512, 128, 200, 150, 210, fp8_window(512), fp4_compressed(512), true});
  run_attention_case({5, 64, 512, 128, 100, 140, 120, v4_window(512), v4_window(512)});
  run_attention_case({5, 64, 512, 128, 100, 140, 120, v4_padded(512), v4_padded(512)});
  run_attention_case({4, 64, 128, 70, 33, 90, 50, v4_padded(128), v4_window(128)});
  run_attention_case({130, 64, 512, 128, 64, 300, 100, fp8_window(512), fp4_compressed(512)});
}

TEST_CASE("cuda attention: V4's padded rows (staged) give the bits of its packed rows") {
  DI_REQUIRE_GPU();
  // The layout's 720-byte rows take the staged path (FP8 chunks through fp16 products, the
  // fp32 rope tail read unaligned from shared memory); 711-byte rows decode every value from
  // global memory. Both round the same values to fp16 once, so the outputs are the same bits.
  for (int tokens : {1, 5, 33})
    for (int splits : {0, 1, 3}) {
      const unsigned seed = unsigned(1000 + tokens * 10 + splits);
      test::rng().seed(seed);
      const tensor staged = run_attention_case(
          {tokens, 64, 512, 128, 512, 300, 900, v4_padded(512), v4_padded(512), false, splits});
      test::rng().seed(seed);
      const tensor in_place = run_attention_case(
          {tokens, 64, 512, 128, 512, 300, 900, v4_window(512), v4_window(512), false, splits});
      CHECK(test::bytes_equal(staged, in_place));
    }
}

TEST_CASE("cuda attention: splits merged in thread-block clusters give the combine kernel's bits") {
  DI_REQUIRE_GPU();
  // Decode rows (one token per sequence) at 2..16 splits (b1's 10: 128 window + 512 entries),
  // two head groups with a partial one (100 heads), head dims 128 / 256 / 512.
  for (int splits : {2, 4, 8, 10, 16})
    run_attention_case(
        {1, 64, 512, 128, 512, 300, 900, fp8_window(512), fp4_compressed(512), false, splits});
  run_attention_case(
      {33, 64, 512, 128, 512, 300, 900, fp8_window(512), fp4_compressed(512), false, 4});
  run_attention_case(
      {5, 100, 128, 70, 300, 90, 500, fp8_window(128), fp4_compressed(128), false, 6});
  run_attention_case(
      {3, 64, 256, 129, 400, 140, 700, fp8_window(256), fp4_compressed(256), false, 3});
}

/// One token's attention over `dim`-wide heads (64), no tables yet.
cuda::attention_params one_token(int dim) {
  cuda::attention_params p;
  p.tokens = 1;
  p.heads = 64;
  p.dim = dim;
  return p;
}

TEST_CASE("cuda attention_splits: a 2-tile sliding window at batch 1 takes two clustered blocks") {
  DI_REQUIRE_GPU();
  // V4.1's sliding-window layer at batch 1 (128 window rows, no compressed entries): one block
  // through the combine kernel's pricing, two merged in a cluster by default -- right against
  // the CPU and the combine kernel's bits (run_attention_case).
  cuda::attention_params p = one_token(512);
  p.window = {nullptr, 200, true, fp8_window(512)};
  p.window_k = 128;
  REQUIRE(cuda::get_attention_cluster() == -1);
  CHECK(cuda::attention_splits(p) == 2);
  CHECK(cuda::attention_workspace_bytes(p) == 0);  // merged in the cluster
  cuda::set_attention_cluster(0);
  CHECK(cuda::attention_splits(p) == 1);
  cuda::set_attention_cluster(-1);
  run_attention_case(  // its two splits: through the combine kernel, then in a cluster
      {1, 64, 512, 128, 0, 200, 1, fp8_window(512), fp4_compressed(512), false, 2});
  CHECK_THROWS_AS(cuda::set_attention_cluster(2), error);
}

TEST_CASE("cuda attention: bad shapes are errors before launch") {
  DI_REQUIRE_GPU();
  cuda::attention_params p = one_token(96);
  CHECK_THROWS_AS(cuda::launch_attention(p, nullptr), error);
  p.dim = 64;
  CHECK_THROWS_AS(cuda::launch_attention(p, nullptr), error);
  p.dim = 512;
  CHECK_THROWS_AS(cuda::launch_attention(p, nullptr), error);  // no q/out
}

}  // namespace
}  // namespace di
