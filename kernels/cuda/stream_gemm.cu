// stream_gemm: block_gemm's decode path, for token tiles of at most 8 rows per group (every
// dense decode GEMM up to batch 8, and the routed experts of a decode step). Such a GEMM reads
// each weight byte once and does little arithmetic with it: what counts is keeping many weight
// bytes in flight with few instructions per byte. Each warp owns 16 FP8 rows (one m16 MMA tile)
// or 32 MXFP4 rows (two tiles sharing the activation fragments) -- 512 weight bytes per
// 32-input step either way -- and a range of K, and loads its weight fragments straight from
// global memory into registers (no shared memory, no barriers in the loop) in batches of 4
// steps, the next batch issued before the current one is multiplied. The fragment a lane loads
// is the one its MMA needs: for FP8 bytes 8t..8t+7 of a row's 32-byte step, for MXFP4 bytes
// 4t..4t+3 of its 16 (decoded to e4m3 in registers as in sm90_block_gemm); the activations
// take the same permutation. MXFP4 in the interleaved layout (weight_matrix::interleaved)
// holds a warp's fragments of four consecutive steps as four contiguous 512-byte pieces: 16-byte
// loads, each warp instruction one contiguous stretch, a warp's whole K range one contiguous
// region (the row-major layout's 4-byte loads touch 8 rows' lines for 128 useful bytes).
// Whole batches run without guards; pointers are set once per warp.
// Warps of a block that share rows split K and add their sums in warp order through shared
// memory (deterministic); dense GEMMs with few rows and long K also split K across two blocks
// launched as a thread-block cluster, the second handing its sums to the first through
// distributed shared memory (a + b, as the fp32 atomic adds onto a zeroed output that this
// replaced -- and its memset node -- gave). Every split decision depends
// on the weight's shape only, never on the batch, so a token's result does not change with the
// batch (up to 8 rows per group, where this kernel serves).
// Dense launches (no expert offsets) request their first batch of weights before waiting for
// the previous kernel (programmatic dependent launch): the weights are constant, so their
// latency overlaps that kernel's tail; the activations, which it writes, load after the wait.
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
#include <string_view>
#include <type_traits>

namespace di::cuda {

namespace {

using namespace gemm_detail;

constexpr int warps = 8;
constexpr int step_k = 32;
constexpr int align_steps = 8;  // K splits start at multiples of 8 steps (256 inputs)

struct stream_config {
  int wk;               ///< warps of a block along K (1, 2, 4 or 8); 8 / wk row slices
  int k_splits;         ///< blocks along K (1 or 2; 2 run as a cluster, split 0 adds and stores)
  int steps_per_split;  ///< multiple of align_steps
  int warp_align;       ///< a warp's K range starts at a multiple of this (>= a promotion block)
  bool compact;         ///< grid row y serves the y-th non-empty group
  bool early;  ///< dense: the first batch's weights loaded before the wait for the last kernel
  /// A dense pair (p.n_b > 0): grid columns from here on take the second weight.
  int pair_blocks = 1 << 30;
};

/// The weight a block of a dense pair multiplies (the first's outside pairs): its rows, codes
/// and scales, and the block's grid column among that weight's row blocks. Pairs are
/// dense (group 0), so uniform over the block.
struct stream_weight {
  bool second;
  std::int64_t n;
  const std::uint8_t* weight;
  const std::uint8_t* wscale_e8m0;
  const float* wscale_f32;
  int column;
};
__device__ __forceinline__ stream_weight stream_weight_of(const block_gemm_params& p,
                                                          const stream_config& cfg) {
  const bool second = int(blockIdx.x) >= cfg.pair_blocks;
  return {second,
          second ? p.n_b : p.n,
          second ? p.weight_b : p.weight,
          second ? p.wscale_e8m0_b : p.wscale_e8m0,
          second ? p.wscale_f32_b : p.wscale_f32,
          int(blockIdx.x) - (second ? cfg.pair_blocks : 0)};
}

/// How stream_gemm's FP8 warps load their weights (the kernel's WIDE): 8-byte fragments, or
/// 16-byte loads of pairs of steps, sorted between lanes or mixed within a promotion block.
enum pair_mode : int { pair_none = 0, pair_swap = 1, pair_mixed = 2 };

/// 4 bytes of an MXFP4 row; kept in L1: the other half of the 32-byte sector is the next step.
__device__ __forceinline__ std::uint32_t load_stream4(const std::uint8_t* p) {
  std::uint32_t v;
  asm("ld.global.nc.L2::256B.u32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}


/// m16 MMA tiles per warp: FP8 one (16 rows x 32 bytes per step), MXFP4 two (32 rows x 16
/// bytes, sharing each activation fragment): 512 weight bytes per step and warp either way.
template <bool FP4>
constexpr int tiles_of() {
  return FP4 ? 2 : 1;
}

/// One load batch: the A fragments of `batch` steps (per tile, rows g and g + 8; FP8: bytes
/// 8t..8t+7 of the row's 32-byte step, MXFP4: bytes 4t..4t+3 of its 16) and the B fragments
/// (token g's activation codes, inputs 8t..8t+7 of each step).
template <bool FP4, int batch>
struct batch_regs {
  std::conditional_t<FP4, std::uint32_t, uint2> a[batch][tiles_of<FP4>()][2];
  uint2 b[batch];
  // FP8 with every step promoting (EVERY): the batch's scales, loaded with its fragments so that
  // their latency hides behind the batch before (read at multiply time, each warp's first
  // weight-scale sector was a miss in the middle of its chain).
  float xa[batch], xb[batch];
  std::uint32_t ws[batch];
};

/// EVERY: 32-input scale blocks for the weights (MXFP4, or FP8 with e8m0 scales) and the
/// activations (V4.1's shapes): every step promotes, with no branch in a whole batch.
/// IL: MXFP4 interleaved (K a multiple of 128 and N of 32, so warps own whole stripes, their
/// ranges hold whole 4-step runs and every batch is a whole run: no tail batch).
/// WIDE (pair_mode): FP8 rows read in 16-byte loads (K a multiple of 64, so every warp range
/// holds whole pairs of steps): lane t loads bytes 16t..16t+15 of a pair's 64 -- half of step
/// t / 2. Half the load instructions of 8-byte fragments, which a plain read in this geometry
/// showed to be the limit (bench "read pattern": V4.1 wo_b 16.3 -> 12.5 us at 3 blocks per SM).
/// pair_swap: each step promotes on its own (32-input blocks), so lane t swaps its upper 8
/// bytes with lane t ^ 2, which holds the other step's same half, and every lane ends with 8
/// bytes of both steps (pair_fragments). pair_mixed: the pair lies in one promotion block (V4's
/// 128-input blocks), so no swap: the pair's first MMA takes every lane's lower 8 bytes and the
/// second its upper 8, whichever step they belong to. The activations are read at the same
/// positions. The same products are summed as with 8-byte loads, arranged differently.
template <bool FP4, bool IL, bool EVERY, int batch, int min_blocks, bool WALK, int WIDE>
__global__ void __launch_bounds__(warps * 32, min_blocks)
    stream_gemm_kernel(block_gemm_params p, stream_config cfg) {
  if (!cfg.early) detail::grid_dependency_sync();  // else below, after the first weights
  static_assert(!IL || (FP4 && batch == 4), "interleaved runs are MXFP4 batches of 4 steps");
  static_assert(!WIDE || (!FP4 && batch % 2 == 0), "wide loads are FP8 pairs of steps");
  static_assert(!EVERY || WIDE != pair_mixed, "steps that promote alone cannot be mixed");
  constexpr int DEPTH = 2;  // batches of registers: one loads while one multiplies (a third
                            // measured slower on the H200)
  constexpr int tiles = tiles_of<FP4>();
  constexpr int warp_rows = 16 * tiles;
  constexpr int step_bytes = FP4 ? step_k / 2 : step_k;
  __shared__ float partial[warps][32][tiles * 4];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const block_site site = locate_block<warps>(p, cfg.compact, cfg.k_splits);
  if (site.group < 0) return;  // fewer non-empty groups than grid rows (uniform over the block)
  const int group = site.group, split = site.split;
  const std::int64_t row_begin = site.row_begin, count = site.count;
  // WALK (groups bounded by more than 8 rows, e.g. a captured step bounded by its whole
  // batch): the block walks its group's 8-token tiles one after another and the grid's z
  // covers the K splits only, so no idle tile blocks are launched; a group of more than 8 rows
  // streams its weights once per tile, with the same sums. Otherwise one tile per block.
  const std::int64_t first = site.tile * 8;
  for (std::int64_t tok0 = first; tok0 < count; tok0 += 8) {
    if (WALK && tok0 != first && (cfg.wk > 1 || cfg.k_splits > 1))
      __syncthreads();  // partial[] is reused
    [&] {

  // This warp's rows and K range (steps, global within K). Ranges start at multiples of
  // warp_align steps and end there or at K's end, so they hold whole promotion blocks.
  const int wk_i = warp % cfg.wk, wr_i = warp / cfg.wk;
  const int total_steps = int(p.k / step_k);
  const int split_begin = split * cfg.steps_per_split;
  const int split_end = min(total_steps, split_begin + cfg.steps_per_split);
  int per_warp = (split_end - split_begin + cfg.wk - 1) / cfg.wk;
  per_warp = (per_warp + cfg.warp_align - 1) / cfg.warp_align * cfg.warp_align;
  const int w0 = split_begin + wk_i * per_warp;
  const int w1 = min(split_end, w0 + per_warp);
  const stream_weight sw = stream_weight_of(p, cfg);
  const std::int64_t n0 = (std::int64_t(sw.column) * (warps / cfg.wk) + wr_i) * warp_rows;
  const bool active = n0 < sw.n && w0 < w1;

  // Pointers at the warp's first step; batches index them with small offsets. Tokens past
  // the group read its last row: their MMA columns and outputs are never stored.
  const std::int64_t row_bytes = FP4 ? p.k / 2 : p.k;
  const std::uint8_t* wrow[tiles][2];
  // Weight scales: MXFP4 one e8m0 row per weight row; FP8 one row block per tile (rows g and
  // g + 8 share it: FP8 scale blocks span a multiple of 16 rows, and 16-row tiles are aligned).
  const std::uint8_t* ws8[tiles][FP4 ? 2 : 1];
  const float* ws32 = nullptr;
#pragma unroll
  for (int m = 0; m < tiles; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::int64_t r = group * sw.n + min(n0 + 16 * m + 8 * h + g, sw.n - 1);
      if constexpr (IL)  // the stripe n0 starts, run w0 / 4, this (m, h) piece, this lane
        wrow[m][h] = sw.weight + (group * sw.n + n0) * row_bytes +
                     std::int64_t(w0) * 32 * step_bytes + ((2 * m + h) * 32 + lane) * 16;
      else
        wrow[m][h] = sw.weight + r * row_bytes + std::int64_t(w0) * step_bytes +
                     (FP4    ? 4 * t
                      : WIDE ? 16 * t
                             : 8 * t);
      if constexpr (FP4) {
        ws8[m][h] = sw.wscale_e8m0 + r * p.wscale_cols;
      } else if (h == 0) {
        const std::int64_t at = (r / p.block_rows) * p.wscale_cols;
        ws8[m][0] = sw.wscale_e8m0 ? sw.wscale_e8m0 + at : nullptr;
        if (m == 0 && !sw.wscale_e8m0) ws32 = sw.wscale_f32 + at;  // tiles == 1 for FP8
      }
    }
  const std::int64_t col0 = group * p.act_group_offset;
  const std::int64_t last_tok = count - tok0 - 1;
  auto tile_row = [&](int i) { return row_begin + tok0 + (i < last_tok ? i : last_tok); };
  // act_row serves even steps, odd ones add odd_shift. pair_swap: step j of a pair at the
  // bytes pair_fragments leaves lane t (16 (t % 2), + 8 when the step is the one its partner
  // loaded); pair_mixed: the lane's own 16 bytes, lower then upper.
  const std::uint8_t* act_row = p.act + tile_row(g) * p.act_stride + col0 +
                                std::int64_t(w0) * step_k +
                                (WIDE == pair_swap    ? 16 * (t & 1) + 8 * (t >> 1)
                                 : WIDE == pair_mixed ? 16 * t
                                                      : 8 * t);
  [[maybe_unused]] const int odd_shift = WIDE == pair_swap    ? 8 - 16 * (t >> 1)
                                         : WIDE == pair_mixed ? 8 - step_k
                                                              : 0;
  const int act_shift = log2_int(p.act_block);
  const float* sx_a = p.act_scale + tile_row(2 * t) * p.act_scale_stride + (col0 >> act_shift);
  const float* sx_b = p.act_scale + tile_row(2 * t + 1) * p.act_scale_stride + (col0 >> act_shift);
  const int pmask = (FP4 ? 1 : max(1, min(p.block_cols, p.act_block) / step_k)) - 1;
  const int col_shift = FP4 ? 0 : log2_int(p.block_cols);

  // Batch loads: `Tail` guards steps past w1 (the last, partial batch only). The weights (and
  // their scales) and the activations (and theirs) load separately: with cfg.early the first
  // batch's weights are requested before the wait for the previous kernel.
  auto load_weights = [&](auto tail, batch_regs<FP4, batch>& r, int s) {
    [[maybe_unused]] constexpr bool Tail = decltype(tail)::value;
    const int off = s - w0;
    if constexpr (IL) {  // one run of 4 steps: the lane's 4 bytes of each, in step order
#pragma unroll
      for (int m = 0; m < tiles; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint4 v = load_stream16(wrow[m][h] + off * 32 * step_bytes);
          r.a[0][m][h] = v.x;
          r.a[1][m][h] = v.y;
          r.a[2][m][h] = v.z;
          r.a[3][m][h] = v.w;
        }
    } else if constexpr (WIDE) {  // pairs of steps: the raw halves, sorted by pair_fragments
#pragma unroll
      for (int u = 0; u < batch; u += 2) {
        if (Tail && s + u >= w1) break;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint4 v = load_stream16(wrow[0][h] + (off + u) * step_bytes);
          r.a[u][0][h] = make_uint2(v.x, v.y);
          r.a[u + 1][0][h] = make_uint2(v.z, v.w);
        }
      }
      if constexpr (EVERY && !Tail) {  // a pair's two scale bytes in one load (K % 64 == 0)
#pragma unroll
        for (int u = 0; u < batch; u += 2)
          r.ws[u] = *reinterpret_cast<const std::uint16_t*>(ws8[0][0] + s + u);
      }
    } else {
#pragma unroll
      for (int u = 0; u < batch; ++u) {
        if (Tail && s + u >= w1) break;
#pragma unroll
        for (int m = 0; m < tiles; ++m)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const std::uint8_t* src = wrow[m][h] + (off + u) * step_bytes;
            if constexpr (FP4)
              r.a[u][m][h] = load_stream4(src);
            else
              r.a[u][m][h] = load_stream8(src);
          }
      }
      if constexpr (EVERY && !FP4 && !Tail) {  // the scales multiply_every reads (full batches)
#pragma unroll
        for (int u = 0; u < batch; ++u) r.ws[u] = ws8[0][0][s + u];
      }
    }
  };
  auto load_acts = [&](auto tail, batch_regs<FP4, batch>& r, int s) {
    [[maybe_unused]] constexpr bool Tail = decltype(tail)::value;
    const int off = s - w0;
#pragma unroll
    for (int u = 0; u < batch; ++u) {
      if (!IL && Tail && s + u >= w1) break;
      r.b[u] = detail::load_fresh(reinterpret_cast<const uint2*>(
          act_row + (off + u) * step_k + (WIDE && (u & 1) ? odd_shift : 0)));
    }
    if constexpr (!IL && EVERY && !FP4 && !Tail && WIDE) {  // a pair's two scales in one load
#pragma unroll
      for (int u = 0; u < batch; u += 2) {
        const float2 xa = *reinterpret_cast<const float2*>(sx_a + s + u);
        const float2 xb = *reinterpret_cast<const float2*>(sx_b + s + u);
        r.xa[u] = xa.x;
        r.xa[u + 1] = xa.y;
        r.xb[u] = xb.x;
        r.xb[u + 1] = xb.y;
      }
    } else if constexpr (!IL && EVERY && !FP4 && !Tail) {
#pragma unroll
      for (int u = 0; u < batch; ++u) {
        r.xa[u] = sx_a[s + u];
        r.xb[u] = sx_b[s + u];
      }
    }
  };
  auto load = [&](auto tail, batch_regs<FP4, batch>& r, int s) {
    load_weights(tail, r, s);
    load_acts(tail, r, s);
  };

  float acc[tiles][4], tmp[tiles][4];
#pragma unroll
  for (int m = 0; m < tiles; ++m)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[m][c] = tmp[m][c] = 0.0f;

  // The A fragments of step u of a batch for tile m.
  auto fragments = [](const batch_regs<FP4, batch>& r, int u, int m, std::uint32_t (&a)[4]) {
    if constexpr (FP4) {
      fp4_codes<IL>(r.a[u][m][0], a[0], a[2]);
      fp4_codes<IL>(r.a[u][m][1], a[1], a[3]);
    } else {
      a[0] = r.a[u][m][0].x;
      a[1] = r.a[u][m][1].x;
      a[2] = r.a[u][m][0].y;
      a[3] = r.a[u][m][1].y;
    }
  };
  // Step u of a batch: each tile's fragments handed to mma_tile(m, a, b0, b1).
  auto step_fragments = [&](const batch_regs<FP4, batch>& r, int u, auto&& mma_tile) {
    const std::uint32_t b0 = FP4 ? fp4_act_low(r.b[u].x, r.b[u].y) : r.b[u].x;
    const std::uint32_t b1 = FP4 ? fp4_act_high(r.b[u].x, r.b[u].y) : r.b[u].y;
#pragma unroll
    for (int m = 0; m < tiles; ++m) {
      std::uint32_t a[4];
      fragments(r, u, m, a);
      mma_tile(m, a, b0, b1);
    }
  };

  // Interleaved MXFP4 (every step promotes, as the generic path does for FP4, with the same
  // arithmetic): a run's 4 weight scales per row in one word, and with 32-input activation
  // blocks their 4 scales in one 16-byte load (K % 128 == 0 keeps both aligned); fewer
  // registers than holding every scale as a float.
  auto multiply_il = [&](const batch_regs<FP4, batch>& r, int s) {
    std::uint32_t wpk[tiles][2];
#pragma unroll
    for (int m = 0; m < tiles; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) wpk[m][h] = __ldg(reinterpret_cast<const unsigned*>(ws8[m][h] + s));
    float xa[4], xb[4];
    run_act_scales<EVERY, true>(sx_a, sx_b, s, act_shift, xa, xb);
#pragma unroll
    for (int u = 0; u < batch; ++u)
      step_fragments(r, u, [&](int m, const std::uint32_t(&a)[4], std::uint32_t b0,
                                  std::uint32_t b1) {
        float d[4];
        mma_e4m3_fresh(d, a, b0, b1);
        promote_fp4_step(acc[m], d, wpk[m][0], wpk[m][1], u, xa[u], xb[u]);
      });
  };

  // A whole batch of steps that each promote (32-input scale blocks on both sides): all its
  // scales are read first, with no branch between them and the MMAs.
  auto multiply_every = [&](const batch_regs<FP4, batch>& r, int s) {
    float xa[batch], xb[batch], w_lo[batch][tiles], w_hi[batch][tiles];
#pragma unroll
    for (int u = 0; u < batch; ++u) {
      xa[u] = FP4 ? sx_a[s + u] : r.xa[u];  // FP8: loaded with the batch
      xb[u] = FP4 ? sx_b[s + u] : r.xb[u];
#pragma unroll
      for (int m = 0; m < tiles; ++m) {
        if constexpr (FP4) {
          w_lo[u][m] = fp4_scale_factor(ws8[m][0][s + u]);
          w_hi[u][m] = fp4_scale_factor(ws8[m][FP4 ? 1 : 0][s + u]);
        } else {
          w_lo[u][m] = w_hi[u][m] =
              e8m0_to_f32(std::uint8_t(WIDE ? r.ws[u & ~1] >> (8 * (u & 1)) : r.ws[u]));
        }
      }
    }
#pragma unroll
    for (int u = 0; u < batch; ++u)
      step_fragments(r, u, [&](int m, const std::uint32_t(&a)[4], std::uint32_t b0, std::uint32_t b1) {
        float d[4];
        mma_e4m3_fresh(d, a, b0, b1);
        acc[m][0] += d[0] * (w_lo[u][m] * xa[u]);
        acc[m][1] += d[1] * (w_lo[u][m] * xb[u]);
        acc[m][2] += d[2] * (w_hi[u][m] * xa[u]);
        acc[m][3] += d[3] * (w_hi[u][m] * xb[u]);
      });
  };

  // Any batch (Tail: the last, partial one): accumulate MMAs, promote at block ends.
  auto multiply_generic = [&](auto tail, const batch_regs<FP4, batch>& r, int s) {
    constexpr bool Tail = decltype(tail)::value;
#pragma unroll
    for (int u = 0; u < batch; ++u) {
      const int step = s + u;
      if (Tail && step >= w1) break;
      step_fragments(r, u, [&](int m, const std::uint32_t(&a)[4], std::uint32_t b0,
                                  std::uint32_t b1) { mma_e4m3(tmp[m], a, b0, b1); });
      if (((step + 1) & pmask) != 0) continue;  // ranges hold whole promotion blocks
      // Promote: acc += tmp * weight scale * activation scale (as sm90_block_gemm does).
      const int sx_col = (step * step_k) >> act_shift;
      const float xa = sx_a[sx_col], xb = sx_b[sx_col];
#pragma unroll
      for (int m = 0; m < tiles; ++m) {
        float w_lo, w_hi;
        if constexpr (FP4) {
          w_lo = fp4_scale_factor(ws8[m][0][step]);
          w_hi = fp4_scale_factor(ws8[m][FP4 ? 1 : 0][step]);
        } else {
          const int col = (step * step_k) >> col_shift;
          w_lo = w_hi = ws32 ? ws32[col] : e8m0_to_f32(ws8[m][0][col]);
        }
        acc[m][0] += tmp[m][0] * (w_lo * xa);
        acc[m][1] += tmp[m][1] * (w_lo * xb);
        acc[m][2] += tmp[m][2] * (w_hi * xa);
        acc[m][3] += tmp[m][3] * (w_hi * xb);
#pragma unroll
        for (int c = 0; c < 4; ++c) tmp[m][c] = 0.0f;
      }
    }
  };

  // WIDE: lane t holds half (t % 2) of step t / 2 of each pair; its upper 8 bytes go to lane
  // t ^ 2 for the other step, whose upper 8 bytes it takes: then every lane holds 8 bytes of
  // both steps (at the positions act_row (+ odd_shift) reads). After the loads have landed, at
  // multiply time (warp-uniform: the whole warp multiplies or none of it).
  auto pair_fragments = [&](auto tail, batch_regs<FP4, batch>& r, int s) {
    if constexpr (WIDE == pair_swap) {
      constexpr bool Tail = decltype(tail)::value;
      const bool first = t < 2;
#pragma unroll
      for (int u = 0; u < batch; u += 2) {
        if (Tail && s + u >= w1) break;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint2 own = r.a[u][0][h], up = r.a[u + 1][0][h];
          const uint2 got = make_uint2(__shfl_xor_sync(0xffffffffu, up.x, 2),
                                       __shfl_xor_sync(0xffffffffu, up.y, 2));
          r.a[u][0][h] = first ? own : got;
          r.a[u + 1][0][h] = first ? got : own;
        }
      }
    }
  };

  auto multiply = [&](auto tail, batch_regs<FP4, batch>& r, int s) {
    pair_fragments(tail, r, s);
    if constexpr (IL)  // whole runs only: no tail batch
      multiply_il(r, s);
    else if constexpr (EVERY && !decltype(tail)::value)
      multiply_every(r, s);
    else
      multiply_generic(tail, r, s);
  };

  using full = std::false_type;
  using tail = std::true_type;
  const int full_end = w0 + (w1 - w0) / batch * batch;  // whole batches: no guards
  batch_regs<FP4, batch> r[DEPTH];
  // cfg.early (dense weights: nothing above read the previous kernel's outputs): the first
  // batch's weights are in flight before every thread waits for that kernel.
  const bool early_now = cfg.early && tok0 == first;
  if (early_now) {
    if (active && w0 < full_end) load_weights(full{}, r[0], w0);
    detail::grid_dependency_sync();
  }
  if (active) {
    int s = w0;
    // DEPTH - 1 batches issued ahead; each multiply is preceded by the load DEPTH - 1 ahead.
#pragma unroll
    for (int i = 0; i < DEPTH - 1; ++i) {
      if (w0 + i * batch >= full_end) continue;
      if (i == 0 && early_now)
        load_acts(full{}, r[0], w0);
      else
        load(full{}, r[i], w0 + i * batch);
    }
    while (s < full_end) {
#pragma unroll
      for (int i = 0; i < DEPTH; ++i) {  // unrolled: every r[] index is known at compile time
        if (s >= full_end) break;
        const int ahead = s + (DEPTH - 1) * batch;
        if (ahead < full_end) load(full{}, r[(i + DEPTH - 1) % DEPTH], ahead);
        multiply(full{}, r[i], s);
        s += batch;
      }
    }
    if (s < w1) {
      load(tail{}, r[0], s);
      multiply(tail{}, r[0], s);
    }
  }

  // The warps of a row slice add their K ranges in warp order; the first one goes on. (No
  // early return: with K splits every thread meets the cluster barriers below.)
  bool sums = true;  // this warp holds its row slice's sums
  if (cfg.wk > 1) {
#pragma unroll
    for (int m = 0; m < tiles; ++m)
#pragma unroll
      for (int c = 0; c < 4; ++c) partial[warp][lane][m * 4 + c] = acc[m][c];
    __syncthreads();
    sums = wk_i == 0;
    if (sums) {
#pragma unroll
      for (int m = 0; m < tiles; ++m)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          float sum = 0.0f;
          for (int w = 0; w < cfg.wk; ++w) sum += partial[warp + w][lane][m * 4 + c];
          acc[m][c] = sum;
        }
    }
  }
  // Two K splits run as one thread-block cluster: split 1 hands its sums to split 0 through
  // distributed shared memory, which adds them (a + b: the bits the atomic adds onto a zeroed
  // y gave, in either order) and stores -- no memset of y before the launch.
  if (cfg.k_splits > 1) {
    add_split_pair(acc, &partial[warp][lane][0], split, sums);
    sums = sums && split == 0;
  }
  // (The pair's choice again rather than kept live through the loop.)
  const stream_weight out = stream_weight_of(p, cfg);
  if (!sums || n0 >= out.n) return;
  float* const y = out.second ? p.y_b : p.y;
  const std::int64_t y_stride = out.second ? p.y_stride_b : p.y_stride;
#pragma unroll
  for (int m = 0; m < tiles; ++m)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const std::int64_t r = n0 + 16 * m + g + (c < 2 ? 0 : 8);
      const std::int64_t tk = tok0 + 2 * t + (c & 1);
      if (r >= out.n || tk >= count) continue;
      y[group * p.y_group_offset + (row_begin + tk) * y_stride + r] = acc[m][c];
    }
    }();
    if constexpr (!WALK) break;
  }
}

/// Weight-streaming warps the K split aims for: FP8 32 per SM, MXFP4 16 (fewer warps along K,
/// each streaming a longer contiguous stretch: the V4.1 expert GEMMs 0.47 -> 0.53 of the copy
/// bandwidth on the H200, where FP8's wo_b lost 15% with 16). DEEPINFER_STREAM_WARPS (a
/// positive count) overrides both for tuning runs.
const std::int64_t g_target_warps_env = [] {
  const char* env = std::getenv("DEEPINFER_STREAM_WARPS");
  const long v = env ? std::atol(env) : 0;
  return v > 0 ? std::int64_t(v) : std::int64_t(0);
}();
std::int64_t target_warps_for(const block_gemm_params& p) {
  if (g_target_warps_env > 0) return g_target_warps_env;
  return p.fp4 ? 132 * 16 : 132 * 32;
}

/// Dense GEMMs load their first batch of weights before waiting for the previous kernel
/// (PDL): the weights are constant (never written by the kernel launched just before), so
/// their latency hides behind its tail. Grouped GEMMs (experts) cannot: which groups are
/// non-empty comes from that kernel. DEEPINFER_STREAM_EARLY=0 / set_stream_gemm_early(false)
/// waits first; the same sums either way.
std::atomic<bool> g_early{detail::env_switch("DEEPINFER_STREAM_EARLY", true)};

/// FP8 weights read in 16-byte loads (the kernel's WIDE) where K is a multiple of 64.
/// DEEPINFER_STREAM_WIDE=0 / set_stream_gemm_wide(false): 8-byte fragment loads as before.
std::atomic<bool> g_wide{detail::env_switch("DEEPINFER_STREAM_WIDE", true)};

/// The kernel's pair_mode for p: pairs of steps where K holds them, mixed when both steps of
/// a pair promote together (blocks of at least 64 inputs on both sides).
int pair_mode_for(const block_gemm_params& p) {
  // (Pairs of activation scales load as one 8-byte word: rows and groups start at even ones.)
  const bool even_scales = p.act_scale_stride % 2 == 0 &&
                           (p.act_block <= 0 || (p.act_group_offset / p.act_block) % 2 == 0);
  if (p.fp4 || p.k % (2 * step_k) != 0 || !even_scales || !g_wide.load()) return pair_none;
  return std::min(p.block_cols, p.act_block) >= 2 * step_k ? pair_mixed : pair_swap;
}

/// The launch of p on stream_gemm: grid, warps along K and K splits, from the weight's shape.
struct stream_shape {
  std::int64_t row_blocks = 0, grid_groups = 0, token_tiles = 0;
  bool walk = false;  // groups of more than 8 rows: the blocks walk their token tiles
  stream_config cfg{1, 1, 0, 4, false, false};
};

stream_shape stream_shape_of(const block_gemm_params& p) {
  stream_shape sh;
  const std::int64_t warp_rows = 16 * (p.fp4 ? tiles_of<true>() : tiles_of<false>());
  const std::int64_t total_steps = p.k / step_k;
  const bool compact = p.offsets && p.rows > 0 && p.rows < p.groups;
  sh.grid_groups = compact ? p.rows : p.groups;
  sh.walk = p.max_rows > 8;  // the kernel walks a group's token tiles itself
  sh.token_tiles = 1;
  // Warps wanted along K per 32-row slice, so that about 32 warps per SM stream weights:
  // counted with the weight's groups (at most 8 for experts: a decode step touches a few)
  // and never with the batch.
  const std::int64_t slices = (p.n + warp_rows - 1) / warp_rows;
  const std::int64_t shape_groups = p.offsets ? std::min<std::int64_t>(p.groups, 8) : p.groups;
  const std::int64_t target_warps = target_warps_for(p);
  std::int64_t kw = (target_warps + slices * shape_groups - 1) / (slices * shape_groups);
  kw = std::clamp<std::int64_t>(kw, 1, std::max<std::int64_t>(1, total_steps / align_steps));
  int wk = 1;
  while (wk < 8 && wk * 2 <= kw) wk *= 2;
  // A second block along K for dense GEMMs that still want more (few rows, long K).
  const int k_splits = !p.offsets && kw >= 16 && total_steps >= 16 * align_steps ? 2 : 1;
  std::int64_t per_split = (total_steps + k_splits - 1) / k_splits;
  per_split = (per_split + align_steps - 1) / align_steps * align_steps;
  // Warp ranges in whole batches of 4 steps (and whole promotion blocks: 1, 4 or 8 steps).
  const int promotion = p.fp4 ? 1 : std::max(1, std::min(p.block_cols, p.act_block) / step_k);
  sh.cfg = stream_config{wk,
                         k_splits,
                         int(std::max<std::int64_t>(align_steps, per_split)),
                         std::max(4, promotion),
                         compact,
                         !p.offsets && g_early.load()};
  const std::int64_t rows_per_block = std::int64_t(warps / wk) * warp_rows;
  sh.row_blocks = (p.n + rows_per_block - 1) / rows_per_block;
  return sh;
}

std::atomic<int> g_variant{
    detail::env_mode("DEEPINFER_STREAM_VARIANT", "stream_gemm picks its load batching by shape")};

template <bool FP4, bool IL, int batch, int min_blocks, int WIDE = pair_none>
void launch_variant(const block_gemm_params& p, bool every, bool walk, dim3 grid,
                    const stream_config& cfg, cudaStream_t stream) {
  const dim3 block(warps * 32);
  // K splits (grid z = token tiles x splits, split fastest) run as clusters of the splits.
  const dim3 cluster(1, 1, unsigned(cfg.k_splits));
  auto go = [&](auto kernel) {
    detail::launch_in("stream_gemm", kernel, grid, block, cluster, 0, stream, p, cfg);
  };
  if constexpr (WIDE != pair_mixed) {  // mixed pairs never promote every step
    if (every) {
      if (walk)
        go(stream_gemm_kernel<FP4, IL, true, batch, min_blocks, true, WIDE>);
      else
        go(stream_gemm_kernel<FP4, IL, true, batch, min_blocks, false, WIDE>);
      return;
    }
  }
  if (walk)
    go(stream_gemm_kernel<FP4, IL, false, batch, min_blocks, true, WIDE>);
  else
    go(stream_gemm_kernel<FP4, IL, false, batch, min_blocks, false, WIDE>);
}

/// FP8 launches in pair_mode `mode` (pair_mode_for(p); never mixed with `every`: its blocks
/// are 32 inputs).
template <int batch, int min_blocks>
void launch_fp8(const block_gemm_params& p, int mode, bool every, bool walk, dim3 grid,
                const stream_config& cfg, cudaStream_t stream) {
  if (mode == pair_swap)
    launch_variant<false, false, batch, min_blocks, pair_swap>(p, every, walk, grid, cfg, stream);
  else if (mode == pair_mixed)
    launch_variant<false, false, batch, min_blocks, pair_mixed>(p, every, walk, grid, cfg, stream);
  else
    launch_variant<false, false, batch, min_blocks>(p, every, walk, grid, cfg, stream);
}

}  // namespace

void check_interleaved(const block_gemm_params& p, const char* what) {
  DI_CHECK(!p.fp4_interleaved ||
               (p.fp4 && p.k % (2 * il_run_bytes) == 0 && p.n % il_stripe_rows == 0),
           "{}: interleaved weights are MXFP4 with K a multiple of {} and outputs of {}, got K "
           "{}, {} outputs",
           what, 2 * il_run_bytes, il_stripe_rows, p.k, p.n);
}

void set_stream_gemm_early(bool on) {
  g_early = on;
}
bool get_stream_gemm_early() {
  return g_early;
}

void set_stream_gemm_wide(bool on) {
  g_wide = on;
}
bool get_stream_gemm_wide() {
  return g_wide;
}

void set_stream_gemm_variant(int variant) {
  DI_CHECK(variant >= -1 && variant <= 1,
           "stream_gemm variant {}: expected -1 (by shape), 0 (4 steps x 2 blocks per SM) or 1 "
           "(2 steps x 3 blocks per SM)",
           variant);
  g_variant = variant;
}

namespace {

/// The FP8 load batching launch_stream_gemm picks: 1 = (2 steps, 3 blocks per SM), 0 = (4, 2).
/// `mode`: pair_mode_for(p), worked out once per launch by the caller.
int variant_for(const block_gemm_params& p, int mode) {
  const int forced = g_variant;
  if (p.fp4) return 0;
  // 2 x 3 for long K unless the grid is many waves anyway: V4.1's Engram wkv (N25600 K6144)
  // took 62.6 us at 4 x 2 and 77.6 at 2 x 3 (H200, session 13), wo_b (N5120 K8192) the reverse.
  // Mixed pairs (V4's blocks) hold fewer registers per batch: 4 x 2 there (V4 wo_b N4096 K8192
  // 18.7 us at 4 x 2, 21.2 at 2 x 3; 8-byte loads 20.6 / 23.5; session 21).
  const bool long_k = p.k >= 4096 && p.n < 16384;  // outputs per group
  return forced >= 0 ? forced : (long_k && mode != pair_mixed ? 1 : 0);
}

}  // namespace

stream_gemm_plan plan_stream_gemm(const block_gemm_params& p) {
  const stream_shape sh = stream_shape_of(p);
  const int mode = pair_mode_for(p);
  const int v = variant_for(p, mode);
  return {sh.cfg.wk,      sh.cfg.k_splits,  sh.cfg.steps_per_split, sh.cfg.warp_align,
          v == 1 ? 2 : 4, v == 1 ? 3 : 2,   sh.row_blocks,          sh.grid_groups,
          sh.token_tiles, mode != pair_none};
}

block_gemm_params dense_pair_part(const block_gemm_params& p, bool second) {
  block_gemm_params b = p;
  if (second) {
    b.weight = p.weight_b;
    b.wscale_e8m0 = p.wscale_e8m0_b;
    b.wscale_f32 = p.wscale_f32_b;
    b.n = p.n_b;
    b.y = p.y_b;
    b.y_stride = p.y_stride_b;
    b.y_elements = 0;
  }
  b.weight_b = nullptr;
  b.wscale_e8m0_b = nullptr;
  b.wscale_f32_b = nullptr;
  b.y_b = nullptr;
  b.n_b = 0;
  b.y_stride_b = 0;
  return b;
}

namespace {

std::atomic<bool> g_pair{detail::env_switch("DEEPINFER_STREAM_PAIR", true)};

}  // namespace

void set_stream_gemm_pair(bool on) {
  g_pair = on;
}
bool get_stream_gemm_pair() {
  return g_pair;
}

bool stream_gemm_pair_fits(const block_gemm_params& p) {
  if (!g_pair || p.n_b <= 0 || !p.weight_b || !p.y_b || p.fp4 || p.offsets || p.groups != 1 ||
      p.max_rows > 8 || p.n <= 0)
    return false;
  if ((p.wscale_e8m0 == nullptr) != (p.wscale_e8m0_b == nullptr)) return false;
  const block_gemm_params a = dense_pair_part(p, false), b = dense_pair_part(p, true);
  const stream_gemm_plan pa = plan_stream_gemm(a), pb = plan_stream_gemm(b);
  const bool same = pa.warps_along_k == pb.warps_along_k && pa.k_splits == pb.k_splits &&
                    pa.steps_per_split == pb.steps_per_split && pa.warp_align == pb.warp_align &&
                    pa.batch_steps == pb.batch_steps && pa.blocks_per_sm == pb.blocks_per_sm &&
                    pa.wide_loads == pb.wide_loads && pa.token_tiles == pb.token_tiles &&
                    pair_mode_for(a) == pair_mode_for(b);  // (batching: the variant's)
  // The first weight's rows fill whole row blocks: no block straddles the two.
  const std::int64_t rows_per_block = std::int64_t(warps / pa.warps_along_k) * 16;
  return same && p.n % rows_per_block == 0;
}

void launch_stream_gemm(const block_gemm_params& p, cudaStream_t stream) {
  check_interleaved(p, "stream_gemm");
  stream_shape sh = stream_shape_of(p);
  if (p.n_b > 0) {  // a dense pair (stream_gemm_pair_fits): both weights' row blocks
    DI_CHECK(stream_gemm_pair_fits(p), "stream_gemm: this pair of weights cannot share a launch");
    sh.cfg.pair_blocks = int(sh.row_blocks);
    sh.row_blocks += stream_shape_of(dense_pair_part(p, true)).row_blocks;
  }
  const dim3 grid(unsigned(sh.row_blocks), unsigned(sh.grid_groups),
                  unsigned(sh.token_tiles * sh.cfg.k_splits));
  // 32-input scale blocks on both sides (and e8m0 weight scales): every step promotes.
  const bool every = p.act_block == 32 && p.wscale_e8m0 && (p.fp4 || p.block_cols == 32);
  // FP8: batches of 4 steps at 2 blocks per SM, or of 2 at 3 (fewer registers, more warps):
  // the second measured faster with long K on the H200 (wo_b N5120 K8192: 0.49 vs 0.38 of the
  // copy bandwidth; shared_w1 K5120: 0.25 vs 0.20), the first with short K (wq_b K1280: 0.47
  // vs 0.42). Both add in the same order: the same bits. MXFP4: 4 x 2 (0.36 vs 0.31).
  if (p.fp4 && p.fp4_interleaved)
    launch_variant<true, true, 4, 2>(p, every, sh.walk, grid, sh.cfg, stream);
  else if (p.fp4)
    launch_variant<true, false, 4, 2>(p, every, sh.walk, grid, sh.cfg, stream);
  else if (const int mode = pair_mode_for(p); variant_for(p, mode) == 1)
    launch_fp8<2, 3>(p, mode, every, sh.walk, grid, sh.cfg, stream);
  else
    launch_fp8<4, 2>(p, mode, every, sh.walk, grid, sh.cfg, stream);
}

}  // namespace di::cuda
