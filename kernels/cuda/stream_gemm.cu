// stream_gemm: block_gemm's decode path, for token tiles of at most 8 rows per group (every
// dense decode GEMM up to batch 8, and the routed experts of a decode step). Such a GEMM reads
// each weight byte once and does almost no arithmetic with it, so all that counts is keeping
// enough weight bytes in flight. Each warp owns 32 weight rows (two m16 MMA tiles) and a range
// of K, and loads its weight fragments straight from global memory into registers -- no shared
// memory, no block barriers in the loop -- in batches of 4 MMA steps, the next batch issued
// before the current one is multiplied (two batches in flight: 8 KB per warp for FP8). The
// fragment a lane loads is the one its MMA needs: for FP8 the 8 bytes 8t..8t+7 of a 32-input
// step of rows g and g+8, for MXFP4 the 4 bytes 4t..4t+3 of a 16-byte step (decoded to e4m3 in
// registers as in sm90_block_gemm); the activations take the same permutation. Warps of a
// block that share rows split K and add their sums in warp order through shared memory
// (deterministic); dense GEMMs with few rows and long K also split K across two blocks, whose
// fp32 atomic adds onto the zeroed output commute exactly. Every split decision depends on the
// weight's shape only, never on the batch, so a token's result does not change with the batch
// (up to 8 rows per group, where this kernel serves).
#include "kernels/cuda/gemm_kernels.hpp"

#include "kernels/cuda/block_gemm_common.cuh"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/dtype.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string_view>

namespace di::cuda {

namespace {

using namespace gemm_detail;

constexpr int warps = 8;
constexpr int batch = 4;              // MMA steps (32 inputs each) per load batch
constexpr int step_k = 32;
constexpr int align_steps = 8;  // a warp's K range starts at a multiple of 8 steps (256 inputs)

struct stream_config {
  int tiles;            ///< m16 tiles per warp (1 or 2)
  int wk;               ///< warps of a block along K (1, 2, 4 or 8); 8 / wk row slices
  int k_splits;         ///< blocks along K (1 or 2; 2 adds with atomics into a zeroed y)
  int steps_per_split;  ///< multiple of align_steps
  bool compact;         ///< grid row y serves the y-th non-empty group
};

/// 8 bytes, read-only, not kept in L1 (each weight byte is read once), with the next 256 bytes
/// of the row prefetched into L2 (the warp's next batches).
__device__ __forceinline__ uint2 load_stream8(const std::uint8_t* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];\n"
               : "=r"(v.x), "=r"(v.y)
               : "l"(p));
  return v;
}
/// 4 bytes of an MXFP4 row; kept in L1: the other half of the 32-byte sector is the next step.
__device__ __forceinline__ std::uint32_t load_stream4(const std::uint8_t* p) {
  std::uint32_t v;
  asm volatile("ld.global.nc.L2::256B.u32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}

template <bool FP4>
struct weight_frag {
  using type = uint2;  // FP8: (a0 | a2) of one row
};
template <>
struct weight_frag<true> {
  using type = std::uint32_t;  // FP4: 8 nibbles of one row
};

/// One load batch: the A fragments of `batch` steps (per tile, rows g and g + 8) and the B
/// fragments (this lane's token g, inputs 8t..8t+7 of each step).
template <bool FP4, int tiles>
struct batch_regs {
  typename weight_frag<FP4>::type a[batch][tiles][2];
  uint2 b[batch];
};

/// tiles: m16 MMA tiles per warp (16 or 32 weight rows; two share each activation fragment
/// but need about 176 registers, so one block per SM instead of two).
template <bool FP4, int tiles>
__global__ void __launch_bounds__(warps * 32, tiles == 1 ? 2 : 1)
    stream_gemm_kernel(block_gemm_params p, stream_config cfg) {
  constexpr int warp_rows = 16 * tiles;
  __shared__ float partial[warps][32][tiles * 4];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const int group = cfg.compact ? nth_nonempty_group<warps>(p.offsets, p.groups, int(blockIdx.y))
                                : int(blockIdx.y);
  if (group < 0) return;  // fewer non-empty groups than grid rows (uniform over the block)
  const int split = int(blockIdx.z % unsigned(cfg.k_splits));
  const std::int64_t tile = blockIdx.z / unsigned(cfg.k_splits);
  std::int64_t row_begin = 0, count = p.rows;
  if (p.offsets) {
    row_begin = p.offsets[group];
    count = p.offsets[group + 1] - row_begin;
  }
  const std::int64_t tok0 = tile * 8;
  if (tok0 >= count) return;  // uniform over the block

  // This warp's rows and K range (steps, global within K).
  const int wk_i = warp % cfg.wk, wr_i = warp / cfg.wk;
  const int total_steps = int(p.k / step_k);
  const int split_begin = split * cfg.steps_per_split;
  const int split_end = min(total_steps, split_begin + cfg.steps_per_split);
  int per_warp = (split_end - split_begin + cfg.wk - 1) / cfg.wk;
  per_warp = (per_warp + align_steps - 1) / align_steps * align_steps;
  const int w0 = split_begin + wk_i * per_warp;
  const int w1 = min(split_end, w0 + per_warp);
  const std::int64_t n0 = (std::int64_t(blockIdx.x) * (warps / cfg.wk) + wr_i) * warp_rows;
  const bool active = n0 < p.n && w0 < w1;

  const std::int64_t row_bytes = FP4 ? p.k / 2 : p.k;
  constexpr int step_bytes = FP4 ? step_k / 2 : step_k;
  const std::uint8_t* wrow[tiles][2];  // this lane's weight rows, at its fragment's column
  // Where their scales start: FP4 one row each; FP8 one row block per tile (rows g and g + 8
  // share it: FP8 scale blocks span a multiple of 16 rows, and 16-row tiles start aligned).
  std::int64_t scale_at[tiles][FP4 ? 2 : 1];
#pragma unroll
  for (int m = 0; m < tiles; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::int64_t r = group * p.n + min(n0 + 16 * m + 8 * h + g, p.n - 1);
      wrow[m][h] = p.weight + r * row_bytes + (FP4 ? 4 * t : 8 * t);
      if (FP4)
        scale_at[m][FP4 ? h : 0] = r * p.wscale_cols;
      else if (h == 0)
        scale_at[m][0] = (r / p.block_rows) * p.wscale_cols;
    }
  const std::int64_t col0 = group * p.act_group_offset;
  const std::int64_t last_tok = count - tok0 - 1;  // rows past the group read its last one
  auto tile_row = [&](int i) { return row_begin + tok0 + (i < last_tok ? i : last_tok); };
  const bool tok_ok = tok0 + g < count;
  const std::uint8_t* act_row = p.act + tile_row(g) * p.act_stride + col0 + 8 * t;
  const int act_shift = log2_int(p.act_block);
  const int pmask = (FP4 ? 1 : max(1, min(p.block_cols, p.act_block) / step_k)) - 1;
  const bool sx_ok[2] = {tok0 + 2 * t < count, tok0 + 2 * t + 1 < count};
  const float* sx_row = p.act_scale + tile_row(2 * t) * p.act_scale_stride;  // tokens 2t, 2t + 1
  const std::int64_t sx_next = (tile_row(2 * t + 1) - tile_row(2 * t)) * p.act_scale_stride;
  const int col_shift = FP4 ? 0 : log2_int(p.block_cols);

  auto load = [&](batch_regs<FP4, tiles>& r, int s) {
#pragma unroll
    for (int u = 0; u < batch; ++u) {
      const int step = s + u;
      const bool ok = step < w1;
#pragma unroll
      for (int m = 0; m < tiles; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const std::uint8_t* src = wrow[m][h] + std::int64_t(step) * step_bytes;
          if constexpr (FP4)
            r.a[u][m][h] = ok ? load_stream4(src) : 0u;
          else
            r.a[u][m][h] = ok ? load_stream8(src) : make_uint2(0, 0);
        }
      r.b[u] = ok && tok_ok
                   ? __ldg(reinterpret_cast<const uint2*>(act_row + std::int64_t(step) * step_k))
                   : make_uint2(0, 0);
    }
  };

  float acc[tiles][4], tmp[tiles][4];
#pragma unroll
  for (int m = 0; m < tiles; ++m)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[m][c] = tmp[m][c] = 0.0f;

  auto multiply = [&](const batch_regs<FP4, tiles>& r, int s) {
#pragma unroll
    for (int u = 0; u < batch; ++u) {
      const int step = s + u;
      if (step >= w1) break;
      std::uint32_t b0 = r.b[u].x, b1 = r.b[u].y;
      if constexpr (FP4) {
        b0 = fp4_act_low(r.b[u].x, r.b[u].y);
        b1 = fp4_act_high(r.b[u].x, r.b[u].y);
      }
#pragma unroll
      for (int m = 0; m < tiles; ++m) {
        std::uint32_t a[4];
        if constexpr (FP4) {
          a[0] = fp4_low(r.a[u][m][0]);
          a[1] = fp4_low(r.a[u][m][1]);
          a[2] = fp4_high(r.a[u][m][0]);
          a[3] = fp4_high(r.a[u][m][1]);
        } else {
          a[0] = r.a[u][m][0].x;
          a[1] = r.a[u][m][1].x;
          a[2] = r.a[u][m][0].y;
          a[3] = r.a[u][m][1].y;
        }
        mma_e4m3(tmp[m], a, b0, b1);
      }
      if (((step + 1) & pmask) != 0 && step + 1 != w1) continue;
      // Promote: acc += tmp * weight scale * activation scale (as sm90_block_gemm does).
      const int sx_col = int((col0 + std::int64_t(step) * step_k) >> act_shift);
      const float sx_a = sx_ok[0] ? sx_row[sx_col] : 0.0f;
      const float sx_b = sx_ok[1] ? sx_row[sx_next + sx_col] : 0.0f;
#pragma unroll
      for (int m = 0; m < tiles; ++m) {
        float ws[2];
        if constexpr (FP4) {
#pragma unroll
          for (int h = 0; h < 2; ++h)
            ws[h] = fp4_scale_factor(p.wscale_e8m0[scale_at[m][FP4 ? h : 0] + step]);
        } else {
          const std::int64_t at = scale_at[m][0] + ((step * step_k) >> col_shift);
          ws[0] = ws[1] = p.wscale_e8m0 ? e8m0_to_f32(p.wscale_e8m0[at]) : p.wscale_f32[at];
        }
        acc[m][0] += tmp[m][0] * (ws[0] * sx_a);
        acc[m][1] += tmp[m][1] * (ws[0] * sx_b);
        acc[m][2] += tmp[m][2] * (ws[1] * sx_a);
        acc[m][3] += tmp[m][3] * (ws[1] * sx_b);
#pragma unroll
        for (int c = 0; c < 4; ++c) tmp[m][c] = 0.0f;
      }
    }
  };

  if (active) {
    batch_regs<FP4, tiles> r0, r1;
    load(r0, w0);
    for (int s = w0; s < w1; s += 2 * batch) {
      if (s + batch < w1) load(r1, s + batch);
      multiply(r0, s);
      if (s + batch >= w1) break;
      if (s + 2 * batch < w1) load(r0, s + 2 * batch);
      multiply(r1, s + batch);
    }
  }

  // The warps of a row slice add their K ranges in warp order; the first one stores.
  if (cfg.wk > 1) {
#pragma unroll
    for (int m = 0; m < tiles; ++m)
#pragma unroll
      for (int c = 0; c < 4; ++c) partial[warp][lane][m * 4 + c] = acc[m][c];
    __syncthreads();
    if (wk_i != 0) return;
#pragma unroll
    for (int m = 0; m < tiles; ++m)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        float sum = 0.0f;
        for (int w = 0; w < cfg.wk; ++w) sum += partial[warp + w][lane][m * 4 + c];
        acc[m][c] = sum;
      }
  }
  if (n0 >= p.n) return;
#pragma unroll
  for (int m = 0; m < tiles; ++m)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const std::int64_t r = n0 + 16 * m + g + (c < 2 ? 0 : 8);
      const std::int64_t tk = tok0 + 2 * t + (c & 1);
      if (r >= p.n || tk >= count) continue;
      float* out = p.y + group * p.y_group_offset + (row_begin + tk) * p.y_stride + r;
      if (cfg.k_splits > 1)
        atomicAdd(out, acc[m][c]);
      else
        *out = acc[m][c];
    }
}

/// The launch of p on stream_gemm: grid, warps along K and K splits, from the weight's shape.
struct stream_shape {
  std::int64_t row_blocks = 0, grid_groups = 0, token_tiles = 0;
  stream_config cfg{1, 1, 1, 0, false};
};

std::atomic<int> g_tiles{[] {
  const char* env = std::getenv("DEEPINFER_STREAM_TILES");
  return env && std::string_view(env) == "2" ? 2 : 1;
}()};

stream_shape stream_shape_of(const block_gemm_params& p) {
  stream_shape sh;
  const int tiles = g_tiles;
  const std::int64_t warp_rows = 16 * tiles;
  const std::int64_t total_steps = p.k / step_k;
  const bool compact = p.offsets && p.rows > 0 && p.rows < p.groups;
  sh.grid_groups = compact ? p.rows : p.groups;
  sh.token_tiles = (p.max_rows + 7) / 8;
  // Warps wanted along K per 32-row slice, so that about 32 warps per SM stream weights:
  // counted with the weight's groups (at most 8 for experts: a decode step touches a few)
  // and never with the batch.
  const std::int64_t slices = (p.n + warp_rows - 1) / warp_rows;
  const std::int64_t shape_groups = p.offsets ? std::min<std::int64_t>(p.groups, 8) : p.groups;
  constexpr std::int64_t target_warps = 132 * 32;
  std::int64_t kw = (target_warps + slices * shape_groups - 1) / (slices * shape_groups);
  kw = std::clamp<std::int64_t>(kw, 1, std::max<std::int64_t>(1, total_steps / align_steps));
  int wk = 1;
  while (wk < 8 && wk * 2 <= kw) wk *= 2;
  // A second block along K for dense GEMMs that still want more (few rows, long K).
  const int k_splits = !p.offsets && kw >= 16 && total_steps >= 16 * align_steps ? 2 : 1;
  std::int64_t per_split = (total_steps + k_splits - 1) / k_splits;
  per_split = (per_split + align_steps - 1) / align_steps * align_steps;
  sh.cfg = stream_config{tiles, wk, k_splits, int(std::max<std::int64_t>(align_steps, per_split)),
                         compact};
  const std::int64_t rows_per_block = std::int64_t(warps / wk) * warp_rows;
  sh.row_blocks = (p.n + rows_per_block - 1) / rows_per_block;
  return sh;
}

}  // namespace

void set_stream_gemm_tiles(int tiles) {
  g_tiles = tiles == 2 ? 2 : 1;
}
int get_stream_gemm_tiles() {
  return g_tiles;
}

void launch_stream_gemm(const block_gemm_params& p, cudaStream_t stream) {
  const stream_shape sh = stream_shape_of(p);
  if (sh.cfg.k_splits > 1)  // atomic adds need a zeroed y
    CUDA_CHECK(cudaMemsetAsync(p.y, 0, std::size_t(p.y_elements) * sizeof(float), stream));
  const dim3 grid(unsigned(sh.row_blocks), unsigned(sh.grid_groups),
                  unsigned(sh.token_tiles * sh.cfg.k_splits));
  if (sh.cfg.tiles == 2) {
    if (p.fp4)
      stream_gemm_kernel<true, 2><<<grid, warps * 32, 0, stream>>>(p, sh.cfg);
    else
      stream_gemm_kernel<false, 2><<<grid, warps * 32, 0, stream>>>(p, sh.cfg);
  } else {
    if (p.fp4)
      stream_gemm_kernel<true, 1><<<grid, warps * 32, 0, stream>>>(p, sh.cfg);
    else
      stream_gemm_kernel<false, 1><<<grid, warps * 32, 0, stream>>>(p, sh.cfg);
  }
  CUDA_CHECK_LAUNCH("stream_gemm");
}

}  // namespace di::cuda
