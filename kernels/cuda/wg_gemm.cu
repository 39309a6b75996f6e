// wg_gemm: the routed experts' decode GEMM (interleaved MXFP4, token tiles of <= 8 rows) on
// the Hopper warpgroup MMA, the FP8 tensor-core instruction sm_90 runs natively.
//
// Why a kernel of its own: stream_gemm multiplies with mma.sync m16n8k32 e4m3, which sm_90 does
// not have -- ptxas emulates it (per 32-input step and 16 rows: 8 e4m3 -> f16 conversions of
// the weights, 4 of the activations, two f16 HMMAs and 4 FADDs of the zero accumulator), so
// on the routed experts stream_gemm is bound by its integer/ALU pipe, not by memory (Nsight
// Compute, V4.1 w1 at batch 64, session 10: 127 instructions per warp and 32-input step, ALU
// pipe 60%, DRAM 49%). wgmma.mma_async m64n8k32 e4m3 takes the weights (A) from registers --
// the same fragments stream_gemm decodes, 16 rows of each of the 4 warps of a warpgroup -- and
// the activations (B) from shared memory, with no conversion.
//
// Layout: 8 warps = 2 warpgroups; each warp owns one 32-row stripe of the interleaved layout
// (two m16 tiles), a warpgroup 4 stripes (128 rows) and one half of the block's K range; the
// two halves add in warpgroup order through shared memory. Blocks split K in two (experts of
// K >= 2048 with few row blocks) and add with fp32 atomics onto the zeroed y, whose two terms
// commute exactly. Every split depends on the weight's shape only (a pair -- the experts' w1
// and w3 in one launch, set_wg_gemm_pair -- counts both weights' row blocks): a token's result
// does not change with the batch. The block's 8-token tile of activation codes is staged once
// in shared memory, each 32-input step as wgmma's two K-major 8 x 16-byte core matrices, the
// inputs permuted as fp4_low / fp4_high permute the weights, and beside it the tile's
// activation scales (exponent bytes). Per run of 4 steps a warp decodes its 2 x 4 weight
// fragments, issues 8 wgmmas (fresh accumulators), waits, and promotes each step with the
// weight scales (loaded a run ahead) and activation scales exactly as stream_gemm does
// (promote_fp4_step) -- or, with V4's 128-input activation blocks (one scale per run), folds the
// run's steps with their weight scales and promotes the run once (fold_fp4_step,
// promote_fp4_run: a third fewer FP32 instructions a run in this issue-bound kernel).
#include "kernels/cuda/fresh_loads.cuh"
#include "kernels/cuda/gemm_kernels.hpp"
#include "kernels/cuda/launch.cuh"

#include "common/error.hpp"
#include "kernels/cuda/block_gemm_common.cuh"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/kernel_attributes.hpp"
#include "kernels/cuda/wgmma.cuh"

#include <atomic>
#include <type_traits>

namespace di::cuda {

namespace {

using namespace gemm_detail;

constexpr int warps = 8;
constexpr int step_k = 32;
constexpr int run_steps = 4;                               // steps per interleaved run
constexpr int step_bytes = step_k / 2;                     // MXFP4 bytes of a row per step
constexpr int wg_rows = 4 * il_stripe_rows;                // rows of a warpgroup (and of a block)
constexpr int b_step_bytes = 8 * step_k;                   // an 8-token step of B in shared memory
constexpr int max_split_steps = 48 * 1024 / b_step_bytes;  // B within the default 48 KB
constexpr std::size_t n32_smem_limit = 200 * 1024;  // 32-token tiles: B and the ring within this
constexpr int split_align = 8;                      // K splits start at multiples of 8 steps
/// Warpgroup 0's share of a block's `steps` (half, rounded up to whole runs); warpgroup 1 takes
/// the rest. Shared by the kernels that split K between their two warpgroups and their plans.
__host__ __device__ constexpr int warpgroup_half(int steps) {
  return ((steps + 1) / 2 + run_steps - 1) / run_steps * run_steps;
}
/// 8-token tiles stage their activation scales beside B: per token and step, the exponent byte
/// of the scale -- act_quant's scales (fp8_block_scale: ue8m0, a normal power of two) are
/// exactly 2^(e - 127), so a byte keeps them whole in a quarter of the shared memory (V4.1's w1
/// pair streams 160 steps per block: fp32 scales would cost the second block per SM).
constexpr std::size_t scale_stage_bytes(int steps) {
  return std::size_t(steps) * 8;
}
__device__ __forceinline__ float scale_of_exponent(std::uint32_t e) {
  return __uint_as_float(e << 23);
}
/// Whether the FP8 kernels fold each run of 4 steps before promoting it (multiply_run8): the
/// run lies within one activation block (V4's 128 inputs; runs start at multiples of 4 steps).
/// 32- and 64-input blocks promote every step.
/// DEEPINFER_WG_FOLD=0: every step promoted for them too (the sessions-before-36 arithmetic,
/// for comparisons; other bits).
std::atomic<bool> g_fold{detail::env_switch("DEEPINFER_WG_FOLD", true)};
bool folds_runs(const block_gemm_params& p) {
  return g_fold && p.act_block == 4 * step_k;
}

struct wg_config {
  int k_splits;         ///< blocks along K (1 or 2)
  int steps_per_split;  ///< a multiple of split_align
  bool compact;         ///< grid row y serves the y-th non-empty group
  int walkers;          ///< blocks walking a group's token tiles (the grid's z is splits x walkers)
  bool b_swap;          ///< 32-token tiles: B's descriptor offsets swapped (diagnostic)
  int pair_blocks;      ///< a pair (p.weight_b): grid columns from here on take the second weight
  int columns = 0;      ///< wg_chain_kernel: the columns of a tile (row blocks, both weights')
};

/// Runs of weights a warp keeps in flight through its shared-memory ring (RING > 0: cp.async,
/// no registers held) instead of one run ahead in registers (RING = 0).
constexpr int ring_runs = 4;
constexpr int run_bytes = 4 * 32 * 16;  // a warp's run: 4 pieces (m, h) x 32 lanes x 16 bytes

/// The 8-token B of a step: its K-adjacent core matrix 128 bytes on (with 8 tokens there is
/// no second core-matrix row; the stride offset is given the same 128).
__device__ __forceinline__ std::uint64_t b_descriptor(const void* smem) {
  return smem_descriptor(smem, 128, 128);
}

/// A 32-token step of B: token groups of 8 at 256-byte steps (each its two K-adjacent core
/// matrices, 128 bytes apart). swap (set_wg_gemm_n32 mode 2: a diagnostic for the first GPU
/// run) gives the two offsets the other way round.
__device__ __forceinline__ std::uint64_t b32_descriptor(const void* smem, bool swap) {
  return swap ? smem_descriptor(smem, 256, 128) : smem_descriptor(smem, 128, 256);
}

/// What a block of any of the kernels multiplies: the weight (a pair's second from grid column
/// cfg.pair_blocks on: uniform over the block), its row block, and its K split's steps.
/// `column`: the grid column (wg_chain_kernel: its item's).
struct wg_weight_site {
  bool second;
  int row_block;
  const std::uint8_t* weight;
  const std::uint8_t* wscale;
  int split_begin, split_end;
};
__device__ __forceinline__ wg_weight_site weight_site(const block_gemm_params& p,
                                                      const wg_config& cfg, int column, int split) {
  wg_weight_site w;
  w.second = column >= cfg.pair_blocks;
  w.row_block = column - (w.second ? cfg.pair_blocks : 0);
  w.weight = w.second ? p.weight_b : p.weight;
  w.wscale = w.second ? p.wscale_e8m0_b : p.wscale_e8m0;
  w.split_begin = split * cfg.steps_per_split;
  w.split_end = min(int(p.k / step_k), w.split_begin + cfg.steps_per_split);
  return w;
}

/// A lane's pointers into its warp's 32-row stripe of `group` from row ld0 on: the weights
/// from step w0 (piece (m, h) of a run at wrow + (2m + h) * 512) and its rows' scales (rows
/// g + 16m + 8h at ws8 + (16m + 8h) * wscale_cols) -- one base pointer each: fewer live
/// registers.
struct lane_weights {
  const std::uint8_t* wrow;
  const std::uint8_t* ws8;
};
__device__ __forceinline__ lane_weights lane_weights_of(const block_gemm_params& p,
                                                        const wg_weight_site& w, int group,
                                                        std::int64_t ld0, int w0, int lane, int g) {
  const std::int64_t row_bytes = p.k / 2;
  return {
      w.weight + (group * p.n + ld0) * row_bytes + std::int64_t(w0) * 32 * step_bytes + lane * 16,
      w.wscale + (group * p.n + ld0 + g) * p.wscale_cols};
}

/// A warp's weight runs over steps [w0, w1): per run of 4 steps its lane's 16 bytes of the 4
/// pieces (m, h) at wrow + (2m + h) * 512 (+ the run's offset). RING > 0: through the warp's
/// shared-memory ring of RING runs -- the lane's bytes of run s in slot ((s - w0) / 4) % RING,
/// read back only by the lane that copied them (no barrier), one commit group per run; RING = 0:
/// one run ahead in registers.
template <int RING>
struct weight_runs {
  const std::uint8_t* wrow;
  std::uint8_t* ring;  ///< the lane's bytes of slot 0
  int w0, w1;
  uint4 raw[2][2] = {};

  __device__ __forceinline__ void load(int s) {
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        raw[m][h] = load_stream16(wrow + (2 * m + h) * 512 + (s - w0) * 32 * step_bytes);
  }
  __device__ __forceinline__ std::uint8_t* slot_of(int s) const {
    return ring + ((s - w0) / run_steps) % (RING > 0 ? RING : 1) * run_bytes;
  }
  __device__ __forceinline__ void issue(int s) {
    if (s < w1) {
#pragma unroll
      for (int piece = 0; piece < 4; ++piece)
        cp_async16_stream(slot_of(s) + piece * 512,
                          wrow + piece * 512 + (s - w0) * 32 * step_bytes);
    }
    asm volatile("cp.async.commit_group;\n" ::);  // empty past w1: the count stays simple
  }
  /// The first runs requested (before a tile's activations are staged: they do not depend on
  /// them, so the staging's latency hides behind theirs).
  __device__ __forceinline__ void prime() {
    if constexpr (RING > 0) {
#pragma unroll
      for (int i = 0; i < RING - 1; ++i) issue(w0 + i * run_steps);
    } else if (w0 < w1) {
      load(w0);
    }
  }
  /// Run s's pieces into cur; the run RING - 1 ahead requested into the slot the previous run
  /// was read from (RING = 0: the next run's loads issued).
  __device__ __forceinline__ void next(int s, uint4 (&cur)[2][2]) {
    if constexpr (RING > 0) {
      issue(s + (RING - 1) * run_steps);
      asm volatile("cp.async.wait_group %0;\n" ::"n"(RING - 1));  // run s has landed
#pragma unroll
      for (int piece = 0; piece < 4; ++piece)
        cur[piece / 2][piece % 2] = *reinterpret_cast<const uint4*>(slot_of(s) + piece * 512);
    } else {
      cur[0][0] = raw[0][0], cur[0][1] = raw[0][1], cur[1][0] = raw[1][0], cur[1][1] = raw[1][1];
      if (s + run_steps < w1) load(s + run_steps);  // the next run streams in meanwhile
    }
  }
};

/// Stages steps [split_begin, split_end) of an NT-token tile's activation codes as B: step s at
/// (s - split_begin) * NT * 32, inputs 8t'..8t'+7 of token n as fp4_act_low (slots 4t'..4t'+3:
/// core matrix 0) and fp4_act_high (slots 16 + 4t'..: core matrix 1), so that slot j meets the
/// weight code fp4_low / fp4_high put at column j of A; with 32-token tiles token group n / 8 of
/// a step at (n / 8) * 256 (the core matrices of the next 8 tokens: the descriptor's stride
/// offset). 8-token tiles also stage their activation scales, the exponent byte of step s of
/// token n at act_sc[n * steps_per_split + s]. tile_row(i): the activation row of the tile's
/// token i (the last token's past the tile's end). Every thread of the block takes part.
template <int NT, typename TileRow>
__device__ __forceinline__ void stage_fp8_tile(const block_gemm_params& p, std::uint8_t* b_tile,
                                               std::uint8_t* act_sc, TileRow&& tile_row,
                                               std::int64_t col0, int split_begin, int split_end,
                                               int steps_per_split, int act_shift) {
  constexpr int NJ = NT / 8, bstep = NT * step_k;
  {  // thread: token n, quarter q, steps s = threadIdx.x / (4 NT) + (8 / NJ) j
    const int q = int(threadIdx.x) % 4, n = (int(threadIdx.x) / 4) % NT;
    const std::uint8_t* src =
        p.act + tile_row(n) * p.act_stride + col0 + std::int64_t(split_begin) * step_k + 8 * q;
    std::uint8_t* dst = b_tile + (n / 8) * 256 + (n % 8) * 16 + 4 * q;
#pragma unroll 8
    for (int s = int(threadIdx.x) / (4 * NT); s < split_end - split_begin; s += warps / NJ) {
      const uint2 v =
          di::cuda::detail::load_fresh(reinterpret_cast<const uint2*>(src + s * step_k));
      *reinterpret_cast<std::uint32_t*>(dst + s * bstep) = fp4_act_low(v.x, v.y);
      *reinterpret_cast<std::uint32_t*>(dst + s * bstep + 128) = fp4_act_high(v.x, v.y);
    }
  }
  if constexpr (NT == 8) {  // the scales of step s of token n at n * steps_per_split + s
    const int steps = split_end - split_begin;
    const float* sc0 = p.act_scale + (col0 >> act_shift);
#pragma unroll 4
    for (int i = int(threadIdx.x); i < 8 * steps; i += warps * 32) {
      const int n = i / steps, s = i % steps;
      const float scale = di::cuda::detail::load_fresh(sc0 + tile_row(n) * p.act_scale_stride +
                                                       (((split_begin + s) * step_k) >> act_shift));
      act_sc[n * steps_per_split + s] = std::uint8_t(__float_as_uint(scale) >> 23);
    }
  }
}

/// The activation scales of a run of 4 steps (the one at offset `s` into the split) for a
/// lane's tokens 2t and 2t + 1, from an 8-token tile's staged exponent bytes. FOLD (the run in
/// one activation block, multiply_run8's folded promotion): only the run's scale times 2^6, in
/// xa[0] / xb[0].
template <bool FOLD>
__device__ __forceinline__ void run_act_scales8(const std::uint8_t* act_sc, int steps_per_split,
                                                int s, int t, float (&xa)[4], float (&xb)[4]) {
  const std::uint32_t ea =
      *reinterpret_cast<const std::uint32_t*>(act_sc + (2 * t) * steps_per_split + s);
  const std::uint32_t eb =
      *reinterpret_cast<const std::uint32_t*>(act_sc + (2 * t + 1) * steps_per_split + s);
  if constexpr (FOLD) {
    xa[0] = scale_of_exponent(ea & 0xffu) * 64.0f;
    xb[0] = scale_of_exponent(eb & 0xffu) * 64.0f;
  } else {
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      xa[u] = scale_of_exponent((ea >> (8 * u)) & 0xffu);
      xb[u] = scale_of_exponent((eb >> (8 * u)) & 0xffu);
    }
  }
}

/// The A fragments of steps u0 .. u0 + GS - 1 of a run: step u of tile m from word u of the
/// lane's two 16-byte pieces of its rows (cur[m][0], cur[m][1]), as e4m3 codes (fp4il_low /
/// fp4il_high: the interleaved layout's bytes), pinned: written before the wgmma fence.
template <int GS>
__device__ __forceinline__ void run_fragments(const uint4 (&cur)[2][2], int u0,
                                              std::uint32_t (&a)[GS][2][4]) {
#pragma unroll
  for (int v = 0; v < GS; ++v)
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      const std::uint32_t lo = word_of(cur[m][0], u0 + v), hi = word_of(cur[m][1], u0 + v);
      a[v][m][0] = fp4il_low(lo);
      a[v][m][1] = fp4il_low(hi);
      a[v][m][2] = fp4il_high(lo);
      a[v][m][3] = fp4il_high(hi);
#pragma unroll
      for (int c = 0; c < 4; ++c) pin(a[v][m][c]);
    }
}

/// One run of an 8-token tile: the lane's 2 x 4 weight words `cur` (step u of tile m in word u
/// of its two rows' pieces) decoded to e4m3, multiplied with B's steps from b_run in groups of
/// GS steps (fence, wgmmas with fresh accumulators, commit, wait) and each step promoted into
/// acc with the weight scale words wpk and the activation scales xa / xb -- or, FOLD (the run
/// within one activation block: V4's 128-input blocks), the run's steps folded with their
/// weight scales and promoted once with the run's activation scale (xa[0] / xb[0], times 2^6).
template <int GS, bool FOLD>
__device__ __forceinline__ void multiply_run8(float (&acc)[2][4], const uint4 (&cur)[2][2],
                                              const std::uint32_t (&wpk)[2][2],
                                              const float (&xa)[4], const float (&xb)[4],
                                              const std::uint8_t* b_run) {
  constexpr int bstep = 8 * step_k;
  float blk[2][4];  // FOLD: the run's weight-scaled step sums
#pragma unroll
  for (int u0 = 0; u0 < run_steps; u0 += GS) {
    std::uint32_t a[GS][2][4];
    float d[GS][2][4];
    run_fragments(cur, u0, a);
    wgmma_fence();
#pragma unroll
    for (int v = 0; v < GS; ++v)
#pragma unroll
      for (int m = 0; m < 2; ++m)
        wgmma_n8_fresh(d[v][m], a[v][m], b_descriptor(b_run + (u0 + v) * bstep));
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int v = 0; v < GS; ++v)
#pragma unroll
      for (int m = 0; m < 2; ++m) {
#pragma unroll
        for (int c = 0; c < 4; ++c) pin(d[v][m][c]);  // read only after the wait
#pragma unroll
        for (int c = 0; c < 4; ++c) pin(a[v][m][c]);  // kept until the wgmmas have read them
        if constexpr (FOLD)
          fold_fp4_step(blk[m], d[v][m], wpk[m][0], wpk[m][1], u0 + v);
        else
          promote_fp4_step(acc[m], d[v][m], wpk[m][0], wpk[m][1], u0 + v, xa[u0 + v], xb[u0 + v]);
      }
  }
  if constexpr (FOLD) {
#pragma unroll
    for (int m = 0; m < 2; ++m) promote_fp4_run(acc[m], blk[m], xa[0], xb[0]);
  }
}

/// NT tokens per tile: 8 (m64n8k32; decode tiles, and the walked tiles of larger groups), or
/// 32 (m64n32k32, walked prefill-sized groups only: each weight fragment decoded once for 32
/// tokens; one block per SM for its larger B and registers). FOLD: 128-input activation blocks
/// (V4), each run of 4 steps promoted once (multiply_run8); else every step.
template <bool FOLD, bool WALK, int RING, int NT = 8>
__global__ void __launch_bounds__(warps * 32, NT == 8 ? 2 : 1)
    wg_gemm_kernel(block_gemm_params p, wg_config cfg) {
  detail::grid_dependency_sync();
  static_assert(NT == 8 || (NT == 32 && WALK), "8-token tiles, or walked 32-token tiles");
  constexpr int NJ = NT / 8;                               // 8-token column groups of a tile
  constexpr int bstep = NT * step_k;                       // bytes of one step of B
  extern __shared__ __align__(128) std::uint8_t b_tile[];  // the split's steps of NT tokens
  __shared__ float partial[4][32][8 * NJ];                 // warpgroup 1's sums
  // Steps per wgmma group (fence, wgmmas, commit, wait): a whole run, or two steps when the
  // block walks token tiles (fewer live registers: no spills at 128), one with 32-token tiles.
  // The same sums either way.
  constexpr int group_steps = NT == 32 ? 1 : WALK ? 2 : 4;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const int wg = warp / 4, wq = warp % 4;
  const block_site site = locate_block<warps>(p, cfg.compact, cfg.k_splits);
  if (site.group < 0) return;  // uniform over the block
  const int group = site.group;
  const wg_weight_site wsite = weight_site(p, cfg, int(blockIdx.x), site.split);
  const bool second = wsite.second;
  const int split_begin = wsite.split_begin, split_end = wsite.split_end;
  const std::int64_t row_begin = site.row_begin, count = site.count;
  const int per_wg = warpgroup_half(split_end - split_begin);
  const int w0 = min(split_end, split_begin + wg * per_wg);
  const int w1 = min(split_end, w0 + per_wg);
  // This warp's stripe (a warpgroup's stripes past the last one load the last: their results
  // are not stored, but every warp of a warpgroup takes part in its wgmmas).
  const std::int64_t n0 = std::int64_t(wsite.row_block) * wg_rows + wq * il_stripe_rows;
  const lane_weights lw =
      lane_weights_of(p, wsite, group, min(n0, p.n - il_stripe_rows), w0, lane, g);
  const std::uint8_t* const ws8 = lw.ws8;
  const std::int64_t col0 = group * p.act_group_offset;
  const int act_shift = log2_int(p.act_block);

  weight_runs<RING> stream{
      lw.wrow, b_tile + cfg.steps_per_split * bstep + (warp * RING * run_bytes) + lane * 16, w0,
      w1};
  // The weight scales of a run (byte u of word (m, h): step u of rows g + 16m + 8h); 8-token
  // tiles load them a run ahead like the weights (loaded at the run's start, their latency was
  // part of every run), 32-token tiles at the run's start (no registers to spare).
  auto load_wpk = [&](int s, std::uint32_t(&w)[2][2]) {
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        w[m][h] =
            __ldg(reinterpret_cast<const unsigned*>(ws8 + (16 * m + 8 * h) * p.wscale_cols + s));
  };
  std::uint32_t wpk_next[2][2] = {};
  if (site.tile * NT < count) {  // (a walker past its group's tiles loads nothing)
    stream.prime();
    if (NT == 8 && w0 < w1) load_wpk(w0, wpk_next);
  }
  // 8-token tiles: the tile's activation scales per token and step (exponent bytes,
  // [8][steps_per_split]) past B and the ring: a run reads its 4 steps' with two shared loads
  // instead of global ones.
  std::uint8_t* const act_sc = b_tile + cfg.steps_per_split * bstep + warps * RING * run_bytes;

  // WALK: the block takes tiles site.tile, site.tile + walkers, ... of its group (1 walker for
  // a decode step, more for prefill-sized groups).
  for (std::int64_t tok0 = site.tile * NT; tok0 < count; tok0 += NT * cfg.walkers) {
    const std::int64_t last_tok = count - tok0 - 1;
    auto tile_row = [&](std::int64_t i) {
      return row_begin + tok0 + (i < last_tok ? i : last_tok);
    };
    // Stage the split's steps of the tile (stage_fp8_tile).
    if (WALK && tok0 != site.tile * NT) __syncthreads();  // the previous tile's B is read
    stage_fp8_tile<NT>(p, b_tile, act_sc, tile_row, col0, split_begin, split_end,
                       cfg.steps_per_split, act_shift);
    fence_proxy_async();  // seen by wgmma
    __syncthreads();

    // Column group j's token columns 8j + 2t and 8j + 2t + 1: their activation scale rows.
    // (32-bit offsets from p.act_scale: fewer registers than pointers in 32-token tiles.)
    int sx_a[NJ], sx_b[NJ];
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      sx_a[j] = int(tile_row(8 * j + 2 * t) * p.act_scale_stride + (col0 >> act_shift));
      sx_b[j] = int(tile_row(8 * j + 2 * t + 1) * p.act_scale_stride + (col0 >> act_shift));
    }
    float acc[2][4 * NJ] = {};
    if (tok0 != site.tile * NT) {
      stream.prime();
      if (NT == 8 && w0 < w1) load_wpk(w0, wpk_next);
    }
    for (int s = w0; s < w1; s += run_steps) {
      uint4 cur[2][2];
      stream.next(s, cur);
      std::uint32_t wpk[2][2];
      if constexpr (NT == 8) {
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
          for (int h = 0; h < 2; ++h) wpk[m][h] = wpk_next[m][h];
        if (s + run_steps < w1) load_wpk(s + run_steps, wpk_next);
        // The run's activation scales from shared memory (tokens 2t and 2t + 1).
        float xa[4], xb[4];
        run_act_scales8<FOLD>(act_sc, cfg.steps_per_split, s - split_begin, t, xa, xb);
        multiply_run8<group_steps, FOLD>(acc, cur, wpk, xa, xb, b_tile + (s - split_begin) * bstep);
      } else {
        load_wpk(s, wpk);
        // 32-token tiles: step u of tile m from word u of its two rows' 16-byte pieces, one step
        // per wgmma group; each step's activation scales loaded while its wgmmas run (16
        // registers instead of 64). FOLD: multiply_run8's folded arithmetic per column group
        // (the 8-token tiles' bits), the run's activation scales loaded after its last step.
        float blk[2][4 * NJ];
#pragma unroll
        for (int u0 = 0; u0 < run_steps; u0 += group_steps) {
          std::uint32_t a[group_steps][2][4];
          float d[group_steps][2][4 * NJ];
          run_fragments(cur, u0, a);
          wgmma_fence();
          const std::uint8_t* b_step = b_tile + (s + u0 - split_begin) * bstep;
#pragma unroll
          for (int v = 0; v < group_steps; ++v)
#pragma unroll
            for (int m = 0; m < 2; ++m)
              wgmma_n32_fresh(d[v][m], a[v][m], b32_descriptor(b_step + v * bstep, cfg.b_swap));
          wgmma_commit();
          float xs_a[NJ], xs_b[NJ];  // step u0's scales (group_steps == 1)
          const int col = ((s + u0) * step_k) >> act_shift;
          if constexpr (!FOLD) {
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
              xs_a[j] = di::cuda::detail::load_fresh(p.act_scale + sx_a[j] + col);
              xs_b[j] = di::cuda::detail::load_fresh(p.act_scale + sx_b[j] + col);
            }
          }
          wgmma_wait<0>();
#pragma unroll
          for (int v = 0; v < group_steps; ++v)
#pragma unroll
            for (int m = 0; m < 2; ++m) {
#pragma unroll
              for (int c = 0; c < 4 * NJ; ++c) pin(d[v][m][c]);  // read only after the wait
#pragma unroll
              for (int c = 0; c < 4; ++c) pin(a[v][m][c]);  // kept until the wgmmas have read them
              const int u = u0 + v;
              if constexpr (FOLD) {  // fold_fp4_step per column group
#pragma unroll
                for (int j = 0; j < NJ; ++j)
                  fold_fp4_step(&blk[m][4 * j], &d[v][m][4 * j], wpk[m][0], wpk[m][1], u);
                continue;
              }
              // promote_fp4_step's arithmetic per column group
              const float w_lo = fp4_scale_factor_of(wpk[m][0], u);
              const float w_hi = fp4_scale_factor_of(wpk[m][1], u);
#pragma unroll
              for (int j = 0; j < NJ; ++j) {
                acc[m][4 * j + 0] += d[v][m][4 * j + 0] * (w_lo * xs_a[j]);
                acc[m][4 * j + 1] += d[v][m][4 * j + 1] * (w_lo * xs_b[j]);
                acc[m][4 * j + 2] += d[v][m][4 * j + 2] * (w_hi * xs_a[j]);
                acc[m][4 * j + 3] += d[v][m][4 * j + 3] * (w_hi * xs_b[j]);
              }
            }
        }
        if constexpr (FOLD) {
          const int col = (s * step_k) >> act_shift;
          float xa64[NJ], xb64[NJ];
#pragma unroll
          for (int j = 0; j < NJ; ++j) {
            xa64[j] = di::cuda::detail::load_fresh(p.act_scale + sx_a[j] + col) * 64.0f;
            xb64[j] = di::cuda::detail::load_fresh(p.act_scale + sx_b[j] + col) * 64.0f;
          }
#pragma unroll
          for (int m = 0; m < 2; ++m)
#pragma unroll
            for (int j = 0; j < NJ; ++j)
              promote_fp4_run(&acc[m][4 * j], &blk[m][4 * j], xa64[j], xb64[j]);
        }
      }
    }

    // Warpgroup 1 hands its sums to warpgroup 0, which adds them after its own and stores.
    if (wg == 1) {
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int c = 0; c < 4 * NJ; ++c) partial[wq][lane][m * 4 * NJ + c] = acc[m][c];
    }
    __syncthreads();  // also: every warp is done with this tile's B
    if (wg == 0 && n0 < p.n) {
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int c = 0; c < 4 * NJ; ++c) {
          const std::int64_t r = n0 + 16 * m + g + ((c & 3) < 2 ? 0 : 8);
          const std::int64_t tk = tok0 + 8 * (c / 4) + 2 * t + (c & 1);
          if (tk >= count) continue;
          float* out =
              (second ? p.y_b : p.y) + group * p.y_group_offset + (row_begin + tk) * p.y_stride + r;
          const float v = acc[m][c] + partial[wq][lane][m * 4 * NJ + c];
          if (cfg.k_splits > 1)
            atomicAdd(out, v);
          else
            *out = v;
        }
    }
    if constexpr (!WALK) break;
  }
}

// ---- Decode steps of many experts: persistent blocks (wg_chain_kernel) ----
// wg_gemm_kernel gives each block one (group, row block): at batch 64 a V4 layer's ~200 experts
// make ~6400 blocks of 128-256 KB of weights each, and every block starts by finding its group
// (a scan of the offsets), staging its tile's activations (two or three round trips to the L2)
// and priming its ring -- microseconds in which it streams little, against the ~7-15 that its
// weights take at its share of the bandwidth. Here a grid of as many blocks as are resident at
// once takes the same items -- (8-token tile, column) pairs, a tile's columns (its row blocks; a
// pair's second weight's after the first's) consecutive -- in contiguous shares, and each warp's
// ring runs on from one item into the next: the next item's first runs and weight scales are
// requested while the current one is multiplied, and a tile's activations are staged once for
// all its columns. One K split only (the shapes of the ring's decode steps: V4's and V4.1's at
// batch >= 22), so a warp's K range is the same in every item; each output is wg_gemm_kernel's
// chain of steps and promotions in its order (the same bits).

constexpr int chain_max_groups = 512;

/// An item of wg_chain_kernel: tile `tile` (among the non-empty groups' 8-token tiles, in group
/// order) times column `col`; `rank`: the tile's group among the non-empty ones.
struct chain_cursor {
  int tile, col, rank;
};

/// The non-empty groups in order into s_group, and where each one's 8-token tiles start among
/// all of theirs into s_tile0 (the total at s_tile0[count]); returns the count. Called by every
/// thread of a block of Warps warps (it synchronises).
template <int Warps>
__device__ int list_nonempty_tiles(const std::int32_t* offsets, int groups, short* s_group,
                                   int* s_tile0) {
  __shared__ int warp_groups[Warps], warp_tiles[Warps];
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int per = (groups + Warps * 32 - 1) / (Warps * 32);
  const int g0 = min(groups, tid * per), g1 = min(groups, g0 + per);
  int mine_groups = 0, mine_tiles = 0;
  for (int g = g0; g < g1; ++g) {
    const int c = offsets[g + 1] - offsets[g];
    if (c > 0) ++mine_groups, mine_tiles += (c + 7) / 8;
  }
  int incl_groups = mine_groups, incl_tiles = mine_tiles;  // inclusive scans within the warp
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int vg = __shfl_up_sync(0xffffffffu, incl_groups, d);
    const int vt = __shfl_up_sync(0xffffffffu, incl_tiles, d);
    if (lane >= d) incl_groups += vg, incl_tiles += vt;
  }
  if (lane == 31) warp_groups[warp] = incl_groups, warp_tiles[warp] = incl_tiles;
  __syncthreads();
  int rank = incl_groups - mine_groups, tile = incl_tiles - mine_tiles, total = 0;
  for (int w = 0; w < Warps; ++w) {
    if (w < warp) rank += warp_groups[w], tile += warp_tiles[w];
    total += warp_groups[w];
  }
  for (int g = g0; g < g1; ++g) {
    const int c = offsets[g + 1] - offsets[g];
    if (c > 0) {
      s_group[rank] = short(g);
      s_tile0[rank++] = tile;
      tile += (c + 7) / 8;
    }
  }
  if (g1 == groups && g0 < g1) s_tile0[total] = tile;  // the thread with the last groups
  if (tid == 0 && total == 0) s_tile0[0] = 0;
  __syncthreads();
  return total;
}

/// The tile an item's tokens come from: its group, first activation row and rows, and its first
/// token within the group.
struct chain_tile {
  int group;
  std::int64_t row_begin, count, tok0;
};

template <int RING, bool FOLD>
__global__ void __launch_bounds__(warps * 32, 2)
    wg_chain_kernel(block_gemm_params p, wg_config cfg) {
  static_assert(RING >= 2, "a run requested ahead");
  detail::grid_dependency_sync();
  extern __shared__ __align__(128) std::uint8_t b_tile[];  // B, the warps' rings, act scales
  __shared__ float partial[4][32][8];                      // warpgroup 1's sums
  __shared__ short s_group[chain_max_groups];
  __shared__ int s_tile0[chain_max_groups + 1];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const int wg = warp / 4, wq = warp % 4;
  const int ranks = list_nonempty_tiles<warps>(p.offsets, p.groups, s_group, s_tile0);
  const std::int64_t items = std::int64_t(s_tile0[ranks]) * cfg.columns;
  const std::int64_t begin = items * blockIdx.x / gridDim.x;
  const std::int64_t end = items * (blockIdx.x + 1) / gridDim.x;
  if (begin >= end) return;  // uniform over the block
  // This warp's K range (one split: the same in every item) and its runs (>= RING - 1: the
  // plan), as wg_gemm_kernel's warpgroup halves; B and the scales staged at steps_per_split
  // (K's steps rounded up to split_align) per token.
  const int steps = int(p.k / step_k), stride = cfg.steps_per_split;
  const int per_wg = warpgroup_half(steps);
  const int w0 = min(steps, wg * per_wg), w1 = min(steps, w0 + per_wg);
  const int runs = (w1 - w0) / run_steps;
  constexpr std::int64_t run_stride = run_steps * 32 * step_bytes;  // a run of a stripe
  const int act_shift = log2_int(p.act_block);
  std::uint8_t* const ring =
      b_tile + stride * b_step_bytes + warp * RING * run_bytes + lane * 16;  // the lane's slot 0
  std::uint8_t* const act_sc = b_tile + stride * b_step_bytes + warps * RING * run_bytes;

  auto cursor_at = [&](std::int64_t item) {
    chain_cursor c{int(item / cfg.columns), int(item % cfg.columns), 0};
    int hi = ranks - 1;  // the last rank whose first tile is <= c.tile
    while (c.rank < hi) {
      const int mid = (c.rank + hi + 1) / 2;
      if (s_tile0[mid] <= c.tile)
        c.rank = mid;
      else
        hi = mid - 1;
    }
    return c;
  };
  auto advance = [&](chain_cursor c) {
    if (++c.col == cfg.columns) {
      c.col = 0;
      if (++c.tile == s_tile0[c.rank + 1]) ++c.rank;
    }
    return c;
  };
  // The lane's weights (from step w0) and weight scales for an item's column.
  auto lane_of = [&](const chain_cursor& c) {
    const wg_weight_site ws = weight_site(p, cfg, c.col, 0);
    const std::int64_t n0 = std::int64_t(ws.row_block) * wg_rows + wq * il_stripe_rows;
    return lane_weights_of(p, ws, s_group[c.rank], min(n0, p.n - il_stripe_rows), w0, lane, g);
  };
  auto tile_of = [&](const chain_cursor& c) {
    chain_tile tl;
    tl.group = s_group[c.rank];
    tl.row_begin = p.offsets[tl.group];
    tl.count = p.offsets[tl.group + 1] - tl.row_begin;
    tl.tok0 = std::int64_t(c.tile - s_tile0[c.rank]) * 8;
    return tl;
  };
  // One run's 4 pieces into ring slot `slot`, one commit group per call (empty past the last:
  // `valid` false -- a flag, not a null pointer, whose 64-bit compare the profile found hot).
  auto issue = [&](unsigned slot, const std::uint8_t* src, bool valid) {
    if (valid) {
#pragma unroll
      for (int piece = 0; piece < 4; ++piece)
        cp_async16_stream(ring + slot * run_bytes + piece * 512, src + piece * 512);
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
  auto load_wpk = [&](const std::uint8_t* ws8, int s, std::uint32_t(&w)[2][2]) {
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        w[m][h] =
            __ldg(reinterpret_cast<const unsigned*>(ws8 + (16 * m + 8 * h) * p.wscale_cols + s));
  };
  auto stage = [&](const chain_tile& tl) {
    const std::int64_t last = tl.count - tl.tok0 - 1;
    stage_fp8_tile<8>(
        p, b_tile, act_sc,
        [&](std::int64_t i) { return tl.row_begin + tl.tok0 + (i < last ? i : last); },
        std::int64_t(tl.group) * p.act_group_offset, 0, steps, stride, act_shift);
    fence_proxy_async();  // seen by wgmma
    __syncthreads();
  };

  chain_cursor cur = cursor_at(begin);
  lane_weights cl = lane_of(cur);
  chain_cursor nxt = begin + 1 < end ? advance(cur) : cur;
  lane_weights nl = lane_of(nxt);
#pragma unroll
  for (int i = 0; i < RING - 1; ++i) issue(i, cl.wrow + i * run_stride, true);
  std::uint32_t wpk_next[2][2];
  load_wpk(cl.ws8, w0, wpk_next);
  chain_tile tl = tile_of(cur);
  stage(tl);
  unsigned q = 0;  // runs this warp has consumed; run q sits in slot q % RING (unsigned: a mask)
  for (std::int64_t item = begin;;) {
    const bool more = item + 1 < end;
    float acc[2][4] = {};
    for (int r = 0; r < runs; ++r, ++q) {
      // The run RING - 1 ahead (this item's, else the next one's) into the slot run q - 1 was
      // read from by this lane; then run q has landed.
      const int ahead = r + RING - 1;
      const bool own = ahead < runs;  // else the next item's (nl is cur's when there is none)
      issue((q + RING - 1) % RING,
            own ? cl.wrow + ahead * run_stride : nl.wrow + (ahead - runs) * run_stride,
            own || more);
      asm volatile("cp.async.wait_group %0;\n" ::"n"(RING - 1));
      uint4 w[2][2];
#pragma unroll
      for (int piece = 0; piece < 4; ++piece)
        w[piece / 2][piece % 2] =
            *reinterpret_cast<const uint4*>(ring + (q % RING) * run_bytes + piece * 512);
      std::uint32_t wpk[2][2];
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) wpk[m][h] = wpk_next[m][h];
      if (r + 1 < runs)
        load_wpk(cl.ws8, w0 + (r + 1) * run_steps, wpk_next);
      else if (more)
        load_wpk(nl.ws8, w0, wpk_next);
      float xa[4], xb[4];
      run_act_scales8<FOLD>(act_sc, stride, w0 + r * run_steps, t, xa, xb);
      multiply_run8<2, FOLD>(acc, w, wpk, xa, xb, b_tile + (w0 + r * run_steps) * b_step_bytes);
    }
    // Warpgroup 1 hands its sums to warpgroup 0, which adds them after its own and stores.
    if (wg == 1) {
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int c = 0; c < 4; ++c) partial[wq][lane][m * 4 + c] = acc[m][c];
    }
    __syncthreads();  // also: every warp is done with this tile's B
    const wg_weight_site ws = weight_site(p, cfg, cur.col, 0);
    const std::int64_t n0 = std::int64_t(ws.row_block) * wg_rows + wq * il_stripe_rows;
    if (wg == 0 && n0 < p.n) {
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const std::int64_t row = n0 + 16 * m + g + (c < 2 ? 0 : 8);
          const std::int64_t tk = tl.tok0 + 2 * t + (c & 1);
          if (tk >= tl.count) continue;
          float* out = (ws.second ? p.y_b : p.y) + tl.group * p.y_group_offset +
                       (tl.row_begin + tk) * p.y_stride + row;
          *out = acc[m][c] + partial[wq][lane][m * 4 + c];
        }
    }
    if (!more) break;
    __syncthreads();  // warpgroup 0 has read the partial sums
    const bool new_tile = nxt.tile != cur.tile;
    cur = nxt;
    cl = nl;
    if (++item + 1 < end) {
      nxt = advance(cur);
      nl = lane_of(nxt);
    }
    if (new_tile) {
      tl = tile_of(cur);
      stage(tl);
    }
  }
}

// ---- Prefill-sized groups in bf16 (set_wg_gemm_bf16) ----
// The FP8 path above promotes every 32-input step or run (fresh accumulators, a wait, scaled adds
// per thread), because the weight and activation scales change with each step and the FP8 wgmma
// accumulates below fp32 precision (a v41-flash-L4 2048-token prefill: 41.8 ms of experts, ~83
// TFLOP/s). Here both operands carry their scales: a weight's e2m1 value times its e8m0 scale
// and an activation's e4m3 code times its power-of-two block scale are both exact in bf16, and
// their products exact in fp32, so the bf16 wgmma accumulates the whole K range in its own fp32
// accumulators -- no promotion; each step's wait comes after the next step's fragments are
// decoded. The sums are the same products added in another order: 1.3-1.6e-6 from the CPU's
// (relative rms), where the FP8 tiles are 2e-5 off. What made it faster than the FP8 tiles was
// not the promotion alone (H200, session 26: the same kernel in wg_gemm_kernel's 128-row blocks,
// two warpgroups splitting K, was slower than them) but the 256-row blocks below, which stage
// each tile's B once for twice the rows.
//
// B (a 32-token tile of the split's steps, 2 KB per 32-input step) is staged once per tile from
// the activation codes and scales: sub-step j (inputs 16j.. of the MMA's K) at j * 1 KB, token
// group n / 8 at 256-byte steps, its two K-adjacent core matrices 128 bytes apart. A lane's
// weight word holds inputs 8t..8t+7 of a row (byte i: inputs 8t + 2i, 8t + 2i + 1), which the
// bf16 m16n8k16 fragment takes as sub-step 0's slots (2t, 2t + 1) <- inputs (8t, 8t + 1) and
// (8 + 2t, 9 + 2t) <- (8t + 2, 8t + 3), sub-step 1's the same slots <- (8t + 4 .. 8t + 7); B's
// rows are permuted to match (wg_bf16_stage).

/// Eight e2m1 codes (inputs k0..k7, a word as weight_matrix::interleaved stores it: byte i holds
/// k2i and k2i+1, their bits where fp4il_from_plain puts them) times the e8m0 scale 2^(e - 127)
/// as four bf16 pairs: v[i] = (k2i, k2i+1). The magnitudes back in nibbles (k2i's at bits 2..0
/// of byte i, k2i+1's at 6..4) select from a byte table (prmt: the bf16's low and high bytes of
/// 0, 0.5, 1, 1.5, 2, 3, 4, 6), the signs moved to bits 15 and 31, then one exact bf16 multiply
/// by the scale (e = 0, 2^-127, is a bf16 subnormal).
__device__ __forceinline__ void fp4_bf16x8(std::uint32_t w, std::uint32_t e,
                                           std::uint32_t (&v)[4]) {
  const std::uint32_t m = ((w >> 2) & 0x07070707u) | (w & 0x40404040u) | ((w << 4) & 0x30303030u);
  const std::uint32_t mh = m >> 16, odd = w << 2, even = w;
  const std::uint32_t l03 = __byte_perm(0xC0800000u, 0xC0804000u, m);
  const std::uint32_t h03 = __byte_perm(0x3F3F3F00u, 0x40404040u, m);
  const std::uint32_t l47 = __byte_perm(0xC0800000u, 0xC0804000u, mh);
  const std::uint32_t h47 = __byte_perm(0x3F3F3F00u, 0x40404040u, mh);
  const std::uint32_t scale = e != 0 ? e * 0x00800080u : 0x00400040u;
  const std::uint32_t raw[4] = {__byte_perm(l03, h03, 0x5140), __byte_perm(l03, h03, 0x7362),
                                __byte_perm(l47, h47, 0x5140), __byte_perm(l47, h47, 0x7362)};
  // byte i of `even` has nibble 2i's sign at its top bit, byte i of `odd` nibble 2i + 1's
  const std::uint32_t sign[4] = {__byte_perm(even, odd, 0x4000), __byte_perm(even, odd, 0x5010),
                                 __byte_perm(even, odd, 0x6020), __byte_perm(even, odd, 0x7030)};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const std::uint32_t signed_v = raw[i] | (sign[i] & 0x80008000u);
    asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(v[i]) : "r"(signed_v), "r"(scale));
  }
}

/// Stages steps [split_begin, split_end) of 32 tokens' activations as bf16 (code x block scale,
/// exact) in B's layout above. Thread (token n, half h) converts inputs 16h..16h+15 of every
/// fourth step; its 16-byte loads go out eight at a time (the staging's latency, not its
/// arithmetic, is what a tile waits for).
template <int Threads>
__device__ __forceinline__ void wg_bf16_stage(const block_gemm_params& p, std::uint8_t* b_tile,
                                              std::int64_t row, std::int64_t col0, int split_begin,
                                              int split_end, int act_shift) {
  constexpr int batch = 8, stride = Threads / 64;  // steps a pass of the block covers
  const int h = int(threadIdx.x) % 2, n = (int(threadIdx.x) / 2) % 32;
  const int steps = split_end - split_begin;
  const std::uint8_t* src =
      p.act + row * p.act_stride + col0 + std::int64_t(split_begin) * step_k + 16 * h;
  const float* sc = p.act_scale + row * p.act_scale_stride + (col0 >> act_shift);
  std::uint8_t* dst = b_tile + (n / 8) * 256 + (n % 8) * 16 + 8 * h;
  for (int s0 = int(threadIdx.x) / 64; s0 < steps; s0 += batch * stride) {
    uint4 c[batch];
    float scale[batch];
#pragma unroll
    for (int i = 0; i < batch; ++i) {
      const int s = s0 + i * stride;
      if (s < steps) {
        c[i] = di::cuda::detail::load_fresh(reinterpret_cast<const uint4*>(src + s * step_k));
        scale[i] = di::cuda::detail::load_fresh(sc + (((split_begin + s) * step_k) >> act_shift));
      }
    }
#pragma unroll
    for (int i = 0; i < batch; ++i) {
      const int s = s0 + i * stride;
      if (s >= steps) break;
      const std::uint32_t words[4] = {c[i].x, c[i].y, c[i].z, c[i].w};
#pragma unroll
      for (int k = 0; k < 8; ++k) {  // pair k: inputs 16h + 2k, 16h + 2k + 1 (quarter 2h + k / 4)
        // a quarter's pairs 0..3 -> sub-step 0 core 0, sub-step 0 core 1, sub-step 1 core 0, 1
        const int j = k % 4;
        *reinterpret_cast<std::uint32_t*>(dst + s * 2048 + 4 * (k / 4) + (j / 2) * 1024 +
                                          (j % 2) * 128) =
            e4m3x2_scaled_bf16(words[k / 2] >> (16 * (k % 2)), scale[i]);
      }
    }
  }
}

/// The bf16 kernel: wg_gemm_kernel<EVERY, true, RING, 32>'s weight stream and walk, with B in
/// bf16 and the products accumulated without promotion (above); a block is WGS x 128 rows
/// (WGS = 3 by default), each warpgroup 128 of them over the split's whole K range (B staged
/// once for all, no hand-over of sums between them).
template <int RING, int WGS = 2>
__global__ void __launch_bounds__(WGS * 128, 1) wg_bf16_kernel(block_gemm_params p, wg_config cfg) {
  detail::grid_dependency_sync();
  constexpr int NT = 32, bstep = 2048, block_warps = 4 * WGS;
  extern __shared__ __align__(128) std::uint8_t b_tile[];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const int wg = warp / 4, wq = warp % 4;
  const block_site site = locate_block<block_warps>(p, cfg.compact, cfg.k_splits);
  if (site.group < 0) return;  // uniform over the block
  const int group = site.group;
  const wg_weight_site wsite = weight_site(p, cfg, int(blockIdx.x), site.split);
  const bool second = wsite.second;
  const int split_begin = wsite.split_begin, split_end = wsite.split_end;
  const std::int64_t row_begin = site.row_begin, count = site.count;
  // Each warpgroup its own 128 rows over the whole split: B staged once for WGS x 128 rows.
  const int w0 = split_begin, w1 = split_end;
  const std::int64_t n0 =
      std::int64_t(wsite.row_block) * (WGS * wg_rows) + wg * wg_rows + wq * il_stripe_rows;
  const lane_weights lw =
      lane_weights_of(p, wsite, group, min(n0, p.n - il_stripe_rows), w0, lane, g);
  const std::uint8_t* const ws8 = lw.ws8;
  const std::int64_t col0 = group * p.act_group_offset;
  const int act_shift = log2_int(p.act_block);

  weight_runs<RING> stream{
      lw.wrow, b_tile + cfg.steps_per_split * bstep + (warp * RING * run_bytes) + lane * 16, w0,
      w1};

  for (std::int64_t tok0 = site.tile * NT; tok0 < count; tok0 += NT * cfg.walkers) {
    const std::int64_t last_tok = count - tok0 - 1;
    if (tok0 != site.tile * NT) __syncthreads();  // the previous tile's B is read
    stream.prime();                               // the weights do not depend on the staging
    {
      const int n = (int(threadIdx.x) / 2) % NT;
      wg_bf16_stage<WGS * 128>(p, b_tile, row_begin + tok0 + (n < last_tok ? n : last_tok), col0,
                               split_begin, split_end, act_shift);
    }
    fence_proxy_async();  // seen by wgmma
    __syncthreads();

    float acc[2][4][4] = {};
    for (int s = w0; s < w1; s += run_steps) {
      uint4 cur[2][2];
      stream.next(s, cur);
      // the run's weight scales: byte u of word (m, h) is step u of rows g + 16m + 8h
      std::uint32_t wpk[2][2];
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          wpk[m][h] =
              __ldg(reinterpret_cast<const unsigned*>(ws8 + (16 * m + 8 * h) * p.wscale_cols + s));
      // a[buffer][m][sub-step][4]: step u's fragments in buffer u % 2, decoded while step u - 1's
      // wgmmas run
      std::uint32_t a[2][2][2][4];
      auto decode = [&](int u, std::uint32_t(&dst)[2][2][4]) {
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          std::uint32_t lo[4], hi[4];  // rows g and g + 8
          fp4_bf16x8(word_of(cur[m][0], u), (wpk[m][0] >> (8 * u)) & 0xffu, lo);
          fp4_bf16x8(word_of(cur[m][1], u), (wpk[m][1] >> (8 * u)) & 0xffu, hi);
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            dst[m][j][0] = lo[2 * j];
            dst[m][j][1] = hi[2 * j];
            dst[m][j][2] = lo[2 * j + 1];
            dst[m][j][3] = hi[2 * j + 1];
#pragma unroll
            for (int c = 0; c < 4; ++c) pin(dst[m][j][c]);
          }
        }
      };
      decode(0, a[0]);
#pragma unroll
      for (int u = 0; u < run_steps; ++u) {
        wgmma_fence();
        const std::uint8_t* b_step = b_tile + (s + u - split_begin) * bstep;
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
          for (int j = 0; j < 2; ++j)
            wgmma_bf16<4>(acc[m], a[u % 2][m][j], b32_descriptor(b_step + j * 1024, false));
        wgmma_commit();
        if (u + 1 < run_steps) decode(u + 1, a[(u + 1) % 2]);
        wgmma_wait<0>();
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
          for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) pin(a[u % 2][m][j][c]);  // kept until read
      }
    }
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) pin(acc[m][j][c]);

    if (n0 < p.n) {
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int c = 0; c < 16; ++c) {
          const std::int64_t r = n0 + 16 * m + g + ((c & 3) < 2 ? 0 : 8);
          const std::int64_t tk = tok0 + 8 * (c / 4) + 2 * t + (c & 1);
          if (tk >= count) continue;
          float* out =
              (second ? p.y_b : p.y) + group * p.y_group_offset + (row_begin + tk) * p.y_stride + r;
          const float v = acc[m][c / 4][c % 4];
          if (cfg.k_splits > 1)
            atomicAdd(out, v);
          else
            *out = v;
        }
    }
  }
}

std::atomic<long> g_launches{0};
std::atomic<long> g_chain_launches{0};
/// The weights through each warp's shared-memory ring of ring_runs runs: 1 always, 0 never,
/// -1 (the default; DEEPINFER_WG_RING sets it) from ring_min_rows routed rows on. The ring
/// keeps more bytes in flight and pays off when many experts stream at once (H200,
/// v41-flash-L4, session 11: batch 64 11.56 -> 11.14 ms per step) but costs a few
/// microseconds at batch 1 and 8 (2.29 -> 2.35 ms). Both add the same products in the same
/// order: the choice never changes a result, so it may depend on the batch.
std::atomic<int> g_ring{
    detail::env_mode("DEEPINFER_WG_RING", "wg_gemm uses its ring from 128 routed rows")};
constexpr std::int64_t ring_min_rows = 128;
std::atomic<bool> g_wg_gemm{detail::env_switch("DEEPINFER_WG_GEMM", true)};

/// A pair's launch (set_wg_gemm_pair): 2 (the default) with the splits the pair's row blocks
/// together ask for, 1 with each weight's own K splits (the bits of two launches). H200,
/// session 17 (same call): V4.1 w1+w3 at batch 1 took 33.3 us (2), 36.1 (1), 40.5 as two
/// launches; at batch 64 900 / 952 / 962 us; v41-flash-L4 decode b1 1.80 / 1.88 / 1.88 ms,
/// b64 9.48 / 9.83 / 9.65 (v4-flash-L4: 1.81 / 1.81 / 1.86, 6.72 / 6.82 / 6.87).
std::atomic<int> g_pair{int(detail::env_count("DEEPINFER_WG_PAIR", 2, 2, 0))};

struct wg_shape {
  wg_config cfg{1, 0, false, 1, false, 1 << 30};
  std::int64_t row_blocks = 0, grid_groups = 0;
  bool walk = false;
  int nt = 8;          ///< tokens per tile (32: walked prefill-sized groups, set_wg_gemm_n32)
  bool bf16 = false;   ///< 32-token tiles on wg_bf16_kernel (set_wg_gemm_bf16)
  int bf16_wgs = 2;    ///< its warpgroups per block (set_wg_gemm_bf16_warpgroups)
  bool chain = false;  ///< persistent blocks (wg_chain_kernel, set_wg_gemm_chain)
};

/// Decode steps whose experts stream through the ring on wg_chain_kernel's persistent blocks:
/// on by default (DEEPINFER_WG_CHAIN=0 off: a block per item); the same bits either way.
std::atomic<bool> g_chain{detail::env_switch("DEEPINFER_WG_CHAIN", true)};

/// The runs of each warp of wg_chain_kernel's warpgroup 1 (one K split; warpgroup 0's: as many).
int chain_runs(const block_gemm_params& p) {
  const int steps = int(p.k / step_k);
  return (steps - warpgroup_half(steps)) / run_steps;
}

/// Whether wg_chain_kernel takes p (planned as sh): 8-token tiles walked by one block, one K
/// split, the ring, groups it can list, and at least RING - 1 runs for every warp (so that the
/// run it requests ahead lies in the current item or the next).
bool chain_takes(const block_gemm_params& p, const wg_shape& sh) {
  if (!g_chain || !p.offsets || p.groups > chain_max_groups || sh.nt != 8 || sh.bf16 ||
      sh.cfg.k_splits != 1 || sh.cfg.walkers != 1 || !wg_gemm_uses_ring(p))
    return false;
  return chain_runs(p) >= ring_runs - 1;
}

/// 32-token tiles (m64n32k32) for walked prefill-sized groups: 1 on (the default), 0 off, 2 on
/// with B's descriptor offsets swapped (a diagnostic).
std::atomic<int> g_n32{int(detail::env_count("DEEPINFER_WG_N32", 1, 2, 0))};
/// Walked prefill-sized groups whose one-split B of 32 tokens does not fit take two K splits
/// (sums added by fp32 atomics onto a zeroed y, as decode's two splits) instead of 8-token
/// tiles: on by default (DEEPINFER_WG_N32_SPLIT=0 off). V4.1's w1/w3 pair (mode 2: one split,
/// 160 steps) walked 8-token tiles -- 27.7 of a v41-flash-L4 prefill's 41.8 ms of experts.
std::atomic<bool> g_n32_split{detail::env_switch("DEEPINFER_WG_N32_SPLIT", true)};
/// Walked prefill-sized groups (32-token tiles) on wg_bf16_kernel: on by default
/// (DEEPINFER_WG_BF16=0 off), never with ordered splits (batch-invariant mode: whether a group
/// is prefill-sized depends on the batch, and the bf16 sums differ from the FP8 path's in
/// rounding).
std::atomic<bool> g_bf16{detail::env_switch("DEEPINFER_WG_BF16", true)};
/// Warpgroups per wg_bf16_kernel block (each 128 rows, sharing the block's B): 3 (the default;
/// at most 168 registers a thread, so a weight ring of at most 2 runs) or 2
/// (DEEPINFER_WG_BF16_WGS). The same sums either way: a row's K range and order do not depend
/// on the block. H200, session 27 (same call, prefill 2048, 3 / 2): v41-flash-L4 74.47 / 76.69
/// ms, v4-flash-L4 47.26 / 48.49.
std::atomic<int> g_bf16_wgs{int(detail::env_count("DEEPINFER_WG_BF16_WGS", 3, 3, 2))};
/// Bytes of a bf16 32-token B per 32-input step.
constexpr std::size_t bf16_step_bytes = 2048;

wg_shape wg_shape_of(const block_gemm_params& p) {
  wg_shape sh;
  const int total_steps = int(p.k / step_k);
  // Two blocks along K (K >= 2048) when 8 experts' row blocks would not give the GPU about 1.5
  // blocks per SM (V4.1's w1: 18 row blocks, V4's: 16; their w2s have 40 and 32): a decode
  // step's few experts. From the shape only, never the batch.
  // A pair's blocks count twice in mode 2 (its splits then differ from a single weight's).
  const std::int64_t row_blocks = (p.n + wg_rows - 1) / wg_rows;
  const std::int64_t split_basis = row_blocks * (p.weight_b && g_pair == 2 ? 2 : 1);
  const int k_splits = total_steps >= 64 && split_basis * 8 < 200 ? 2 : 1;
  int per_split = (total_steps + k_splits - 1) / k_splits;
  per_split = (per_split + split_align - 1) / split_align * split_align;
  const bool compact = p.offsets && p.rows > 0 && p.rows < p.groups;
  sh.cfg = wg_config{k_splits, per_split,  compact,
                     1,        g_n32 == 2, p.weight_b ? int(row_blocks) : 1 << 30};
  sh.row_blocks = row_blocks;
  sh.grid_groups = compact ? p.rows : p.groups;
  sh.walk = p.max_rows > 8;
  // Prefill-sized groups share their token tiles among as many blocks as a typical group has
  // tiles -- by the tile hint, else by twice the mean group (an eager step knows its total) --
  // so that a large group is not one block's serial walk; a decode step's groups (a hint of <=
  // 8 rows, or a mean of <= 4) are walked by one block. Each tile's sums are the same whichever
  // block adds them: the walkers never change a result.
  if (sh.walk) {
    const std::int64_t mean2 =
        p.offsets && p.rows > 0 ? 2 * ((p.rows + p.groups - 1) / p.groups) : 0;
    const std::int64_t basis = std::min(p.max_rows, p.tile_rows > 0 ? p.tile_rows : mean2);
    // 32-token tiles when a typical group fills most of one and B (32 x the split's K) and the
    // ring fit the shared memory of one block per SM.
    auto n32_bytes = [](int steps) {
      return std::size_t(steps) * 32 * step_k + std::size_t(8) * ring_runs * run_bytes;
    };
    // Prefill-sized groups on the bf16 kernel: bf16's B is twice the FP8 one, so one K split or
    // two (fp32 atomics onto the zeroed y: two addends commute exactly, more would not), the
    // ring as deep as fits beside it (launch_bf16); 256-row blocks.
    auto take_bf16 = [&] {
      for (int splits = 1; splits <= 2; ++splits) {
        int steps = (total_steps + splits - 1) / splits;
        steps = (steps + split_align - 1) / split_align * split_align;
        if (std::size_t(steps) * bf16_step_bytes > n32_smem_limit) continue;
        sh.nt = 32;
        sh.bf16 = true;
        sh.cfg.k_splits = (total_steps + steps - 1) / steps;
        sh.cfg.steps_per_split = steps;
        sh.bf16_wgs = g_bf16_wgs;
        sh.row_blocks = (p.n + sh.bf16_wgs * wg_rows - 1) / (sh.bf16_wgs * wg_rows);
        if (p.weight_b) sh.cfg.pair_blocks = int(sh.row_blocks);
        return true;
      }
      return false;
    };
    const bool prefill_sized = g_n32 > 0 && basis >= 24;
    if (!(prefill_sized && g_bf16 && !get_ordered_gemm_splits() && take_bf16())) {
      if (prefill_sized && n32_bytes(per_split) > n32_smem_limit && g_n32_split &&
          k_splits == 1) {  // two K splits halve B (prefill-sized groups only: basis >= 24)
        int half = (total_steps + 1) / 2;
        half = (half + split_align - 1) / split_align * split_align;
        if (n32_bytes(half) <= n32_smem_limit) {
          sh.cfg.k_splits = 2;
          sh.cfg.steps_per_split = per_split = half;
        }
      }
      if (prefill_sized && n32_bytes(per_split) <= n32_smem_limit) sh.nt = 32;
    }
    if (basis > 8) sh.cfg.walkers = int(std::min<std::int64_t>((basis + sh.nt - 1) / sh.nt, 4096));
  }
  sh.chain = chain_takes(p, sh);
  if (sh.chain) sh.cfg.columns = int(row_blocks * (p.weight_b ? 2 : 1));
  return sh;
}

template <int RING>
void launch_ring(const block_gemm_params& p, const wg_shape& sh, bool fold, dim3 grid,
                 std::size_t smem, cudaStream_t stream) {
  // Per instantiation and device: room for the largest split's B and the ring.
  static std::atomic<std::size_t> limits[6][detail::max_tracked_devices];
  const std::size_t most = std::size_t(max_split_steps) * b_step_bytes +
                           std::size_t(warps) * RING * run_bytes +
                           scale_stage_bytes(max_split_steps);
  auto go = [&](auto kernel, int which) {
    detail::ensure_smem(reinterpret_cast<const void*>(kernel), which >= 4 ? n32_smem_limit : most,
                        limits[which]);
    detail::launch("wg_gemm", kernel, grid, warps * 32, smem, stream, p, sh.cfg);
  };
  if (sh.nt == 32 && fold)
    go(&wg_gemm_kernel<true, true, RING, 32>, 4);
  else if (sh.nt == 32)
    go(&wg_gemm_kernel<false, true, RING, 32>, 5);
  else if (fold && sh.walk)
    go(&wg_gemm_kernel<true, true, RING>, 0);
  else if (fold)
    go(&wg_gemm_kernel<true, false, RING>, 1);
  else if (sh.walk)
    go(&wg_gemm_kernel<false, true, RING>, 2);
  else
    go(&wg_gemm_kernel<false, false, RING>, 3);
}

/// The deepest ring wg_chain_kernel may take: 4 runs (the default), or up to 6
/// (DEEPINFER_WG_CHAIN_RING) where two blocks per SM still fit and every warp has the runs to
/// request that far ahead (V4's and V4.1's w2: 5). The depth changes no result.
std::atomic<int> g_chain_ring{
    int(detail::env_count("DEEPINFER_WG_CHAIN_RING", ring_runs, 6, ring_runs))};

/// Launches wg_chain_kernel<RING, FOLD> on as many blocks as are resident at once (asked once
/// per device, B size and depth) -- unless fewer than `min_per_sm` would be, when it returns
/// false.
template <int RING, bool FOLD>
bool launch_chain_ring(const block_gemm_params& p, const wg_shape& sh, std::size_t b_bytes,
                       int min_per_sm, cudaStream_t stream) {
  static std::atomic<std::size_t> limits[detail::max_tracked_devices];
  static std::atomic<int> resident[max_split_steps / split_align + 1][detail::max_tracked_devices];
  const auto kernel = &wg_chain_kernel<RING, FOLD>;
  const std::size_t smem = b_bytes + std::size_t(warps) * RING * run_bytes;
  const std::size_t most = std::size_t(max_split_steps) * b_step_bytes +
                           std::size_t(warps) * RING * run_bytes +
                           scale_stage_bytes(max_split_steps);
  detail::ensure_smem(reinterpret_cast<const void*>(kernel), most, limits);
  std::atomic<int>& known =
      resident[sh.cfg.steps_per_split / split_align][detail::tracked_device()];
  int per_sm = known.load();
  if (per_sm == 0) {
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, warps * 32, smem));
    per_sm = std::max(1, per_sm);
    known = per_sm;
  }
  if (per_sm < min_per_sm) return false;
  const dim3 grid(unsigned(per_sm * detail::multiprocessor_count()));
  ++g_chain_launches;
  detail::launch("wg_gemm", kernel, grid, warps * 32, smem, stream, p, sh.cfg);
  return true;
}

/// wg_chain_kernel with the deepest ring set_wg_gemm_chain_ring allows that keeps two blocks per
/// SM and that every warp's runs reach (chain_takes: at least ring_runs - 1 for all).
void launch_chain(const block_gemm_params& p, const wg_shape& sh, std::size_t b_bytes,
                  cudaStream_t stream) {
  const int runs = chain_runs(p);
  const int most = std::min(int(g_chain_ring), runs + 1);
  auto go = [&](auto fold) {
    constexpr bool F = decltype(fold)::value;
    if (most >= 6 && launch_chain_ring<6, F>(p, sh, b_bytes, 2, stream)) return;
    if (most >= 5 && launch_chain_ring<5, F>(p, sh, b_bytes, 2, stream)) return;
    launch_chain_ring<ring_runs, F>(p, sh, b_bytes, 1, stream);
  };
  if (folds_runs(p))
    go(std::true_type{});
  else
    go(std::false_type{});
}

/// wg_bf16_kernel with as deep a weight ring as fits beside B (4 runs, 2, or none: a run ahead
/// in registers; 3 warpgroups take at most 2); the ring's depth changes no result.
void launch_bf16(const block_gemm_params& p, const wg_shape& sh, dim3 grid, std::size_t b_bytes,
                 cudaStream_t stream) {
  static std::atomic<std::size_t> limits[6][detail::max_tracked_devices];
  const int threads = sh.bf16_wgs * 128;
  auto go = [&](auto kernel, int runs, int which) {
    detail::ensure_smem(reinterpret_cast<const void*>(kernel), n32_smem_limit, limits[which]);
    detail::launch("wg_gemm", kernel, grid, threads,
                   b_bytes + std::size_t(threads / 32) * runs * run_bytes, stream, p, sh.cfg);
  };
  auto fits = [&](int runs) {
    return wg_gemm_uses_ring(p) &&
           b_bytes + std::size_t(threads / 32) * runs * run_bytes <= n32_smem_limit;
  };
  if (sh.bf16_wgs == 3) {
    if (fits(2))
      go(&wg_bf16_kernel<2, 3>, 2, 3);
    else
      go(&wg_bf16_kernel<0, 3>, 0, 4);
  } else if (fits(ring_runs)) {
    go(&wg_bf16_kernel<ring_runs>, ring_runs, 0);
  } else if (fits(2)) {
    go(&wg_bf16_kernel<2>, 2, 1);
  } else {
    go(&wg_bf16_kernel<0>, 0, 2);
  }
}

}  // namespace

void set_wg_gemm_ring(int mode) {
  DI_CHECK(mode >= -1 && mode <= 1, "wg_gemm ring mode {} (expected -1, 0 or 1)", mode);
  g_ring = mode;
}

bool wg_gemm_uses_ring(const block_gemm_params& p) {
  const int mode = g_ring;
  if (mode >= 0) return mode == 1;
  return (p.rows > 0 ? p.rows : p.max_rows) >= ring_min_rows;
}

void set_wg_gemm_pair(int mode) {
  DI_CHECK(mode >= 0 && mode <= 2, "wg_gemm pair mode {} (expected 0, 1 or 2)", mode);
  g_pair = mode;
}
int get_wg_gemm_pair() {
  return g_pair;
}

void set_wg_gemm_n32_split(bool on) {
  g_n32_split = on;
}
bool get_wg_gemm_n32_split() {
  return g_n32_split;
}

void set_wg_gemm_bf16(bool on) {
  g_bf16 = on;
}
bool get_wg_gemm_bf16() {
  return g_bf16;
}

void set_wg_gemm_chain(bool on) {
  g_chain = on;
}
bool get_wg_gemm_chain() {
  return g_chain;
}

void set_wg_gemm_chain_ring(int runs) {
  DI_CHECK(runs >= ring_runs && runs <= 6, "wg_gemm chain ring of {} runs (expected 4..6)", runs);
  g_chain_ring = runs;
}
int get_wg_gemm_chain_ring() {
  return g_chain_ring;
}

void set_wg_gemm_bf16_warpgroups(int n) {
  DI_CHECK(n == 2 || n == 3, "wg_gemm bf16 warpgroups per block {} (expected 2 or 3)", n);
  g_bf16_wgs = n;
}
int get_wg_gemm_bf16_warpgroups() {
  return g_bf16_wgs;
}

void set_wg_gemm_n32(int mode) {
  DI_CHECK(mode >= 0 && mode <= 2, "wg_gemm 32-token tiles mode {} (expected 0, 1 or 2)", mode);
  g_n32 = mode;
}
int get_wg_gemm_n32() {
  return g_n32;
}

void set_wg_gemm(bool on) {
  g_wg_gemm = on;
}
bool get_wg_gemm() {
  return g_wg_gemm;
}
long wg_gemm_launches() {
  return g_launches;
}
long wg_gemm_chain_launches() {
  return g_chain_launches;
}

wg_gemm_plan plan_wg_gemm(const block_gemm_params& p) {
  const wg_shape sh = wg_shape_of(p);
  return {sh.cfg.k_splits, sh.cfg.steps_per_split, sh.row_blocks, sh.grid_groups,
          sh.walk,         sh.cfg.walkers,         sh.nt,         sh.bf16,
          sh.chain};
}

bool wg_gemm_takes(const block_gemm_params& p) {
  if (!g_wg_gemm || !p.fp4 || !p.fp4_interleaved || !p.wscale_e8m0 || p.k <= 0 || p.n <= 0)
    return false;
  if (p.weight_b && (!p.wscale_e8m0_b || !p.y_b || g_pair == 0)) return false;
  const bool blocks = p.act_block == 32 || p.act_block == 64 || p.act_block == 128;
  const wg_shape sh = wg_shape_of(p);
  // Whole runs (K % 128) and stripes (n % 32), the 8-byte activation loads aligned, a split's
  // B within 48 KB of shared memory.
  return blocks && p.k % (step_k * run_steps) == 0 && p.n % il_stripe_rows == 0 &&
         p.act_stride % 8 == 0 && p.act_group_offset % 8 == 0 &&
         reinterpret_cast<std::uintptr_t>(p.act) % 8 == 0 &&
         p.act_scale_stride % (p.act_block == 32 ? 4 : 1) == 0 &&
         reinterpret_cast<std::uintptr_t>(p.act_scale) % 16 == 0 &&
         sh.cfg.steps_per_split <= max_split_steps;
}

void launch_wg_gemm(const block_gemm_params& p, cudaStream_t stream) {
  DI_CHECK(wg_gemm_takes(p),
           "wg_gemm: interleaved MXFP4 weights with e8m0 scales, K a multiple of {}, outputs in "
           "stripes of {}, a K split of at most {} steps, aligned activations (got K {}, {} "
           "outputs, act_block {}, {})",
           step_k * run_steps, il_stripe_rows, max_split_steps, p.k, p.n, p.act_block,
           g_wg_gemm ? "on" : "switched off");
  if (p.max_rows == 0 || p.groups == 0) return;
  ++g_launches;
  const wg_shape sh = wg_shape_of(p);
  if (sh.cfg.k_splits > 1 && !p.y_zeroed) {  // atomic adds need a zeroed y
    zero_outputs(p.y, p.y_elements, stream);
    if (p.y_b) zero_outputs(p.y_b, p.y_elements, stream);
  }
  // One 8-token tile per block: groups of more than 8 rows are walked tile by tile (WALK), by
  // sh.cfg.walkers blocks each. A pair's second weight takes the columns past the first's.
  const dim3 grid(unsigned(sh.row_blocks * (p.weight_b ? 2 : 1)), unsigned(sh.grid_groups),
                  unsigned(sh.cfg.k_splits * sh.cfg.walkers));
  // B of a tile, and with 8-token tiles their activation scales (staged past the ring).
  const std::size_t b_bytes =
      sh.bf16 ? std::size_t(sh.cfg.steps_per_split) * bf16_step_bytes
              : std::size_t(sh.cfg.steps_per_split) * step_k * sh.nt +
                    (sh.nt == 8 ? scale_stage_bytes(sh.cfg.steps_per_split) : 0);
  const bool fold = folds_runs(p);
  if (sh.bf16) {
    launch_bf16(p, sh, grid, b_bytes, stream);
    return;
  }
  if (sh.chain)
    launch_chain(p, sh, b_bytes, stream);
  else if (wg_gemm_uses_ring(p))
    launch_ring<ring_runs>(p, sh, fold, grid, b_bytes + std::size_t(warps) * ring_runs * run_bytes,
                           stream);
  else
    launch_ring<0>(p, sh, fold, grid, b_bytes, stream);
}

}  // namespace di::cuda
