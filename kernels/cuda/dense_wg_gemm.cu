// dense_wg_gemm: block_gemm's decode GEMM for dense FP8 weights (token tiles of <= 8 rows: every
// attention projection and shared expert of a decode step up to batch 8) on the Hopper
// warpgroup MMA. OPT-IN (set_dense_wg_gemm / DEEPINFER_DENSE_WG=1): right and batch-invariant
// (GPU test), but on the H200 no faster than stream_gemm (session 20, same call, CUDA graphs:
// wo_b 42 MB 21.6 vs 20.7 us, shared_w1 11.8 MB 12.7 vs 10.5 us; v41-flash-L4 decode b1 1.81 vs
// 1.68 ms). The premise below -- stream_gemm bound by its emulated MMA's registers -- was wrong
// for these shapes: a plain read at 32 KB in flight per SM already reaches 0.81-0.86 of the copy
// rate (bench "read depth"), and this kernel, with twice that in flight and no conversions,
// streams at the same ~0.46. What it did show: loading the first weights before the PDL wait
// (below) saves ~0.05 ms per v41-flash-L4 step -- now done by stream_gemm itself.
//
// Why a kernel of its own: stream_gemm, which served these tiles, multiplies with mma.sync
// m16n8k32 e4m3, which sm_90 emulates (e4m3 -> f16 conversions and two f16 MMAs per call): its
// registers go to the conversions, so it keeps only 2-4 steps of weights in flight per warp
// (24-32 KB per SM) and reached 0.4-0.5 of the copy bandwidth on V4.1's projections at batch 1
// (wo_b, 42 MB: 18.8 us, DRAM 50%, stalled on memory latency -- Nsight Compute, session 20).
// wgmma.mma_async m64n8k32 e4m3 is native: the weight fragments go from the loads straight into
// the MMA, with no conversion and no register to spare for it.
//
// Layout: a block is one warpgroup (4 warps) and 64 weight rows, 16 per warp (the m64 MMA's
// rows); a lane loads the bytes its MMA fragment needs -- bytes 8t..8t+7 of each 32-byte step of
// its rows g and g + 8 (lane = 4g + t), stream_gemm's permutation of the inputs -- in batches of
// `Batch` steps, the next batch loading while the current one multiplies. The block's K range of
// the 8-token tile's activation codes is staged once in shared memory as wgmma's K-major B
// (per step two 8 x 16-byte core matrices: bytes 8q..8q+3 of token n's step in the first at
// n * 16 + 4q, bytes 8q+4..8q+7 in the second, 128 bytes on -- the inputs the A fragments pair
// them with), beside it the tile's activation scales per step ([step][token]) and the block's
// weight scales per warp and step. Every step promotes: d = A B on fresh accumulators, acc += d
// * (weight scale * activation scale), whatever the scale blocks (32 or 128 inputs: a block's
// scale serves each of its steps).
//
// K splits: as many blocks along K (1, 2, 4 or 8) as bring the grid to about four blocks per
// SM, launched as one thread-block cluster whose splits hand their sums to split 0 through
// distributed shared memory, added in rank order (add_split_ranks): deterministic, no
// workspace, no memset. The splits depend on the weight's shape only, never on the batch, so a
// token's result does not change with the batch (1..8 rows).
//
// Wide tiles (9..64 rows, set_dense_wg_gemm_wide; by default the weights cuBLASLt does not
// take, i.e. instead of skinny_gemm -- V4.1 b64 8.30 against 8.56 ms, session 29; ahead of
// cuBLASLt V4's large shapes measured slower): the same structure with 16, 32 or
// 64 tokens a wgmma (m64nNk32), B staged by cp.async, a block taking several 64-row tiles in
// turn with its staged B (about three blocks per SM), 4-step load batches (at most 168
// registers: three blocks per SM), and the K splits (up to 16) added with fp32 atomics into the
// zeroed output instead of a cluster's barriers (Nsight Compute found the 64-token tiles' warps
// 69% of their stalls at barriers with cluster splits). Where both scale blocks span 128 inputs
// (V4) the wgmmas of 4 steps sum in the tensor core and promote once. Never with ordered splits:
// the atomics' order and the tile change a token's last bits.
//
// Early weights: a block loads its first batch of weight fragments and stages its weight scales
// before it waits for the kernel before it in the stream (programmatic dependent launch, see
// launch.cuh): the weights are constant, so their latency hides behind that kernel's tail. The
// contract this rests on -- the weight bytes and scales are not written by the kernel launched
// just before (weights come from host copies) -- holds for every weight of the engine;
// set_dense_wg_gemm_early(false) (DEEPINFER_DENSE_WG_EARLY=0) loads them after the wait.
#include "kernels/cuda/gemm_kernels.hpp"
#include "kernels/cuda/launch.cuh"

#include "common/error.hpp"
#include "kernels/cuda/block_gemm_common.cuh"
#include "kernels/cuda/kernel_attributes.hpp"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/dtype.hpp"

#include <algorithm>
#include <atomic>

namespace di::cuda {

namespace {

using namespace gemm_detail;

constexpr int warps = 4;  // one warpgroup
constexpr int threads = warps * 32;
constexpr int tile_rows = warps * 16;
constexpr int step_k = 32;
constexpr int max_splits = 8;   // a portable cluster
constexpr int split_align = 8;  // K splits start at multiples of 8 steps
constexpr int max_tile = 64;    // tokens of the widest tile (wgmma m64n64k32)
/// The grid the K splits aim for (a shape-only constant: the same splits on any GPU).
constexpr std::int64_t target_blocks = 132 * 4;
constexpr std::int64_t min_split_steps = 16;
/// Dynamic shared memory per block (B, activation scales, weight scales) within which a K
/// split's steps must fit (more splits otherwise; refused past max_splits).
constexpr std::size_t smem_limit = 96 * 1024;
/// The wide tiles' limit: three blocks per SM.
constexpr std::size_t wide_smem_limit = 72 * 1024;
constexpr std::size_t smem_limit_of(int nt) {
  return nt == 8 ? smem_limit : wide_smem_limit;
}
/// Blocks of the wide tiles (16..64 tokens) resident at once on a 132-SM GPU: a block takes
/// as many row tiles in turn as bring the grid to about this, sharing its staged B.
constexpr std::int64_t wide_resident_blocks = 132 * 3;
/// Steps whose scales one promotion serves where both scale blocks span them (V4's 128
/// inputs): the wgmmas of a group accumulate in the tensor core (fused groups).
constexpr int fused_steps = 4;

/// Shared memory of a split of `steps` steps for a tile of `nt` tokens: B (nt x 32 bytes a
/// step), the activation scales (nt a step) and each warp's weight scales (one a step).
__host__ __device__ constexpr std::size_t smem_bytes(std::int64_t steps, int nt) {
  return std::size_t(steps) *
         (std::size_t(nt) * step_k + nt * sizeof(float) + warps * sizeof(float));
}

/// The token tile of a GEMM of `rows` rows: 8, 16, 32 or 64.
constexpr int tile_of(std::int64_t rows) {
  return rows <= 8 ? 8 : rows <= 16 ? 16 : rows <= 32 ? 32 : 64;
}

struct dense_config {
  int k_splits;
  int steps_per_split;  ///< a multiple of split_align
  bool early;           ///< weights loaded before the wait for the previous kernel
  bool fused;           ///< promote once per fused_steps steps (their scales are the same)
  int tiles_per_block;  ///< 64-row tiles a block takes in turn, sharing its staged B
  bool atomic;          ///< the K splits add into the zeroed output (wide tiles; no cluster)
};

/// Where the splits' sums meet (add_split_ranks): after the staging area, NT / 2 floats a
/// thread.
__host__ __device__ constexpr std::size_t slot_offset(std::int64_t steps, int nt) {
  return (smem_bytes(steps, nt) + 15) / 16 * 16;
}
__host__ __device__ constexpr std::size_t launch_smem(std::int64_t steps, int nt, int splits) {
  return slot_offset(steps, nt) +
         (splits > 1 && nt == 8 ? std::size_t(threads) * (nt / 2) * sizeof(float) : 0);
}

/// The B of a step (NT tokens): K-adjacent core matrices 128 bytes apart, 8-token groups 256.
__device__ __forceinline__ std::uint64_t b_step_descriptor(const void* smem) {
  return smem_descriptor(smem, 128, 256);
}

/// A batch of weight fragments: per step the lane's 8 bytes of rows g (lo) and g + 8 (hi).
template <int Batch>
struct weight_batch {
  uint2 lo[Batch], hi[Batch];
};

/// NT: the token tile (8 NG tokens); Batch: steps per load batch; F32: weight scales as fp32
/// (else e8m0 bytes).
template <int NT, int Batch, bool F32>
__global__ void __launch_bounds__(threads, NT == 8 ? 4 : 3)
    dense_wg_gemm_kernel(block_gemm_params p, dense_config cfg) {
  constexpr int NG = NT / 8;
  // Steps per wgmma group (fence, MMAs, commit, wait) when every step is promoted: each keeps
  // its NT / 2 sums per thread until the wait.
  constexpr int group_steps = NT <= 16 ? 4 : NT == 32 ? 2 : 1;
  constexpr int b_step_bytes = NT * step_k;
  static_assert(Batch % group_steps == 0 && Batch % fused_steps == 0, "whole groups per batch");
  extern __shared__ __align__(128) std::uint8_t smem[];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const int group = int(blockIdx.y), split = int(blockIdx.z);
  const int total_steps = int(p.k / step_k);
  const int w0 = split * cfg.steps_per_split;
  const int w1 = min(total_steps, w0 + cfg.steps_per_split);
  const int steps = w1 - w0;  // > 0: the host makes every split non-empty
  std::uint8_t* const b_tile = smem;
  float* const act_sc =
      reinterpret_cast<float*>(smem + std::size_t(cfg.steps_per_split) * b_step_bytes);
  float* const w_sc = act_sc + std::size_t(cfg.steps_per_split) * NT + warp * cfg.steps_per_split;

  // This warp's rows in the block's tile rt (rows past the last output load the last one:
  // their results are not stored, but every warp of the warpgroup takes part in its MMAs).
  std::int64_t nw = 0;
  const std::uint8_t *wlo = nullptr, *whi = nullptr;
  auto tile_rows_of = [&](int rt) {
    nw = (std::int64_t(blockIdx.x) * cfg.tiles_per_block + rt) * tile_rows + warp * 16;
    const std::int64_t r_lo = group * p.n + min(nw + g, p.n - 1);
    const std::int64_t r_hi = group * p.n + min(nw + g + 8, p.n - 1);
    wlo = p.weight + r_lo * p.k + std::int64_t(w0) * step_k + 8 * t;
    whi = p.weight + r_hi * p.k + std::int64_t(w0) * step_k + 8 * t;
  };
  tile_rows_of(0);

  weight_batch<Batch> r[2];
  auto load = [&](weight_batch<Batch>& b, int s) {  // a whole batch from step s (< w1)
#pragma unroll
    for (int u = 0; u < Batch; ++u) {
      b.lo[u] = load_stream8(wlo + (s - w0 + u) * step_k);
      b.hi[u] = load_stream8(whi + (s - w0 + u) * step_k);
    }
  };
  const int full_end = w0 + steps / Batch * Batch;  // whole batches: no guards
  // The warp's weight scales per step (its 16 rows lie in one scale block: blocks span a
  // multiple of 16 rows and warps start at multiples of 16), decoded once.
  auto stage_weight_scales = [&] {
    const std::int64_t block_row = (group * p.n + min(nw, p.n - 1)) / p.block_rows;
    const int col_shift = log2_int(p.block_cols);
    for (int i = lane; i < steps; i += 32) {
      const std::int64_t at = block_row * p.wscale_cols + (((w0 + i) * step_k) >> col_shift);
      w_sc[i] = F32 ? __ldg(p.wscale_f32 + at) : e8m0_to_f32(__ldg(p.wscale_e8m0 + at));
    }
  };
  if (cfg.early) {
    if (w0 < full_end) load(r[0], w0);
    stage_weight_scales();
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (!cfg.early) {
    if (w0 < full_end) load(r[0], w0);
    stage_weight_scales();
  }

  // Stage the tile's activation codes of steps [w0, w1) as B and their scales (cp.async, all
  // in flight at once). Piece i of the NT x 4 a step has: token n = (i / 4) % NT copies its
  // bytes 8q..8q+7 (q = i % 4) -- the first four into its group's first core matrix, the other
  // four into the second, 128 on.
  const std::int64_t count = p.rows;
  const std::int64_t col0 = group * p.act_group_offset;
  auto tile_row = [&](std::int64_t i) { return i < count ? i : count - 1; };
  {
    constexpr int pieces = NT * 4;
#pragma unroll 4
    for (int i = int(threadIdx.x); i < steps * pieces; i += threads) {
      const int s = i / pieces, n = (i / 4) % NT, q = i % 4;
      const std::uint8_t* src =
          p.act + tile_row(n) * p.act_stride + col0 + std::int64_t(w0 + s) * step_k + 8 * q;
      std::uint8_t* dst = b_tile + s * b_step_bytes + (n / 8) * 256 + (n % 8) * 16 + 4 * q;
      cp_async4_zfill(dst, src, true);
      cp_async4_zfill(dst + 128, src + 4, true);
    }
    const int act_shift = log2_int(p.act_block);
    for (int i = int(threadIdx.x); i < NT * steps; i += threads) {
      const int s = i / NT, tok = i % NT;
      cp_async4_zfill(act_sc + i,
                      p.act_scale + tile_row(tok) * p.act_scale_stride +
                          ((col0 + std::int64_t(w0 + s) * step_k) >> act_shift),
                      true);
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
  }
  fence_proxy_async();  // B seen by wgmma
  __syncthreads();

  float acc[NG][4] = {};
  // acc += d * (weight scale * activation scale) of step s, token group by token group.
  auto promote = [&](float(&d)[NG][4], int s) {
    const float ws = w_sc[s - w0];
#pragma unroll
    for (int j = 0; j < NG; ++j) {
      const float2 xs = *reinterpret_cast<const float2*>(act_sc + (s - w0) * NT + 8 * j + 2 * t);
      const float sx = ws * xs.x, sy = ws * xs.y;
      acc[j][0] += d[j][0] * sx;
      acc[j][1] += d[j][1] * sy;
      acc[j][2] += d[j][2] * sx;
      acc[j][3] += d[j][3] * sy;
    }
  };
  auto fragments = [&](const weight_batch<Batch>& b, int u, std::uint32_t(&a)[4]) {
    a[0] = b.lo[u].x;
    a[1] = b.hi[u].x;
    a[2] = b.lo[u].y;
    a[3] = b.hi[u].y;
#pragma unroll
    for (int c = 0; c < 4; ++c) pin(a[c]);  // written before the fence
  };
  auto b_at = [&](int s) { return b_step_descriptor(b_tile + (s - w0) * b_step_bytes); };
  // Steps [s, s + n_steps) of batch b from its step u0, each promoted.
  auto multiply = [&](const weight_batch<Batch>& b, int s, int u0, auto nsteps) {
    constexpr int n_steps = decltype(nsteps)::value;
    std::uint32_t a[n_steps][4];
    float d[n_steps][NG][4];
#pragma unroll
    for (int v = 0; v < n_steps; ++v) fragments(b, u0 + v, a[v]);
    wgmma_fence();
#pragma unroll
    for (int v = 0; v < n_steps; ++v) wgmma_e4m3<NG, false>(d[v], a[v], b_at(s + v));
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int v = 0; v < n_steps; ++v) {
#pragma unroll
      for (int j = 0; j < NG; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) pin(d[v][j][c]);  // read only after the wait
#pragma unroll
      for (int c = 0; c < 4; ++c) pin(a[v][c]);  // kept until the wgmmas have read them
      promote(d[v], s + v);
    }
  };
  // Steps [s, s + fused_steps) of batch b from its step u0, summed in the tensor core and
  // promoted once (their weight and activation scales are the same).
  auto multiply_fused = [&](const weight_batch<Batch>& b, int s, int u0) {
    std::uint32_t a[fused_steps][4];
    float d[NG][4];
#pragma unroll
    for (int v = 0; v < fused_steps; ++v) fragments(b, u0 + v, a[v]);
    wgmma_fence();
    wgmma_e4m3<NG, false>(d, a[0], b_at(s));
#pragma unroll
    for (int v = 1; v < fused_steps; ++v) wgmma_e4m3<NG, true>(d, a[v], b_at(s + v));
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int j = 0; j < NG; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) pin(d[j][c]);
#pragma unroll
    for (int v = 0; v < fused_steps; ++v)
#pragma unroll
      for (int c = 0; c < 4; ++c) pin(a[v][c]);
    promote(d, s);
  };
  using group_t = std::integral_constant<int, group_steps>;
  float* const slot =
      reinterpret_cast<float*>(smem + slot_offset(cfg.steps_per_split, NT)) + threadIdx.x * NG * 4;
  for (int rt = 0; rt < cfg.tiles_per_block; ++rt) {
    if (rt > 0) {
      tile_rows_of(rt);
      if (nw - warp * 16 >= p.n) break;  // past the last tile (the same for the whole cluster)
      __syncwarp();                      // the warp's lanes have read the last tile's weight scales
      if (w0 < full_end) load(r[0], w0);
      stage_weight_scales();
      __syncwarp();
#pragma unroll
      for (int j = 0; j < NG; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[j][c] = 0.0f;
    }
    int s = w0;
    while (s < full_end) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {  // unrolled: each r[] index is known at compile time
        if (s >= full_end) break;
        if (s + Batch < full_end) load(r[1 - i], s + Batch);  // the next batch streams in
        if (cfg.fused) {
#pragma unroll
          for (int u0 = 0; u0 < Batch; u0 += fused_steps) multiply_fused(r[i], s + u0, u0);
        } else {
#pragma unroll
          for (int u0 = 0; u0 < Batch; u0 += group_steps) multiply(r[i], s + u0, u0, group_t{});
        }
        s += Batch;
      }
    }
    for (; s < w1; ++s) {  // the tail: one step at a time
      weight_batch<Batch> tail;
      tail.lo[0] = load_stream8(wlo + (s - w0) * step_k);
      tail.hi[0] = load_stream8(whi + (s - w0) * step_k);
      multiply(tail, s, 0, std::integral_constant<int, 1>{});
    }

    // The splits' sums meet in split 0 (every block of the cluster takes the same tiles), or
    // (wide tiles) each split adds its own into the zeroed output: no barrier between blocks.
    const bool atomic = cfg.atomic;
    if (cfg.k_splits > 1 && !atomic) add_split_ranks(acc, slot, split, cfg.k_splits, true);
    if (split != 0 && !atomic) continue;
#pragma unroll
    for (int j = 0; j < NG; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const std::int64_t row = nw + g + (c < 2 ? 0 : 8);
        const std::int64_t tk = 8 * j + 2 * t + (c & 1);
        if (row >= p.n || tk >= count) continue;
        float* const y = p.y + group * p.y_group_offset + tk * p.y_stride + row;
        if (atomic)
          atomicAdd(y, acc[j][c]);
        else
          *y = acc[j][c];
      }
  }
}

std::atomic<bool> g_on{detail::env_switch("DEEPINFER_DENSE_WG", false)};
std::atomic<int> g_wide{
    detail::env_mode("DEEPINFER_DENSE_WG_WIDE",
                     "the wide tiles take what cuBLASLt does not (V4.1's 32-input scales)")};
std::atomic<bool> g_early{detail::env_switch("DEEPINFER_DENSE_WG_EARLY", true)};
std::atomic<long> g_launches{0};
/// Steps per load batch: 8 (the default) or 4 (DEEPINFER_DENSE_WG_BATCH); the same sums.
std::atomic<int> g_batch{int(detail::env_count("DEEPINFER_DENSE_WG_BATCH", 8, 8, 4))};

struct dense_shape {
  int nt = 8;
  int k_splits = 1;
  int steps_per_split = 0;
  std::int64_t row_tiles = 0;
  int tiles_per_block = 1;
};

/// The token tile from the rows (8 for 1..8 rows: the splits below are then the same for any
/// batch of up to 8). The K splits from the weight's shape and the tile: doubled while the
/// grid stays within target_blocks and each split keeps min_split_steps, then while a split's
/// staging does not fit smem_limit; every split starts at a multiple of split_align steps and
/// is non-empty.
dense_shape dense_shape_of(const block_gemm_params& p) {
  dense_shape sh;
  sh.nt = tile_of(std::max(p.rows, p.max_rows));
  const std::int64_t total = p.k / step_k;
  sh.row_tiles = (p.n + tile_rows - 1) / tile_rows;
  const std::int64_t units = sh.row_tiles * p.groups;
  std::int64_t splits = 1;
  while (splits < max_splits && units * splits * 2 <= target_blocks &&
         total >= splits * 2 * min_split_steps)
    splits *= 2;
  auto per_split = [&](std::int64_t n) {
    const std::int64_t per = (total + n - 1) / n;
    return (per + split_align - 1) / split_align * split_align;
  };
  // (wide tiles add their splits with atomics, not in a cluster: up to 16)
  const std::int64_t most = sh.nt == 8 ? max_splits : 2 * max_splits;
  while (splits < most && smem_bytes(per_split(splits), sh.nt) > smem_limit_of(sh.nt)) splits *= 2;
  const std::int64_t per = per_split(splits);
  // (past smem_limit -- a few thousand steps -- dense_wg_gemm_takes refuses the shape)
  sh.steps_per_split = int(std::min<std::int64_t>(per, 1 << 20));
  sh.k_splits = int((total + per - 1) / per);
  if (sh.nt > 8) {  // (the same sums whichever block takes a tile)
    const std::int64_t blocks = units * sh.k_splits;
    sh.tiles_per_block = int(std::min<std::int64_t>(
        sh.row_tiles, (blocks + wide_resident_blocks - 1) / wide_resident_blocks));
  }
  return sh;
}

bool power_of_two(std::int64_t v) {
  return v > 0 && (v & (v - 1)) == 0;
}

}  // namespace

bool dense_wg_gemm_takes(const block_gemm_params& p) {
  if (p.fp4 || p.offsets || p.weight_b || p.split_work || p.k <= 0 || p.n <= 0 || p.groups <= 0 ||
      p.rows <= 0)
    return false;
  const std::int64_t rows = std::max(p.rows, p.max_rows);
  // 1..8 rows when switched on; 9..64 when the wide tiles are, outside the batch-invariant mode
  // (a token's bits there would depend on its batch's tile).
  if (rows <= 8 ? !g_on : rows > max_tile || g_wide == 0 || get_ordered_gemm_splits()) return false;
  if (!p.wscale_e8m0 && !p.wscale_f32) return false;
  const dense_shape sh = dense_shape_of(p);
  // Scale blocks of whole 16-row warp slices, powers of two of at least one step; the 8-byte
  // weight and activation loads aligned; a split's staging within the shared-memory limit.
  return p.k % step_k == 0 && p.block_rows % 16 == 0 && power_of_two(p.block_cols) &&
         p.block_cols >= step_k && power_of_two(p.act_block) && p.act_block >= step_k &&
         p.act_stride % 8 == 0 && p.act_group_offset % 8 == 0 &&
         reinterpret_cast<std::uintptr_t>(p.act) % 8 == 0 &&
         reinterpret_cast<std::uintptr_t>(p.weight) % 8 == 0 &&
         smem_bytes(sh.steps_per_split, sh.nt) <= smem_limit_of(sh.nt);
}

dense_wg_gemm_plan plan_dense_wg_gemm(const block_gemm_params& p) {
  const dense_shape sh = dense_shape_of(p);
  const bool batch4 = sh.nt > 8 || g_batch == 4;  // (wider tiles: 4-step batches)
  return {sh.k_splits,
          sh.steps_per_split,
          sh.row_tiles,
          batch4 ? 4 : 8,
          sh.nt,
          p.block_cols >= fused_steps * step_k && p.act_block >= fused_steps * step_k,
          sh.tiles_per_block};
}

void launch_dense_wg_gemm(const block_gemm_params& p, cudaStream_t stream) {
  DI_CHECK(dense_wg_gemm_takes(p),
           "dense_wg_gemm: dense FP8 weights (block rows a multiple of 16, power-of-two blocks of "
           ">= 32 inputs), 1..8 rows (9..64: the wide tiles, outside the batch-invariant mode), K "
           "a multiple of {}, aligned activations, a K split within {} KB of shared memory (got K "
           "{}, {} outputs, {} rows, {}, wide tiles {})",
           step_k, smem_limit / 1024, p.k, p.n, p.rows, g_on ? "on" : "switched off",
           g_wide == 0 ? "off" : "on");
  ++g_launches;
  const dense_wg_gemm_plan plan = plan_dense_wg_gemm(p);
  const std::int64_t blocks_x = (plan.row_tiles + plan.tiles_per_block - 1) / plan.tiles_per_block;
  const bool atomic = plan.nt > 8 && plan.k_splits > 1;
  const dim3 grid(unsigned(blocks_x), unsigned(p.groups), unsigned(plan.k_splits));
  const dim3 cluster(1, 1, atomic ? 1u : unsigned(plan.k_splits));
  const std::size_t smem = launch_smem(plan.steps_per_split, plan.nt, plan.k_splits);
  const dense_config cfg{plan.k_splits, plan.steps_per_split, g_early.load(),
                         plan.fused,    plan.tiles_per_block, atomic};
  if (atomic)  // the splits add into it
    zero_outputs(p.y, p.y_elements, stream);
  static std::atomic<std::size_t> limits[10][detail::max_tracked_devices];
  auto go = [&](auto kernel, int which) {
    detail::ensure_smem(reinterpret_cast<const void*>(kernel),
                        launch_smem(smem_limit_of(plan.nt) / smem_bytes(1, plan.nt), plan.nt, 2),
                        limits[which]);
    detail::launch_in("dense_wg_gemm", kernel, grid, dim3(threads), cluster, smem, stream, p, cfg);
  };
  const bool f32 = p.wscale_e8m0 == nullptr;
  switch (plan.nt) {
    case 16:
      f32 ? go(&dense_wg_gemm_kernel<16, 4, true>, 4) : go(&dense_wg_gemm_kernel<16, 4, false>, 5);
      break;
    case 32:
      f32 ? go(&dense_wg_gemm_kernel<32, 4, true>, 6) : go(&dense_wg_gemm_kernel<32, 4, false>, 7);
      break;
    case 64:
      f32 ? go(&dense_wg_gemm_kernel<64, 4, true>, 8) : go(&dense_wg_gemm_kernel<64, 4, false>, 9);
      break;
    default:
      if (plan.batch_steps == 4)
        f32 ? go(&dense_wg_gemm_kernel<8, 4, true>, 0) : go(&dense_wg_gemm_kernel<8, 4, false>, 1);
      else
        f32 ? go(&dense_wg_gemm_kernel<8, 8, true>, 2) : go(&dense_wg_gemm_kernel<8, 8, false>, 3);
  }
}

void set_dense_wg_gemm(bool on) {
  g_on = on;
}
bool get_dense_wg_gemm() {
  return g_on;
}
void set_dense_wg_gemm_wide(int mode) {
  DI_CHECK(mode >= -1 && mode <= 1, "dense_wg_gemm wide mode {} (expected -1, 0 or 1)", mode);
  g_wide = mode;
}
int get_dense_wg_gemm_wide() {
  return g_wide;
}
void set_dense_wg_gemm_early(bool on) {
  g_early = on;
}
void set_dense_wg_gemm_batch(int steps) {
  DI_CHECK(steps == 4 || steps == 8, "dense_wg_gemm batch {}: expected 4 or 8 steps", steps);
  g_batch = steps;
}
long dense_wg_gemm_launches() {
  return g_launches;
}

}  // namespace di::cuda
