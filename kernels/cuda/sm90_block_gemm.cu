// sm90_block_gemm: y = x W^T for FP8 e4m3 weights with block scales and packed MXFP4 weights,
// both read in their stored format, on the FP8 tensor cores (mma.sync m16n8k32 e4m3, fp32
// accumulate). Activations come FP8-quantized per block (act_quant) and sit in shared memory;
// each warp owns 16 weight rows and up to 64 tokens and streams its rows through a 3-stage
// cp.async pipeline (16-byte copies, one 128-byte line per 8 lanes) into shared memory, from
// where the MMA fragments are read without bank conflicts (FP4 nibbles become e4m3 codes of
// value * 2^-6 with three bit operations). The MMA result is promoted into fp32 with weight
// scale x activation scale once per scale block (every 32 inputs for MXFP4). Decode shapes
// split K across blocks (atomic fp32 adds) so that the whole GPU streams the weights.
#include "kernels/cuda/basic_kernels.hpp"
#include "kernels/cuda/device_memory.hpp"
#include "kernels/cuda/gemm_kernels.hpp"
#include "kernels/cuda/launch.cuh"

#include "kernels/cuda/block_gemm_common.cuh"

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/kernel_attributes.hpp"
#include "kernels/dtype.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string_view>

namespace di::cuda {

namespace {

using namespace gemm_detail;

constexpr int num_warps = 4;
constexpr int rows_per_warp = 16;
constexpr int rows_per_block = num_warps * rows_per_warp;
constexpr int step_k = 32;  // inputs per MMA
// Weight stages per warp (two in flight while one computes) and bytes of each row per stage
// (FP8: 4 steps, FP4: 8). Deeper decode pipelines (6 x 128, 4 x 256, 8 x 256) measured slower
// on the H200 (fewer blocks per SM; session 5).
constexpr int num_stages = 3;
constexpr int stage_bytes = 128;
constexpr int act_pad = 32;  // bytes per token row: spreads the B loads over the banks
// Shared memory for the activation tile: small for decode tiles so that five blocks fit per SM,
// large for many-token tiles (registers allow two blocks per SM there anyway), whose staging is
// a synchronous pass per chunk: fewer, longer chunks expose its latency less often.
constexpr int act_budget(int nt) {
  return nt <= 2 ? 8 * 1024 : 64 * 1024;
}

/// Weight formats of the kernel: FP8, MXFP4 as stored, MXFP4 interleaved
/// (weight_matrix::interleaved).
enum weight_fmt : int { fmt_fp8 = 0, fmt_fp4 = 1, fmt_fp4_il = 2 };

/// Shared-memory row stride of a weight stage: FP8 fragments are 8-byte loads at 32-byte
/// steps (stride = 8 mod 32 words), FP4 ones 4-byte loads at 16-byte steps (4 mod 32 words);
/// interleaved FP4 stages are the pieces as stored (2 runs x 2 halves x 32 lanes x 16 bytes,
/// the same 2 KB), each lane reading its own consecutive 16 bytes.
template <int FMT>
constexpr int weight_stride() {
  return FMT == fmt_fp4_il ? stage_bytes
         : FMT == fmt_fp4  ? stage_bytes + 16
                           : stage_bytes + 32;
}
template <bool FP4>
constexpr int stage_steps() {
  return FP4 ? stage_bytes / 16 : stage_bytes / 32;
}

__device__ __forceinline__ void cp_async16(void* smem, const void* global) {
  const unsigned dst = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(global));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

struct split_config {
  int k_splits;
  std::int64_t steps_per_split;
  int chunk_steps;  ///< activation inputs staged per pass / 32 (a multiple of 8)
  bool compact;     ///< grid row y serves the y-th non-empty group (see nth_nonempty_group)
};

/// Where a warp's two fragment rows (lo = g, hi = g + 8) find their weight scales; all index
/// arithmetic of the hot loop is 32-bit shifts and adds (a 64-bit division costs ~60 ops).
struct scale_rows {
  const std::uint8_t* e8m0_lo;  // FP4: the row's e8m0 scales from the split's first step;
  const std::uint8_t* e8m0_hi;  // FP8: the row block's scales (e8m0), or nullptr
  const float* f32_lo;          // FP8 with fp32 scales
  const float* f32_hi;
  int col_shift;  // FP8: step -> scale column = (s_begin + step) * 32 >> this
  int s_begin;
};

/// The weight scales a stage promotes with (factors; FP4: times 2^6), loaded one stage ahead.
template <bool FP4>
struct stage_scales {
  float lo[stage_steps<FP4>()];
  float hi[stage_steps<FP4>()];
};

template <bool FP4>
__device__ __forceinline__ void load_scales(const scale_rows& sr, int st, int total, int pmask,
                                            stage_scales<FP4>& sc) {
#pragma unroll
  for (int u = 0; u < stage_steps<FP4>(); ++u) {
    sc.lo[u] = sc.hi[u] = 0.0f;
    const int step = st + u;
    if (step >= total || (((step + 1) & pmask) != 0 && step + 1 != total)) continue;
    if (FP4) {
      sc.lo[u] = fp4_scale_factor(sr.e8m0_lo[step]);
      sc.hi[u] = fp4_scale_factor(sr.e8m0_hi[step]);
    } else {
      const int col = ((sr.s_begin + step) * step_k) >> sr.col_shift;
      sc.lo[u] = sr.e8m0_lo ? e8m0_to_f32(sr.e8m0_lo[col]) : sr.f32_lo[col];
      sc.hi[u] = sr.e8m0_hi ? e8m0_to_f32(sr.e8m0_hi[col]) : sr.f32_hi[col];
    }
  }
}

/// store(u, load(u)) for u in [0, count) over the block's threads, in rounds of Batch
/// independent loads per thread (a plain loop waits for each load before issuing the next).
template <int Batch, typename T, typename Load, typename Store>
__device__ __forceinline__ void stage_rounds(int count, Load load, Store store) {
  for (int base = int(threadIdx.x); base < count; base += Batch * int(blockDim.x)) {
    T v[Batch];
#pragma unroll
    for (int i = 0; i < Batch; ++i) {
      const int u = base + i * int(blockDim.x);
      if (u < count) v[i] = load(u);
    }
#pragma unroll
    for (int i = 0; i < Batch; ++i) {
      const int u = base + i * int(blockDim.x);
      if (u < count) store(u, v[i]);
    }
  }
}

template <int NT, int FMT>
__global__ void __launch_bounds__(num_warps * 32, NT <= 2 ? 4 : 1)
    block_gemm_kernel(block_gemm_params p, split_config cfg) {
  detail::grid_dependency_sync();
  constexpr bool FP4 = FMT != fmt_fp8;
  // [num_warps][num_stages][16][weight_stride] weight stages, then [NT * 8][chunk + pad]
  // activation codes, then [NT * 8][chunk / act_block] their scales.
  extern __shared__ __align__(16) std::uint8_t smem[];
  constexpr int wstride = weight_stride<FMT>();
  constexpr int ssteps = stage_steps<FP4>();
  constexpr int step_bytes = FP4 ? step_k / 2 : step_k;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const block_site site = locate_block<num_warps>(p, cfg.compact, cfg.k_splits);
  if (site.group < 0) return;  // fewer non-empty groups than grid rows (uniform over the block)
  const int group = site.group, split = site.split;
  const std::int64_t tile = site.tile, row_begin = site.row_begin, count = site.count;
  const std::int64_t tok0 = tile * NT * 8;
  const int total_steps = int(p.k / step_k);
  const int s_begin = split * int(cfg.steps_per_split);
  const int total = min(total_steps, s_begin + int(cfg.steps_per_split)) - s_begin;  // local steps
  if (tok0 >= count || total <= 0) return;  // uniform over the block

  const std::int64_t n0 = std::int64_t(blockIdx.x) * rows_per_block + warp * rows_per_warp;
  const bool warp_active = n0 < p.n;
  const std::int64_t r_lo = n0 + g, r_hi = n0 + g + 8;
  const std::int64_t row_lo = group * p.n + min(r_lo, p.n - 1);  // rows of the stacked matrix
  const std::int64_t row_hi = group * p.n + min(r_hi, p.n - 1);
  const std::int64_t row_bytes = FP4 ? p.k / 2 : p.k;
  const int pmask = (FP4 ? 1 : max(1, min(p.block_cols, p.act_block) / step_k)) - 1;
  const int act_shift = log2_int(p.act_block);
  std::uint8_t* wbuf = smem + warp * num_stages * rows_per_warp * wstride;
  std::uint8_t* act_tile = smem + num_warps * num_stages * rows_per_warp * wstride;
  const int stride = cfg.chunk_steps * step_k + act_pad;
  const int sx_per_tok = (cfg.chunk_steps * step_k) >> act_shift;
  float* sx_tile = reinterpret_cast<float*>(act_tile + NT * 8 * stride);
  const std::int64_t col0 = group * p.act_group_offset;  // this group's first input column
  const std::uint8_t* act_base = p.act + col0 + std::int64_t(s_begin) * step_k;

  scale_rows sr{};
  sr.s_begin = s_begin;
  if (FP4) {
    sr.e8m0_lo = p.wscale_e8m0 + row_lo * p.wscale_cols + s_begin;
    sr.e8m0_hi = p.wscale_e8m0 + row_hi * p.wscale_cols + s_begin;
  } else {
    const std::int64_t b_lo = (row_lo / p.block_rows) * p.wscale_cols;
    const std::int64_t b_hi = (row_hi / p.block_rows) * p.wscale_cols;
    sr.e8m0_lo = p.wscale_e8m0 ? p.wscale_e8m0 + b_lo : nullptr;
    sr.e8m0_hi = p.wscale_e8m0 ? p.wscale_e8m0 + b_hi : nullptr;
    sr.f32_lo = p.wscale_f32 ? p.wscale_f32 + b_lo : nullptr;
    sr.f32_hi = p.wscale_f32 ? p.wscale_f32 + b_hi : nullptr;
    sr.col_shift = log2_int(p.block_cols);
  }

  // Lane l copies 16 bytes of row (i * 32 + l) / 8 per instruction: 8 lanes per 128-byte line.
  // Interleaved FP4 (whole 32-row stripes): copy i is run i / 2 of the stage, piece (m, h = i %
  // 2) of this warp's tile m: each lane copies the fragments it reads itself, 512 contiguous
  // bytes per warp instruction; a stage (2 runs) advances 32x the row-major stage bytes.
  constexpr int copies = rows_per_warp * stage_bytes / 16 / 32;
  constexpr int src_scale = FMT == fmt_fp4_il ? 32 : 1;
  const std::uint8_t* src[copies];
  int dst_off[copies], col_off[copies];
#pragma unroll
  for (int i = 0; i < copies; ++i) {
    if constexpr (FMT == fmt_fp4_il) {
      const int run = i / 2, h = i % 2, m = int((n0 / 16) % 2);
      src[i] = p.weight + (group * p.n + n0 - 16 * m) * row_bytes +
               (std::int64_t(s_begin) / 4 + run) * 2048 + ((2 * m + h) * 32 + lane) * 16;
      dst_off[i] = (2 * run + h) * 512 + lane * 16;
      col_off[i] = run * 64;
    } else {
      const int idx = i * 32 + lane, r = idx / 8, c = idx % 8;
      const std::int64_t row = group * p.n + min(n0 + r, p.n - 1);
      src[i] = p.weight + row * row_bytes + std::int64_t(s_begin) * step_bytes + c * 16;
      dst_off[i] = r * wstride + c * 16;
      col_off[i] = c * 16;
    }
  }
  const int bytes_end = total * step_bytes;
  auto issue = [&](int si) {
    const int byte0 = si * stage_bytes;
    if (warp_active && byte0 < bytes_end) {
      std::uint8_t* dst = wbuf + (si % num_stages) * rows_per_warp * wstride;
#pragma unroll
      for (int i = 0; i < copies; ++i)
        if (byte0 + col_off[i] < bytes_end)
          cp_async16(dst + dst_off[i], src[i] + std::int64_t(byte0) * src_scale);
    }
    cp_async_commit();  // possibly empty: keeps the group count uniform
  };

  float acc[NT][4], tmp[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[j][c] = tmp[j][c] = 0.0f;

#pragma unroll
  for (int i = 0; i < num_stages - 1; ++i) issue(i);
  stage_scales<FP4> cur, next;
  if (warp_active) load_scales<FP4>(sr, 0, total, pmask, cur);
  int c0 = 0, c1 = 0;  // the staged activation chunk, local steps
  for (int si = 0;; ++si) {
    const int st = si * ssteps;
    if (st >= total) break;
    if (st >= c1) {  // next activation chunk (uniform over the block)
      c0 = st;
      c1 = min(total, c0 + cfg.chunk_steps);
      const int units_per_row = (c1 - c0) * step_k / 16;
      const std::int64_t sx0 = (col0 + std::int64_t(s_begin + c0) * step_k) >> act_shift;
      const int sx_count = ((c1 - c0) * step_k) >> act_shift;
      __syncthreads();
      // Staged in rounds of independent loads per thread (stage_rounds): V4.1's wq_b at M=64
      // 101 -> 88 us on the H200 against a load-then-store loop, still a ninth of the copy
      // bandwidth: the short K range of each block, not the staging, holds these tiles back.
      constexpr int batch = NT <= 2 ? 4 : 8;  // 4: no spills under the 4-blocks-per-SM bound
      stage_rounds<batch, uint4>(
          NT * 8 * units_per_row,
          [&](int u) {
            const int tok = u / units_per_row;
            if (tok0 + tok >= count) return make_uint4(0, 0, 0, 0);
            return *reinterpret_cast<const uint4*>(act_base +
                                                   (row_begin + tok0 + tok) * p.act_stride +
                                                   c0 * step_k + (u % units_per_row) * 16);
          },
          [&](int u, uint4 v) {
            if (FP4)  // each 8 inputs as (k0, k2, k4, k6, k1, k3, k5, k7), as fp4_low/high give A
              v = make_uint4(fp4_act_low(v.x, v.y), fp4_act_high(v.x, v.y),
                             fp4_act_low(v.z, v.w), fp4_act_high(v.z, v.w));
            *reinterpret_cast<uint4*>(act_tile + (u / units_per_row) * stride +
                                      (u % units_per_row) * 16) = v;
          });
      stage_rounds<batch, float>(
          NT * 8 * sx_count,
          [&](int u) {
            const int tok = u / sx_count;
            return tok0 + tok < count
                       ? p.act_scale[(row_begin + tok0 + tok) * p.act_scale_stride + sx0 +
                                     u % sx_count]
                       : 0.0f;
          },
          [&](int u, float v) { sx_tile[(u / sx_count) * sx_per_tok + u % sx_count] = v; });
      __syncthreads();
    }
    issue(si + num_stages - 1);
    if (!warp_active) continue;
    if (st + ssteps < total) load_scales<FP4>(sr, st + ssteps, total, pmask, next);
    cp_async_wait<num_stages - 1>();  // stage si has landed (for this lane)
    __syncwarp();                     // ... and for every lane of the warp
    const std::uint8_t* w = wbuf + (si % num_stages) * rows_per_warp * wstride;
    const std::uint8_t* b_base = act_tile + (st - c0) * step_k + 8 * t + g * stride;
    uint4 run_lo{}, run_hi{};  // interleaved FP4: the lane's quarters of four steps
#pragma unroll
    for (int u = 0; u < ssteps; ++u) {
      const int step = st + u;
      if (step >= total) break;
      std::uint32_t a[4];
      if constexpr (FMT == fmt_fp4_il) {  // stages and splits start at whole runs of 4 steps
        if (u % 4 == 0) {
          run_lo = *reinterpret_cast<const uint4*>(w + (u / 4) * 1024 + lane * 16);
          run_hi = *reinterpret_cast<const uint4*>(w + (u / 4) * 1024 + 512 + lane * 16);
        }
        const std::uint32_t wl = word_of(run_lo, u % 4), wh = word_of(run_hi, u % 4);
        a[0] = fp4il_low(wl);
        a[1] = fp4il_low(wh);
        a[2] = fp4il_high(wl);
        a[3] = fp4il_high(wh);
      } else if (FP4) {
        const std::uint32_t wl =
            *reinterpret_cast<const std::uint32_t*>(w + g * wstride + u * 16 + 4 * t);
        const std::uint32_t wh =
            *reinterpret_cast<const std::uint32_t*>(w + (g + 8) * wstride + u * 16 + 4 * t);
        a[0] = fp4_low(wl);
        a[1] = fp4_low(wh);
        a[2] = fp4_high(wl);
        a[3] = fp4_high(wh);
      } else {
        const uint2 wl = *reinterpret_cast<const uint2*>(w + g * wstride + u * 32 + 8 * t);
        const uint2 wh = *reinterpret_cast<const uint2*>(w + (g + 8) * wstride + u * 32 + 8 * t);
        a[0] = wl.x;
        a[1] = wh.x;
        a[2] = wl.y;
        a[3] = wh.y;
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const uint2 b = *reinterpret_cast<const uint2*>(b_base + u * step_k + 8 * j * stride);
        mma_e4m3(tmp[j], a, b.x, b.y);
      }
      if (((step + 1) & pmask) != 0 && step + 1 != total) continue;
      // Promote: acc += tmp * weight scale * activation scale.
      const int si_x = ((step - c0) * step_k) >> act_shift;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const float sx_a = sx_tile[(8 * j + 2 * t) * sx_per_tok + si_x];
        const float sx_b = sx_tile[(8 * j + 2 * t + 1) * sx_per_tok + si_x];
        acc[j][0] += tmp[j][0] * (cur.lo[u] * sx_a);
        acc[j][1] += tmp[j][1] * (cur.lo[u] * sx_b);
        acc[j][2] += tmp[j][2] * (cur.hi[u] * sx_a);
        acc[j][3] += tmp[j][3] * (cur.hi[u] * sx_b);
#pragma unroll
        for (int c = 0; c < 4; ++c) tmp[j][c] = 0.0f;
      }
    }
    cur = next;
    __syncwarp();  // every lane is done with this stage's buffer before it is refilled
  }
  cp_async_wait<0>();
  // f(offset in y's layout, accumulator) for every output this thread holds.
  auto for_each_output = [&](auto f) {
    if (!warp_active) return;
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const std::int64_t r = c < 2 ? r_lo : r_hi;
        const std::int64_t tk = tok0 + 8 * j + 2 * t + (c & 1);
        if (r < p.n && tk < count)
          f(group * p.y_group_offset + (row_begin + tk) * p.y_stride + r, acc[j][c]);
      }
  };
  const std::int64_t tile_id =
      (tile * std::int64_t(gridDim.y) + blockIdx.y) * std::int64_t(gridDim.x) + blockIdx.x;
  store_split_outputs(p, split, cfg.k_splits, tile_id, for_each_output);
}

template <int FMT>
int weight_smem() {
  return num_warps * num_stages * rows_per_warp * weight_stride<FMT>();
}

template <int NT, int FMT>
void launch_tiles(const block_gemm_params& p, const split_config& cfg, dim3 grid,
                  cudaStream_t stream) {
  const int smem = weight_smem<FMT>() + NT * 8 * (cfg.chunk_steps * step_k + act_pad) +
                   NT * 8 * (cfg.chunk_steps * step_k / p.act_block) * int(sizeof(float));
  static std::atomic<std::size_t> limits[detail::max_tracked_devices];  // per instantiation
  detail::ensure_smem(reinterpret_cast<const void*>(&block_gemm_kernel<NT, FMT>), 160 * 1024,
                      limits);
  detail::launch("block_gemm", block_gemm_kernel<NT, FMT>, grid, num_warps * 32, smem, stream, p,
                 cfg);
}

template <int FMT>
void launch_for(const block_gemm_params& p, int nt, const split_config& cfg, dim3 grid,
                cudaStream_t stream) {
  switch (nt) {
    case 1:
      launch_tiles<1, FMT>(p, cfg, grid, stream);
      break;
    case 2:
      launch_tiles<2, FMT>(p, cfg, grid, stream);
      break;
    case 4:
      launch_tiles<4, FMT>(p, cfg, grid, stream);
      break;
    default:
      launch_tiles<8, FMT>(p, cfg, grid, stream);
      break;
  }
}

}  // namespace

namespace {

/// The launch of p: token tile, grid and K split (shared by plan_block_gemm and the launch).
struct launch_shape {
  int nt = 1;
  std::int64_t token_tiles = 0, row_tiles = 0, grid_groups = 0;
  split_config cfg{1, 0, 0, false};
  std::int64_t tiles() const { return row_tiles * grid_groups * token_tiles; }
};

launch_shape shape_of(const block_gemm_params& p) {
  launch_shape sh;
  const std::int64_t total_steps = p.k / step_k;
  constexpr std::int64_t align = 8;  // steps: whole weight stages of either format
  const std::int64_t max_rows = p.max_rows;
  // Token tile by the rows a group typically has; the grid covers max_rows either way.
  const std::int64_t tile_basis = p.tile_rows > 0 ? std::min(p.tile_rows, max_rows) : max_rows;
  sh.nt = tile_basis <= 8 ? 1 : tile_basis <= 16 ? 2 : tile_basis <= 32 ? 4 : 8;
  sh.token_tiles = (max_rows + sh.nt * 8 - 1) / (sh.nt * 8);
  sh.row_tiles = (p.n + rows_per_block - 1) / rows_per_block;
  // At most `rows` groups are non-empty: a grid row per possible one (p.offsets only).
  const bool compact = p.offsets && p.rows > 0 && p.rows < p.groups;
  sh.grid_groups = compact ? p.rows : p.groups;
  const std::int64_t blocks = sh.tiles();
  // Enough blocks to keep every SM streaming: split K when the output alone is too small.
  constexpr std::int64_t target_blocks = 132 * 8;
  std::int64_t splits = 1;
  if (p.offsets) {
    // Grouped (MoE) GEMMs: the split must not depend on how many tokens were routed (a
    // token's result must not change with the batch, and a captured step must equal an eager
    // one), and must stay deterministic: at most two splits, whose fp32 atomic adds onto the
    // zeroed output commute exactly. Two whenever the experts a decode step can touch (a
    // handful) would leave the GPU short of blocks, judged with a fixed 8 groups; not for
    // prefill-sized groups (over 64 rows), where the atomics would cost more than they give.
    if (sh.row_tiles * std::min<std::int64_t>(p.groups, 8) < target_blocks &&
        total_steps >= 4 * align && max_rows <= 64)
      splits = 2;
  } else if (blocks < target_blocks) {
    // Depends on the token tiles, so on the batch only beyond 64 rows (one tile up to there).
    splits = std::min<std::int64_t>((target_blocks + blocks - 1) / blocks,
                                    std::max<std::int64_t>(1, total_steps / (2 * align)));
  }
  std::int64_t per_split = (total_steps + splits - 1) / splits;
  per_split = std::max<std::int64_t>(align, (per_split + align - 1) / align * align);
  splits = (total_steps + per_split - 1) / per_split;
  // Stage as many activation inputs per pass as the budget holds, in whole weight stages.
  const std::int64_t fit = std::max<std::int64_t>(
      align, (act_budget(sh.nt) / (sh.nt * 8 * (step_k + 4)) - 1) / align * align);
  sh.cfg = split_config{int(std::max<std::int64_t>(1, splits)), per_split,
                        int(std::min(per_split, fit)), compact};
  return sh;
}

std::atomic<bool> g_stream_gemm{detail::env_switch("DEEPINFER_STREAM_GEMM", true)};

std::atomic<bool> g_skinny_gemm{detail::env_switch("DEEPINFER_SKINNY_GEMM", true)};
std::atomic<bool> g_wg_wide_tiles{detail::env_switch("DEEPINFER_WG_PREFILL", true)};

/// Whether launch_block_gemm hands p to skinny_gemm: dense FP8 GEMMs of 9..64 rows.
bool skinny(const block_gemm_params& p) {
  return g_skinny_gemm && skinny_gemm_takes(p);
}

/// Whether launch_block_gemm hands p to stream_gemm: token tiles of <= 8 rows.
bool streams(const launch_shape& sh) {
  return sh.nt == 1 && g_stream_gemm;
}

/// Whether p goes to wg_gemm: decode tiles it takes, and with set_wg_gemm_wide_tiles grouped
/// GEMMs of wider tiles too (prefill's routed experts), whose 8-token tiles it walks.
bool to_wg_gemm(const block_gemm_params& p, const launch_shape& sh) {
  if (streams(sh)) return wg_gemm_takes(p);
  return g_wg_wide_tiles && p.offsets && wg_gemm_takes(p);
}

}  // namespace

void set_skinny_gemm(bool on) {
  g_skinny_gemm = on;
}
bool get_skinny_gemm() {
  return g_skinny_gemm;
}

bool block_gemm_takes_pair(const block_gemm_params& p) {
  if (!p.weight_b || p.max_rows == 0 || p.n == 0 || p.groups == 0 || p.k / step_k == 0 || skinny(p))
    return false;
  return to_wg_gemm(p, shape_of(p));  // (wg_gemm_takes checks the pair's operands and mode)
}

namespace {
bool wide_dense(const block_gemm_params& p);

/// Whether launch_block_gemm would hand p (a single weight) to stream_gemm.
bool goes_to_stream_gemm(const block_gemm_params& p) {
  if (p.weight_b || p.max_rows == 0 || p.n == 0 || p.groups == 0 || p.k / step_k == 0 ||
      wide_dense(p) || skinny(p))
    return false;
  const launch_shape sh = shape_of(p);
  return streams(sh) && !to_wg_gemm(p, sh) && !dense_wg_gemm_takes(p) && !pipe_gemm_takes(p);
}
}  // namespace

bool stream_gemm_takes_pair(const block_gemm_params& p) {
  if (p.n_b <= 0 || !p.weight_b) return false;
  return goes_to_stream_gemm(dense_pair_part(p, false)) &&
         goes_to_stream_gemm(dense_pair_part(p, true)) && stream_gemm_pair_fits(p);
}

void set_wg_gemm_wide_tiles(bool on) {
  g_wg_wide_tiles = on;
}
bool get_wg_gemm_wide_tiles() {
  return g_wg_wide_tiles;
}

void set_stream_gemm(bool on) {
  g_stream_gemm = on;
}
bool get_stream_gemm() {
  return g_stream_gemm;
}

namespace {
/// Decode batches of 9..64 rows on dense_wg_gemm's wide tiles (set_dense_wg_gemm_wide), ahead
/// of skinny_gemm.
bool wide_dense(const block_gemm_params& p) {
  return std::max(p.rows, p.max_rows) > 8 && dense_wg_gemm_takes(p);
}
}  // namespace

block_gemm_plan plan_block_gemm(const block_gemm_params& p) {
  if (p.max_rows == 0 || p.n == 0 || p.groups == 0 || p.k / step_k == 0) return {};
  if (ring_gemm_takes(p))
    return {1,
            plan_ring_gemm(p.n, p.k, detail::multiprocessor_count()).tiles};  // (zeroes y itself)
  // (the wide tiles zero y themselves and add their K splits into it: no workspace)
  if (wide_dense(p)) return {1, plan_dense_wg_gemm(p).row_tiles * p.groups};
  if (skinny(p)) return plan_skinny_gemm(p);
  const launch_shape sh = shape_of(p);
  if (to_wg_gemm(p, sh)) return {1, sh.tiles()};  // exact atomic splits
  if (streams(sh) && dense_wg_gemm_takes(p)) return {1, sh.tiles()};  // cluster splits
  if (streams(sh) && pipe_gemm_takes(p)) {
    const pipe_gemm_plan pp = plan_pipe_gemm(p);
    return {1, pp.blocks};
  }
  if (streams(sh)) return {1, sh.tiles()};  // its splits need no workspace
  return {sh.cfg.k_splits, sh.tiles()};
}

void zero_outputs(float* y, std::int64_t elements, cudaStream_t stream) {
  const std::size_t bytes = std::size_t(elements) * sizeof(float);
  if (zero_kernels())
    launch_fill_zero(y, bytes, stream);
  else
    CUDA_CHECK(cudaMemsetAsync(y, 0, bytes, stream));
}

void launch_block_gemm(const block_gemm_params& p, cudaStream_t stream) {
  check_interleaved(p, "block_gemm");
  if (p.tiles && tile_gemv_takes(p)) {  // the weight's decode tiles (one weight or a pair)
    launch_tile_gemv(p, stream);
    return;
  }
  if (p.weight_b && p.n_b > 0) {  // a dense pair of different heights: one stream_gemm launch
    DI_CHECK(stream_gemm_takes_pair(p), "block_gemm: stream_gemm does not take this pair");
    launch_stream_gemm(p, stream);
    return;
  }
  if (p.weight_b) {  // a pair: one wg_gemm launch, where each weight alone would take wg_gemm
    DI_CHECK(block_gemm_takes_pair(p), "block_gemm: no kernel takes this pair of weights");
    launch_wg_gemm(p, stream);
    return;
  }
  if (p.max_rows == 0 || p.n == 0 || p.groups == 0) return;
  if (p.k / step_k == 0) {
    zero_outputs(p.y, p.y_elements, stream);
    return;
  }
  if (ring_gemm_takes(p)) {
    launch_ring_gemm(p, stream);
    return;
  }
  if (wide_dense(p)) {
    launch_dense_wg_gemm(p, stream);
    return;
  }
  if (skinny(p)) {
    launch_skinny_gemm(p, stream);
    return;
  }
  const launch_shape sh = shape_of(p);
  if (to_wg_gemm(p, sh)) {
    launch_wg_gemm(p, stream);
    return;
  }
  if (streams(sh) && dense_wg_gemm_takes(p)) {
    launch_dense_wg_gemm(p, stream);
    return;
  }
  if (streams(sh) && pipe_gemm_takes(p)) {
    launch_pipe_gemm(p, stream);
    return;
  }
  if (streams(sh)) {
    launch_stream_gemm(p, stream);
    return;
  }
  const int splits = sh.cfg.k_splits;
  DI_CHECK((p.split_work == nullptr) == (p.split_counters == nullptr),
           "block_gemm: split_work and split_counters come together");
  if (splits > 1 && !p.split_work)  // atomic adds need a zeroed y
    zero_outputs(p.y, p.y_elements, stream);
  const dim3 grid(unsigned(sh.row_tiles), unsigned(sh.grid_groups),
                  unsigned(sh.token_tiles * splits));
  if (p.fp4 && p.fp4_interleaved)
    launch_for<fmt_fp4_il>(p, sh.nt, sh.cfg, grid, stream);
  else if (p.fp4)
    launch_for<fmt_fp4>(p, sh.nt, sh.cfg, grid, stream);
  else
    launch_for<fmt_fp8>(p, sh.nt, sh.cfg, grid, stream);
}

}  // namespace di::cuda
