// tile_gemv: the decode GEMM (1..8 rows) of a dense FP8 weight with V4.1's 32 x 32 e8m0 scale
// blocks and 32-input activation blocks, reading a copy of the weight laid out in the order
// the MMA takes it (weight_matrix::decode_tiles, made by with_decode_tiles): per 16-row stripe
// and 32-input step one 512-byte tile in which lane L = 4g + t finds its whole A fragment as
// one 16-byte piece -- row g's inputs 8t..8t+7, then row g + 8's. A warp load is 512
// contiguous bytes, a warp's K range one contiguous stretch, and no lane exchanges bytes: per
// step one 16-byte weight load, one 8-byte activation load, one MMA and the promotion. The
// activations take the same k permutation (stream_gemm's 8-byte fragments: MMA input 4t + i
// is input 8t + i, 16 + 4t + i is 8t + 4 + i). Batches of 4 steps (one 32-bit word of weight
// scales, one float4 of activation scales per token) are loaded DEPTH batches ahead, so each
// warp keeps DEPTH x 2 KB of weights in flight. The activations and their scales are read
// through L1 (load_fresh, the coherent load the other GEMMs use after the PDL wait), which every
// warp of an SM shares. Session 44's first version read them with __ldg, which under PDL
// returned stale data; the fix read them at L2 only (load_fresh_l2), and the wide GEMMs, whose
// warps each stream a whole K range of their own stripe against the same activation bytes,
// lost to it: H100, M=1, session 49, L1 / L2 only: wq_b (2048 stripes, K 1280) 18.4 / 26.4 us,
// the Engram wkv (N 25600, K 6144) 59.6 / 79.0, wo_b 19.6 / 21.4; M=8 wq_b 18.3 / 37.4.
// DEEPINFER_TILE_GEMV_ACT=l2 keeps the L2-only loads, for comparisons.
//
// Each warp owns a stripe and a K range; the warps of a stripe in a block add their sums in
// warp order, and K splits across the blocks of a cluster add in rank order -- both set by
// the weight's shape only, so a token's result does not depend on the batch.
#include "kernels/cuda/fresh_loads.cuh"
#include "kernels/cuda/gemm_kernels.hpp"
#include "kernels/cuda/launch.cuh"

#include "kernels/cuda/block_gemm_common.cuh"
#include "kernels/cuda/kernel_attributes.hpp"
#include "kernels/dtype.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace di::cuda {

namespace {

using namespace gemm_detail;

constexpr int tg_warps = 8;
constexpr int tg_batch = 4;      // steps per batch: one word of weight scales
constexpr int tile_bytes = 512;  // one stripe x step tile
constexpr int stripe_rows = 16;

struct tile_cfg {
  int wk;              ///< warps of a block along K (1, 2, 4 or 8)
  int splits;          ///< blocks along K (a cluster of them; 1..4)
  int steps_per_part;  ///< K steps each (split, warp) part covers (a multiple of tg_batch)
  int blocks_a;        ///< grid columns of the first weight (pairs: the second's follow)
};

struct tile_batch {
  uint4 a[tg_batch];
  uint2 b[tg_batch];
  std::uint32_t ws;
  float4 xa, xb;
};

template <int DEPTH, int MINB, bool ACT_L1>
__global__ void __launch_bounds__(tg_warps * 32, MINB)
    tile_gemv_kernel(block_gemm_params p, tile_cfg cfg) {
  __shared__ float partial[tg_warps][32][4];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const int wk_i = warp % cfg.wk, wr = warp / cfg.wk;
  const bool second = int(blockIdx.x) >= cfg.blocks_a;
  const std::int64_t column = int(blockIdx.x) - (second ? cfg.blocks_a : 0);
  const std::int64_t n = second ? p.n_b : p.n;
  const std::uint8_t* tiles = second ? p.tiles_b : p.tiles;
  const std::uint8_t* wscale = second ? p.wscale_e8m0_b : p.wscale_e8m0;
  const std::int64_t stripe = column * (tg_warps / cfg.wk) + wr;
  const int steps = int(p.k / 32);
  const int split = int(blockIdx.z);
  const int part = split * cfg.wk + wk_i;
  const int s0 = min(steps, part * cfg.steps_per_part);
  const int s1 = min(steps, s0 + cfg.steps_per_part);
  const bool active = stripe * stripe_rows < n && s0 < s1;
  const int last_row = int(p.rows) - 1;  // tokens past the batch read its last row (unstored)

  const std::uint8_t* wp = tiles + ((stripe * steps + s0) * 32 + lane) * 16;
  const std::uint8_t* wsp =
      wscale + (stripe * stripe_rows / p.block_rows) * p.wscale_cols + s0;  // 4-aligned words
  const std::uint8_t* ap = p.act + std::int64_t(min(g, last_row)) * p.act_stride + 8 * t + s0 * 32;
  const float* xap = p.act_scale + std::int64_t(min(2 * t, last_row)) * p.act_scale_stride + s0;
  const float* xbp = p.act_scale + std::int64_t(min(2 * t + 1, last_row)) * p.act_scale_stride + s0;

  auto load_weights = [&](tile_batch& r, int s) {  // s: steps past s0
#pragma unroll
    for (int u = 0; u < tg_batch; ++u)
      r.a[u] = load_stream16(wp + std::int64_t(s + u) * tile_bytes);
    r.ws = __ldg(reinterpret_cast<const unsigned*>(wsp + s));
  };
  auto load_acts = [&](tile_batch& r, int s) {
    auto fresh = [](const auto* q) {  // L1 (shared by the SM's warps) or L2 only
      if constexpr (ACT_L1)
        return detail::load_fresh(q);
      else
        return detail::load_fresh_l2(q);
    };
#pragma unroll
    for (int u = 0; u < tg_batch; ++u)
      r.b[u] = fresh(reinterpret_cast<const uint2*>(ap + std::int64_t(s + u) * 32));
    r.xa = fresh(reinterpret_cast<const float4*>(xap + s));
    r.xb = fresh(reinterpret_cast<const float4*>(xbp + s));
  };
  float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
  auto multiply = [&](const tile_batch& r) {
    const float xa[4] = {r.xa.x, r.xa.y, r.xa.z, r.xa.w};
    const float xb[4] = {r.xb.x, r.xb.y, r.xb.z, r.xb.w};
#pragma unroll
    for (int u = 0; u < tg_batch; ++u) {
      const std::uint32_t a[4] = {r.a[u].x, r.a[u].z, r.a[u].y, r.a[u].w};
      float d[4];
      mma_e4m3_fresh(d, a, r.b[u].x, r.b[u].y);
      const float w = e8m0_to_f32(std::uint8_t(r.ws >> (8 * u)));
      acc[0][0] += d[0] * (w * xa[u]);
      acc[0][1] += d[1] * (w * xb[u]);
      acc[0][2] += d[2] * (w * xa[u]);
      acc[0][3] += d[3] * (w * xb[u]);
    }
  };

  const int count = active ? s1 - s0 : 0;  // a multiple of tg_batch
  tile_batch ring[DEPTH];
  // The weights are constant: the first batches' are in flight before the wait for the last
  // kernel (launch.cuh), which every other load follows.
#pragma unroll
  for (int i = 0; i < DEPTH - 1; ++i)
    if ((i + 1) * tg_batch <= count) load_weights(ring[i], i * tg_batch);
  detail::grid_dependency_sync();
#pragma unroll
  for (int i = 0; i < DEPTH - 1; ++i)
    if ((i + 1) * tg_batch <= count) load_acts(ring[i], i * tg_batch);
  for (int s = 0; s < count;) {
#pragma unroll
    for (int i = 0; i < DEPTH; ++i) {  // unrolled: ring indices known at compile time
      if (s >= count) break;
      const int ahead = s + (DEPTH - 1) * tg_batch;
      if (ahead < count) {
        load_weights(ring[(i + DEPTH - 1) % DEPTH], ahead);
        load_acts(ring[(i + DEPTH - 1) % DEPTH], ahead);
      }
      multiply(ring[i]);
      s += tg_batch;
    }
  }

  // A stripe's warps add in warp order; K splits add in cluster rank order.
  bool sums = true;
  if (cfg.wk > 1) {
#pragma unroll
    for (int c = 0; c < 4; ++c) partial[warp][lane][c] = acc[0][c];
    __syncthreads();
    sums = wk_i == 0;
    if (sums) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        float sum = 0.0f;
        for (int w = 0; w < cfg.wk; ++w) sum += partial[warp + w][lane][c];
        acc[0][c] = sum;
      }
    }
  }
  if (cfg.splits > 1) {
    add_split_ranks(acc, &partial[warp][lane][0], split, cfg.splits, sums);
    sums = sums && split == 0;
  }
  if (!sums || stripe * stripe_rows >= n) return;
  float* const y = second ? p.y_b : p.y;
  const std::int64_t y_stride = second ? p.y_stride_b : p.y_stride;
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const std::int64_t row = stripe * stripe_rows + g + (c < 2 ? 0 : 8);
    const std::int64_t tok = 2 * t + (c & 1);
    if (row < n && tok < p.rows) y[tok * y_stride + row] = acc[0][c];
  }
}

/// tiles[(stripe * steps + s) * 512 + lane * 16 + j]: lane = 4g + t; j < 8: row 16 stripe + g,
/// input 32 s + 8 t + j; j >= 8: row 16 stripe + g + 8, input 32 s + 8 t + j - 8; rows past the
/// matrix zero. One thread per 16-byte piece.
__global__ void make_tiles_kernel(const std::uint8_t* w, std::uint8_t* tiles, std::int64_t n,
                                  std::int64_t k) {
  detail::grid_dependency_sync();
  const std::int64_t steps = k / 32;
  const std::int64_t stripes = (n + stripe_rows - 1) / stripe_rows;
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= stripes * steps * 32) return;
  const int lane = int(i % 32), g = lane / 4, t = lane % 4;
  const std::int64_t s = (i / 32) % steps, stripe = i / (32 * steps);
  std::uint8_t out[16];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const std::int64_t row = stripe * stripe_rows + g + 8 * h;
#pragma unroll
    for (int j = 0; j < 8; ++j) out[8 * h + j] = row < n ? w[row * k + 32 * s + 8 * t + j] : 0;
  }
  uint4 v;
  std::memcpy(&v, out, 16);
  *reinterpret_cast<uint4*>(tiles + i * 16) = v;
}

/// Weight-streaming warps the K split aims for: DEEPINFER_TILE_GEMV_WARPS per SM of 132 (default
/// 12, three eighths of stream_gemm's target: longer contiguous parts and fewer partial sums
/// than at 32. H100, session 44, M=1 us at 8 / 16 / 32 per SM: wq_b 18.8 / 20.1 / 19.9, wq_a
/// 7.7 / 8.4 / 8.3, wo_b 20.4 / 20.4 / 22.6, the shared expert's w1 9.2 / 9.2 / 13.1
/// (stream_gemm 22.5, 10.5, 23.7, 12.5). With the activations through L1 (session 49) single
/// GEMMs at 8 / 12 per SM differ by under 1 us, but whole decode steps gain at 12 (session 50,
/// graphs, 3 interleaved rounds, ms at 8 / 12 warps): H100 v41-flash-L4 b1 1.62-1.63 / 1.60,
/// b8 2.95-2.96 / 2.94-2.95; v4-flash-L4 b1 1.40-1.41 / 1.40; H200 (session 49) v41 b1
/// 1.37-1.39 / 1.35-1.36. Decided by the weight's shape and this number only, never the rows.
std::int64_t target_warps() {
  // (Hopper's 132 SMs: the same plan on any card; at most 64 warps fit an SM)
  static const std::int64_t v = 132 * detail::env_count("DEEPINFER_TILE_GEMV_WARPS", 12, 64);
  return v;
}

/// DEEPINFER_TILE_GEMV_VARIANT: 0 = 2 batches in flight per warp at 2 blocks per SM (the
/// default), 1 = 2 at 3 blocks (ptxas spills ~100 bytes), 2 = 3 batches at 2 blocks.
int variant_setting() {
  static const int v = int(detail::env_count("DEEPINFER_TILE_GEMV_VARIANT", 0, 2, 0));
  return v;
}

/// The activations through L1 (the default), or at L2 only with DEEPINFER_TILE_GEMV_ACT=l2
/// (sessions 44-48's default; see the top of this file).
bool act_l1_setting() {
  static const bool v = [] {
    const char* env = std::getenv("DEEPINFER_TILE_GEMV_ACT");
    if (env == nullptr || std::strcmp(env, "l1") == 0) return true;
    if (std::strcmp(env, "l2") == 0) return false;
    std::fprintf(stderr, "deepinfer: DEEPINFER_TILE_GEMV_ACT=%s ignored (expected l1 or l2); l1\n",
                 env);
    return true;
  }();
  return v;
}

/// On by default; DEEPINFER_TILE_GEMV=0 / set_tile_gemv(false) makes no decode tiles (their
/// memory: a second copy of V4.1's dense FP8 codes) and leaves the decode GEMMs on stream_gemm.
std::atomic<bool> g_tile_gemv{detail::env_switch("DEEPINFER_TILE_GEMV", true)};

bool aligned(const void* q, std::size_t to) {
  return reinterpret_cast<std::uintptr_t>(q) % to == 0;
}

/// Whether one weight (tiles, scales, n) of p fits the kernel.
bool weight_fits(const std::uint8_t* tiles, const std::uint8_t* ws, std::int64_t n) {
  return tiles != nullptr && ws != nullptr && n > 0 && aligned(tiles, 16) && aligned(ws, 4);
}

/// How a weight [n, k] runs: warps along K in a block, blocks along K (a cluster) and the
/// steps of each part -- from its shape alone, so that a token's sums never depend on the
/// batch, and a dense pair runs each weight as its own launch would (tile_gemv_takes requires
/// both plans equal). About target_warps() warps stream the weight; each part at least two
/// batches of steps.
struct tile_plan {
  int wk = 1, splits = 1, steps_per_part = 0;
  bool operator==(const tile_plan& o) const {
    return wk == o.wk && splits == o.splits && steps_per_part == o.steps_per_part;
  }
};
tile_plan plan_of(std::int64_t n, std::int64_t k) {
  const std::int64_t steps = k / 32;
  const std::int64_t stripes = (n + stripe_rows - 1) / stripe_rows;
  const std::int64_t want = (target_warps() + stripes - 1) / stripes;
  const std::int64_t most = std::max<std::int64_t>(1, steps / (2 * tg_batch));
  const std::int64_t parts = std::clamp<std::int64_t>(want, 1, std::min<std::int64_t>(most, 32));
  tile_plan plan;
  while (plan.wk < tg_warps && plan.wk * 2 <= parts) plan.wk *= 2;
  while (plan.splits < 4 && std::int64_t(plan.wk) * plan.splits * 2 <= parts) plan.splits *= 2;
  std::int64_t per = (steps + plan.wk * plan.splits - 1) / (plan.wk * plan.splits);
  plan.steps_per_part = int((per + tg_batch - 1) / tg_batch * tg_batch);
  return plan;
}

}  // namespace

std::size_t decode_tiles_bytes(std::int64_t n, std::int64_t k) {
  return std::size_t((n + stripe_rows - 1) / stripe_rows) * std::size_t(k / 32) * tile_bytes;
}

void launch_make_decode_tiles(const std::uint8_t* w, std::uint8_t* tiles, std::int64_t n,
                              std::int64_t k, cudaStream_t stream) {
  DI_CHECK(n > 0 && k > 0 && k % 32 == 0, "decode tiles: [{}, {}] (K a multiple of 32)", n, k);
  const std::int64_t pieces = std::int64_t(decode_tiles_bytes(n, k) / 16);
  detail::launch("make_tiles", make_tiles_kernel, unsigned((pieces + 255) / 256), 256, 0, stream, w,
                 tiles, n, k);
}

void set_tile_gemv(bool on) {
  g_tile_gemv = on;
}
bool get_tile_gemv() {
  return g_tile_gemv;
}

bool tile_gemv_takes(const block_gemm_params& p) {
  if (!g_tile_gemv || p.fp4 || p.offsets || p.groups != 1 || p.rows < 1 || p.rows > 8 ||
      p.max_rows > 8 || p.act_block != 32 || p.block_cols != 32 ||
      p.block_rows % stripe_rows != 0 || p.k % (32 * tg_batch) != 0 ||
      p.wscale_cols % tg_batch != 0 || p.act_scale_stride % 4 != 0 || !aligned(p.act_scale, 16) ||
      !aligned(p.act, 8) || p.act_stride % 8 != 0 || (p.weight_b && p.n_b <= 0))
    return false;
  if (!weight_fits(p.tiles, p.wscale_e8m0, p.n)) return false;
  if (p.n_b > 0)
    return weight_fits(p.tiles_b, p.wscale_e8m0_b, p.n_b) && p.y_b != nullptr &&
           plan_of(p.n, p.k) == plan_of(p.n_b, p.k);
  return p.tiles_b == nullptr;
}

void launch_tile_gemv(const block_gemm_params& p, cudaStream_t stream) {
  DI_CHECK(tile_gemv_takes(p), "tile_gemv: this GEMM does not fit the decode tiles");
  const tile_plan plan = plan_of(p.n, p.k);
  const int stripes_per_block = tg_warps / plan.wk;
  auto blocks = [&](std::int64_t n) {
    const std::int64_t stripes = (n + stripe_rows - 1) / stripe_rows;
    return (stripes + stripes_per_block - 1) / stripes_per_block;
  };
  const std::int64_t blocks_a = blocks(p.n), blocks_b = p.n_b > 0 ? blocks(p.n_b) : 0;
  const tile_cfg cfg{plan.wk, plan.splits, plan.steps_per_part, int(blocks_a)};
  const dim3 grid(unsigned(blocks_a + blocks_b), 1, unsigned(plan.splits));
  const dim3 cluster(1, 1, unsigned(plan.splits));
  auto go = [&](auto kernel) {
    detail::launch_in("tile_gemv", kernel, grid, dim3(tg_warps * 32), cluster, 0, stream, p, cfg);
  };
  const bool l1 = act_l1_setting();
  switch (variant_setting()) {
    case 1:
      l1 ? go(tile_gemv_kernel<2, 3, true>) : go(tile_gemv_kernel<2, 3, false>);
      break;
    case 2:
      l1 ? go(tile_gemv_kernel<3, 2, true>) : go(tile_gemv_kernel<3, 2, false>);
      break;
    default:
      l1 ? go(tile_gemv_kernel<2, 2, true>) : go(tile_gemv_kernel<2, 2, false>);
      break;
  }
}

}  // namespace di::cuda
