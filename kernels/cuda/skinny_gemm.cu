// skinny_gemm: dense FP8 GEMMs of 9..64 rows (decode batches), y = x W^T with FP8-quantized
// activations and block-scaled FP8 weights, on the FP8 tensor cores (mma.sync m16n8k32).
//
// Why a kernel of its own: at 64 rows each weight byte meets 64 activations. stream_gemm's
// warps own 16 rows (one m16 tile) and read every token's B fragment per step -- 4x the weight
// bytes, from L1 at multiply time, latency-bound (0.08 of the copy bandwidth on the H200) --
// and sm90_block_gemm's 64-row blocks each stage their token tile's activations for a short K
// range before streaming any weight (0.10). Here a block owns 128 rows (4 warps x 32 rows, two
// m16 tiles each, which share every B fragment) and a K range of at most `max_range` inputs:
// it copies that range of every token's activation codes and scales into shared memory with
// cp.async, zero-filled past the last token, while each warp already loads its first weight
// batches into registers; then the warps stream their rows (two steps per batch, one batch
// loading while the previous one multiplies) and read the B fragments from shared memory
// (token rows padded so that a half-warp's 8-byte loads hit distinct banks). The lane fragment
// permutation is stream_gemm's: lane (g, t) holds bytes 8t..8t+7 of a 32-byte step for its rows
// g and g + 8 and for token g, so A and B pair the same inputs. Promotion into fp32 as in the
// other block_gemm kernels (every step for 32-input blocks on both sides, else at the end of
// each block). K splits: as many as needed for about two blocks per SM, added with fp32 atomics
// into the zeroed output, or in split order through p.split_work when it is given (ordered
// splits). The splits depend on the weight's shape only, so a row's result is the same for
// any batch of 9..64 rows (with ordered splits: bit for bit).
#include "kernels/cuda/gemm_kernels.hpp"
#include "kernels/cuda/launch.cuh"

#include "kernels/cuda/block_gemm_common.cuh"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/kernel_attributes.hpp"
#include "kernels/dtype.hpp"

#include <algorithm>

namespace di::cuda {

namespace {

using namespace gemm_detail;

constexpr int warps = 4;
constexpr int tiles = 2;                           // m16 tiles per warp
constexpr int rows_per_block = warps * tiles * 16;  // 128
constexpr int step_k = 32;
constexpr int batch = 2;                            // steps per load batch
constexpr int max_range = 1280;                     // inputs per block (shared memory)
constexpr int act_pad = 32;                         // bytes past each token row
constexpr int max_tokens = 64;

struct skinny_config {
  int k_splits;
  int range;  ///< inputs per split: a multiple of batch * step_k (the last split may be shorter)
};


/// NT: 8-token tiles (2, 4 or 8). EVERY: 32-input scale blocks on both sides and e8m0 weight
/// scales (V4.1): every step promotes with fresh MMA results.
template <int NT, bool EVERY>
__global__ void __launch_bounds__(warps * 32, 2)
    skinny_gemm_kernel(block_gemm_params p, skinny_config cfg) {
  detail::grid_dependency_sync();
  extern __shared__ __align__(16) std::uint8_t smem[];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const int split = int(blockIdx.y);
  const std::int64_t k_begin = std::int64_t(split) * cfg.range;
  const int range = int(min(std::int64_t(cfg.range), p.k - k_begin));  // whole scale blocks
  if (range <= 0) return;  // uniform over the block
  const int steps = range / step_k;
  const int act_shift = log2_int(p.act_block);
  const int stride = range + act_pad;           // bytes per token row in shared memory
  const int sx_cols = range >> act_shift;      // activation scales per token in the range
  std::uint8_t* act = smem;                     // [NT * 8][stride] codes
  float* sx = reinterpret_cast<float*>(smem + NT * 8 * stride);  // [NT * 8][sx_cols]

  // Stage the range's activation codes and scales (tokens past p.rows read as zeros).
  const int units = range / 16;
  for (int u = int(threadIdx.x); u < NT * 8 * units; u += int(blockDim.x)) {
    const int tok = u / units, c = u % units;
    const bool valid = tok < p.rows;
    cp_async16_zfill(act + tok * stride + c * 16,
                     p.act + (valid ? tok : 0) * p.act_stride + k_begin + c * 16, valid);
  }
  const std::int64_t sx0 = k_begin >> act_shift;  // ranges start at whole scale blocks
  for (int u = int(threadIdx.x); u < NT * 8 * sx_cols; u += int(blockDim.x)) {
    const int tok = u / sx_cols, c = u % sx_cols;
    const bool valid = tok < p.rows;
    cp_async4_zfill(sx + u, p.act_scale + (valid ? tok : 0) * p.act_scale_stride + sx0 + c, valid);
  }
  asm volatile("cp.async.commit_group;\n" ::);

  // This warp's rows: tiles m of rows n0 + 16m + g and + 8 (clamped; stored only if < n).
  const std::int64_t n0 = std::int64_t(blockIdx.x) * rows_per_block + warp * tiles * 16;
  const bool active = n0 < p.n;
  const std::uint8_t* wrow[tiles][2];
  const std::uint8_t* ws8[tiles];
  const float* ws32[tiles];
#pragma unroll
  for (int m = 0; m < tiles; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::int64_t r = min(n0 + 16 * m + 8 * h + g, p.n - 1);
      wrow[m][h] = p.weight + r * p.k + k_begin + 8 * t;
    }
    // Rows g and g + 8 of a 16-row tile share a scale row block (block_rows % 16 == 0).
    const std::int64_t r = min(n0 + 16 * m, p.n - 1);
    const std::int64_t at = (r / p.block_rows) * p.wscale_cols;
    ws8[m] = p.wscale_e8m0 ? p.wscale_e8m0 + at : nullptr;
    ws32[m] = p.wscale_e8m0 ? nullptr : p.wscale_f32 + at;
  }
  const int col_shift = log2_int(p.block_cols);
  const int pmask = max(1, min(p.block_cols, p.act_block) / step_k) - 1;

  struct regs {
    uint2 a[batch][tiles][2];
  };
  auto load = [&](regs& r, int s) {
#pragma unroll
    for (int u = 0; u < batch; ++u)
#pragma unroll
      for (int m = 0; m < tiles; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          r.a[u][m][h] = s + u < steps ? load_stream8(wrow[m][h] + (s + u) * step_k)
                                       : make_uint2(0, 0);
  };

  float acc[tiles][NT][4], tmp[tiles][NT][4];
#pragma unroll
  for (int m = 0; m < tiles; ++m)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[m][j][c] = tmp[m][j][c] = 0.0f;

  auto weight_scale = [&](int m, int s) {  // s: local step
    const int col = int(((k_begin + std::int64_t(s) * step_k)) >> col_shift);
    return ws8[m] ? e8m0_to_f32(ws8[m][col]) : ws32[m][col];
  };

  auto multiply = [&](const regs& r, int s) {
#pragma unroll
    for (int u = 0; u < batch; ++u) {
      const int step = s + u;
      if (step >= steps) break;
      const std::uint8_t* b_row = act + g * stride + step * step_k + 8 * t;
      const int sc = (step * step_k) >> act_shift;
      float w[tiles];
#pragma unroll
      for (int m = 0; m < tiles; ++m) w[m] = weight_scale(m, step);
      const bool promote = EVERY || ((step + 1) & pmask) == 0 || step + 1 == steps;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const uint2 b = *reinterpret_cast<const uint2*>(b_row + 8 * j * stride);
        const float xa = sx[(8 * j + 2 * t) * sx_cols + sc];
        const float xb = sx[(8 * j + 2 * t + 1) * sx_cols + sc];
#pragma unroll
        for (int m = 0; m < tiles; ++m) {
          const std::uint32_t a[4] = {r.a[u][m][0].x, r.a[u][m][1].x, r.a[u][m][0].y,
                                      r.a[u][m][1].y};
          if constexpr (EVERY) {
            float d[4];
            mma_e4m3_fresh(d, a, b.x, b.y);
            acc[m][j][0] += d[0] * (w[m] * xa);
            acc[m][j][1] += d[1] * (w[m] * xb);
            acc[m][j][2] += d[2] * (w[m] * xa);
            acc[m][j][3] += d[3] * (w[m] * xb);
          } else {
            mma_e4m3(tmp[m][j], a, b.x, b.y);
            if (promote) {
              acc[m][j][0] += tmp[m][j][0] * (w[m] * xa);
              acc[m][j][1] += tmp[m][j][1] * (w[m] * xb);
              acc[m][j][2] += tmp[m][j][2] * (w[m] * xa);
              acc[m][j][3] += tmp[m][j][3] * (w[m] * xb);
#pragma unroll
              for (int c = 0; c < 4; ++c) tmp[m][j][c] = 0.0f;
            }
          }
        }
      }
    }
  };

  regs r[2];
  if (active) {
    load(r[0], 0);
    if (batch < steps) load(r[1], batch);
  }
  asm volatile("cp.async.wait_all;\n" ::);
  __syncthreads();  // the activation range has landed for every thread
  if (active) {
    for (int s = 0; s < steps; s += 2 * batch) {
      multiply(r[0], s);
      if (s + 2 * batch < steps) load(r[0], s + 2 * batch);
      if (s + batch < steps) multiply(r[1], s + batch);
      if (s + 3 * batch < steps) load(r[1], s + 3 * batch);
    }
  }

  // Outputs: with ordered splits every split stores its partials and the last block of the
  // row block adds them in split order; otherwise fp32 atomics (or a plain store, one split).
  auto for_each_output = [&](auto f) {
    if (!active) return;
#pragma unroll
    for (int m = 0; m < tiles; ++m)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const std::int64_t row = n0 + 16 * m + g + (c < 2 ? 0 : 8);
          const std::int64_t tk = 8 * j + 2 * t + (c & 1);
          if (row < p.n && tk < p.rows) f(tk * p.y_stride + row, acc[m][j][c]);
        }
  };
  store_split_outputs(p, split, cfg.k_splits, blockIdx.x, for_each_output);
}

/// The launch of p: row blocks, K splits (from the weight's shape only).
struct skinny_shape {
  std::int64_t row_blocks = 0;
  skinny_config cfg{1, 0};
};

skinny_shape skinny_shape_of(const block_gemm_params& p) {
  skinny_shape sh;
  sh.row_blocks = (p.n + rows_per_block - 1) / rows_per_block;
  // Ranges in whole load batches and whole scale blocks of both sides, so that every split
  // starts a promotion block and its activation scales.
  const std::int64_t unit = std::max<std::int64_t>({std::int64_t(batch) * step_k,
                                                    std::int64_t(p.act_block),
                                                    std::int64_t(p.block_cols)});
  // About two blocks per SM, each range at most max_range and at least 4 units.
  const std::int64_t want = std::max<std::int64_t>(1, (2 * 132 + sh.row_blocks - 1) / sh.row_blocks);
  std::int64_t range = (p.k + want - 1) / want;
  range = std::clamp<std::int64_t>((range + unit - 1) / unit * unit,
                                   std::min<std::int64_t>(4 * unit, max_range), max_range);
  range = std::min<std::int64_t>(range, (p.k + unit - 1) / unit * unit);
  sh.cfg = skinny_config{int((p.k + range - 1) / range), int(range)};
  return sh;
}

template <int NT>
int skinny_smem(int range) {
  return NT * 8 * (range + act_pad) + NT * 8 * (range / 32) * int(sizeof(float));
}

template <int NT, bool EVERY>
void launch_nt(const block_gemm_params& p, const skinny_shape& sh, cudaStream_t stream) {
  const int smem = skinny_smem<NT>(sh.cfg.range);
  static std::atomic<std::size_t> limits[detail::max_tracked_devices];  // per instantiation
  detail::ensure_smem(reinterpret_cast<const void*>(&skinny_gemm_kernel<NT, EVERY>),
                      std::size_t(skinny_smem<8>(max_range)), limits);
  const dim3 grid(unsigned(sh.row_blocks), unsigned(sh.cfg.k_splits));
  detail::launch("skinny_gemm", skinny_gemm_kernel<NT, EVERY>, grid, warps * 32, smem, stream, p,
                 sh.cfg);
}

}  // namespace

bool skinny_gemm_takes(const block_gemm_params& p) {
  return !p.offsets && !p.fp4 && p.groups == 1 && p.act_group_offset == 0 &&
         p.max_rows > 8 && p.max_rows <= max_tokens && p.rows == p.max_rows &&
         p.k % (batch * step_k) == 0 && p.block_rows % 16 == 0 && p.act_block >= 32 &&
         p.act_block <= max_range && p.block_cols <= max_range && p.y_stride == p.n;
}

block_gemm_plan plan_skinny_gemm(const block_gemm_params& p) {
  const skinny_shape sh = skinny_shape_of(p);
  return {sh.cfg.k_splits, sh.row_blocks};
}

void launch_skinny_gemm(const block_gemm_params& p, cudaStream_t stream) {
  DI_CHECK(skinny_gemm_takes(p), "skinny_gemm: not a dense FP8 GEMM of 9..64 rows ({} rows)",
           p.rows);
  if (p.n == 0) return;
  const skinny_shape sh = skinny_shape_of(p);
  if (sh.cfg.k_splits > 1 && !p.split_work)  // atomic adds need a zeroed y
    zero_outputs(p.y, p.y_elements, stream);
  const bool every = p.act_block == 32 && p.wscale_e8m0 && p.block_cols == 32;
  const int nt = p.rows <= 16 ? 2 : p.rows <= 32 ? 4 : 8;
  if (nt == 2)
    every ? launch_nt<2, true>(p, sh, stream) : launch_nt<2, false>(p, sh, stream);
  else if (nt == 4)
    every ? launch_nt<4, true>(p, sh, stream) : launch_nt<4, false>(p, sh, stream);
  else
    every ? launch_nt<8, true>(p, sh, stream) : launch_nt<8, false>(p, sh, stream);
}

}  // namespace di::cuda
