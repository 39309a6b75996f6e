// dense_wg_gemm: dense FP8 GEMMs of 1..64 rows (decode batches), y = x W^T with FP8-quantized
// activations and block-scaled FP8 weights, on the warpgroup MMA (wgmma m64n8k32 e4m3, one per
// 8 tokens) with both operands in shared memory.
//
// Why: sm_90 has no native mma.sync e4m3 (ptxas emulates it with conversions and f16 MMAs; see
// wg_gemm.cu), so stream_gemm (<= 8 rows) and skinny_gemm (9..64 rows) spend their issue slots
// on the emulation and stream the weights at 0.1-0.5 of the copy bandwidth. Here the weights
// never pass through registers: every thread of a warpgroup copies one 16-byte piece of the
// step's 64 x 32 weight tile (and at most one of the activations) into a shared-memory ring
// with cp.async, `ahead` steps ahead, and the warpgroup runs one wgmma per 8 tokens per step
// from two descriptors. A block is 64 weight rows and `wgs` warpgroups, each taking a contiguous
// part of the block's K range with its own ring and barrier; their sums are added in warpgroup
// order.
//
// Scales: every step's wgmma starts fresh and is promoted into fp32 with its weight scale (one
// per warp: block_rows % 16 == 0) times each token's activation scale of that step, so any
// block sizes of 32 inputs and more work alike. K splits: one, or two blocks along K (exact:
// 0 + a + b into the zeroed output) when one would leave SMs idle, chosen from the weight's
// shape only; with ordered splits (p.split_work) they add through store_split_outputs. So a
// row's result depends on its own inputs only, not on the batch: the same bits for any 1..64
// rows (every wgmma has N = 8, and the warpgroups' K ranges are the same for every batch).
#include "kernels/cuda/gemm_kernels.hpp"

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/block_gemm_common.cuh"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/kernel_attributes.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/dtype.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>

namespace di::cuda {

namespace {

using namespace gemm_detail;

constexpr int rows_per_block = 64;  // one m64 tile
constexpr int step_k = 32;
constexpr int a_step = rows_per_block * step_k;  // 2 KB of weights per k-step
constexpr int stages = 4;                        // stages in a warpgroup's ring
constexpr int ahead = stages - 1;  // stages in flight: a slot is refilled a stage after its wgmmas
constexpr int max_tokens = 64;
constexpr int sm_count = 132;  // H200; only sizes the K splits (from the shape, never the device)

/// Warpgroups per block, splitting its K range: the same for every batch size (their ranges
/// fix the order of a row's sums).
constexpr int wgs = 4;
/// k-steps per stage for NT 8-token groups: the barrier, waits and bookkeeping of a stage are
/// shared by its k-steps; the accumulators of all of them stay within 128 registers.
template <int NT>
constexpr int ks_for = NT <= 2   ? 4
                       : NT == 4 ? 2
                                 : 1;
/// A stage: KS k-steps of weights ([KS][2 halves][8-row groups][8 rows][16 B], K-major core
/// matrices), of the tokens' codes ([KS][2 halves][NT][8][16 B]) and the tokens' activation
/// scales ([KS][N] floats).
template <int NT>
constexpr int b_step = NT * 8 * step_k;
/// AMODE 4: each row's KS k-steps contiguous (one bulk copy), rows 16 bytes apart past that
/// (ldmatrix's 8 rows then fall on distinct banks).
template <int NT>
constexpr int a_row_stride = ks_for<NT>* step_k + 16;
template <int NT>
constexpr int a_region = rows_per_block* a_row_stride<NT>;
/// Stages start 1024 bytes apart (AMODE 5: the TMA's 128-byte swizzle needs 1024-byte aligned
/// boxes; a_region is a multiple of 1024).
template <int NT>
constexpr int stage_bytes = (a_region<NT> + ks_for<NT> * (b_step<NT> + NT * 8 * 4) + 1023) / 1024 *
                            1024;
template <int NT>
constexpr int smem_bytes = std::max(wgs* stages* stage_bytes<NT>, (wgs - 1) * NT * 4 * 128 * 4) +
                           1024;  // + alignment

struct dense_wg_config {
  int k_splits;
  int range;  ///< inputs per K split (a multiple of step_k; the last split may be shorter)
};

__device__ __forceinline__ void warpgroup_barrier(int wg) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(wg + 1) : "memory");
}

template <int NT, int AMODE>
__global__ void __launch_bounds__(wgs * 128, 1)
    dense_wg_kernel(block_gemm_params p, dense_wg_config cfg,
                    const __grid_constant__ CUtensorMap a_map) {
  detail::grid_dependency_sync();
  constexpr bool tma = AMODE == 5 || AMODE == 6;
  static_assert(!tma || ks_for<NT> * step_k == 128, "the TMA box is 128 bytes of K");
  constexpr int N = NT * 8, KS = ks_for<NT>;
  constexpr int b_off = a_region<NT>, sx_off = b_off + KS * b_step<NT>;
  extern __shared__ __align__(128) std::uint8_t smem[];
  const int wg = int(threadIdx.x) / 128, tid = int(threadIdx.x) % 128;
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  __shared__ std::uint64_t full_bar[wgs][stages];  // AMODE 4: the stage's bulk copies landed
  if constexpr (AMODE == 4 || tma) {
    if (tid == 0)
      for (int i = 0; i < stages; ++i) mbar_init(&full_bar[wg][i], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    __syncthreads();
  }
  const int split = int(blockIdx.y);
  const std::int64_t k_begin = std::int64_t(split) * cfg.range;
  const int block_steps = int(min(std::int64_t(cfg.range), p.k - k_begin)) / step_k;
  const int per = (block_steps + wgs - 1) / wgs;
  const int s_begin = min(block_steps, wg * per);
  const int steps = min(block_steps, s_begin + per) - s_begin;  // 0 for an idle warpgroup
  const int n_stages = (steps + KS - 1) / KS;
  const std::int64_t k0 = k_begin + std::int64_t(s_begin) * step_k;
  std::uint8_t* const base = smem + ((1024 - (smem_addr(smem) & 1023)) & 1023);
  std::uint8_t* ring = base + wg * stages * stage_bytes<NT>;
  const std::int64_t row0 = std::int64_t(blockIdx.x) * rows_per_block;

  // This thread's copies per k-step: weight row tid / 2, half tid % 2 (rows past n read row
  // n - 1, never stored); for tid < 2N token tid / 2's half tid % 2 (zeros past p.rows); for
  // tid < N token tid's activation scale (zero past p.rows).
  const int a_row = tid / 2, half = tid % 2;
  const std::uint8_t* a_src = p.weight + min(row0 + a_row, p.n - 1) * p.k + k0 + half * 16;
  const int a_dst = half * (rows_per_block * 16) + (a_row / 8) * 128 + (a_row % 8) * 16;
  const bool b_copies = tid < 2 * N, b_valid = a_row < p.rows;
  const std::uint8_t* b_src = p.act + (b_valid ? a_row : 0) * p.act_stride + k0 + half * 16;
  const int b_dst = b_off + half * (N * 16) + (a_row / 8) * 128 + (a_row % 8) * 16;
  const bool x_copies = tid < N, x_valid = tid < p.rows;
  const float* x_src = p.act_scale + (x_valid ? tid : 0) * p.act_scale_stride;
  const int act_shift = log2_int(p.act_block), col_shift = log2_int(p.block_cols);
  auto issue = [&](int st) {  // stage st into slot st % stages; always one commit group
    if (st < n_stages) {
      std::uint8_t* slot = ring + (st % stages) * stage_bytes<NT>;
      if constexpr (tma) {
        if (tid == 0) {
          mbar_expect_tx(&full_bar[wg][st % stages], unsigned(rows_per_block * 128));
          tma_load_2d(slot, &a_map, int(k0 + std::int64_t(st) * 128), int(row0),
                      &full_bar[wg][st % stages]);
        }
      }
      if constexpr (AMODE == 4) {  // one bulk copy per row: the stage's k-steps of it
        const int ks = min(KS, steps - st * KS);
        if (tid == 0)
          mbar_expect_tx(&full_bar[wg][st % stages], unsigned(rows_per_block * ks * step_k));
        if (tid < rows_per_block)
          bulk_copy(slot + tid * a_row_stride<NT>,
                    p.weight + min(row0 + tid, p.n - 1) * p.k + k0 + std::int64_t(st) * KS * step_k,
                    unsigned(ks * step_k), &full_bar[wg][st % stages]);
      }
      if constexpr (AMODE == 2) {  // EXPERIMENT: 2*KS lanes per row, the row's stage contiguous
#pragma unroll
        for (int i = 0; i < KS; ++i) {
          const int c = tid + 128 * i, row = c / (2 * KS), piece = c % (2 * KS);
          const int kstep = piece / 2, hf = piece % 2, s = st * KS + kstep;
          if (s < steps)
            cp_async16_zfill(slot + kstep * a_step + hf * (rows_per_block * 16) + (row / 8) * 128 +
                                 (row % 8) * 16,
                             p.weight + min(row0 + row, p.n - 1) * p.k + k0 + s * step_k + hf * 16,
                             true);
        }
      }
#pragma unroll
      for (int i = 0; i < KS; ++i) {
        const int s = st * KS + i;
        if (s >= steps) break;
        if constexpr (AMODE == 0 || AMODE == 3)
          cp_async16_stream(slot + i * a_step + a_dst, a_src + s * step_k);
        if constexpr (AMODE == 1)
          cp_async16_zfill(slot + i * a_step + a_dst, a_src + s * step_k, true);
        if (b_copies) cp_async16_zfill(slot + i * b_step<NT> + b_dst, b_src + s * step_k, b_valid);
        if (x_copies)
          cp_async4_zfill(slot + sx_off + (i * N + tid) * 4,
                          x_src + ((k0 + std::int64_t(s) * step_k) >> act_shift), x_valid);
      }
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };

  // The warp's 16 rows share a weight scale per k-step (block_rows % 16 == 0).
  const std::int64_t ws_at = (min(row0 + 16 * warp, p.n - 1) / p.block_rows) * p.wscale_cols;
  auto weight_scale = [&](int s) {
    const std::int64_t col = (k0 + std::int64_t(s) * step_k) >> col_shift;
    return p.wscale_e8m0 ? e8m0_to_f32(__ldg(p.wscale_e8m0 + ws_at + col))
                         : __ldg(p.wscale_f32 + ws_at + col);
  };
  float acc[N / 2], d[KS][NT][4];
#pragma unroll
  for (int c = 0; c < N / 2; ++c) acc[c] = 0.0f;
#pragma unroll
  for (int i = 0; i < KS; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) d[i][j][c] = 0.0f;

  // Stage st: its copies have landed (the thread's own, then the warpgroup's at the barrier),
  // the slot of stage st - 1 (whose wgmmas every warp has waited for) is refilled with stage
  // st + ahead, and the stage's wgmmas (one per k-step and 8 tokens, each fresh) run and are
  // promoted in k order. (ptxas serializes a wgmma whose neighbour's accumulators are read in
  // its pipeline stage, so promotion does not overlap the next stage's wgmmas; the other
  // warpgroups of the SM keep the tensor cores busy.)
  // EXPERIMENT (AMODE 3): where a warpgroup's time goes, in clock64 cycles.
  long long t0 = clock64(), t_wait = 0, t_mma = 0, t_first = 0;
  for (int st = 0; st < ahead; ++st) issue(st);
  const long long t_issued = clock64();
  for (int st = 0; st < n_stages; ++st) {
    const long long ta = clock64();
    float w[KS];
#pragma unroll
    for (int i = 0; i < KS; ++i) w[i] = st * KS + i < steps ? weight_scale(st * KS + i) : 0.0f;
    asm volatile("cp.async.wait_group %0;\n" ::"n"(ahead - 1) : "memory");
    if constexpr (AMODE == 4 || tma)
      mbar_wait(&full_bar[wg][st % stages], unsigned((st / stages) & 1));
    fence_proxy_async();
    warpgroup_barrier(wg);
    const long long tb = clock64();
    if (st == 0) t_first = tb - ta;
    t_wait += tb - ta;
    issue(st + ahead);
    const std::uint8_t* slot = ring + (st % stages) * stage_bytes<NT>;
    // The warp's 16 rows of each k-step into registers in wgmma's A fragment layout: one
    // ldmatrix.x4 (the four core matrices rows 0-7 / 8-15 x halves 0 / 1) per k-step.
    std::uint32_t a[KS][4];
#pragma unroll
    for (int i = 0; i < KS; ++i) {
      const std::uint8_t* m =
          tma ? slot + (warp * 16 + ((lane / 8) % 2) * 8 + lane % 8) * 128 +
                    (((i * 2 + lane / 16) ^ (lane % 8)) * 16)
          : AMODE == 4 ? slot + (warp * 16 + ((lane / 8) % 2) * 8 + lane % 8) * a_row_stride<NT> +
                             i * step_k + (lane / 16) * 16
                       : slot + i * a_step + (lane / 16) * (rows_per_block * 16) +
                             (warp * 2 + (lane / 8) % 2) * 128 + (lane % 8) * 16;
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3])
                   : "r"(unsigned(__cvta_generic_to_shared(m))));
#pragma unroll
      for (int c = 0; c < 4; ++c) pin(a[i][c]);  // written before the fence
    }
    wgmma_fence();
#pragma unroll
    for (int i = 0; i < KS; ++i) {  // every one, so that no branch splits the wgmma sequence:
      // k-steps past the range read stale codes and are not promoted; 8-token groups past the
      // batch read zeros
#pragma unroll
      for (int j = 0; j < NT; ++j)
        wgmma_n8_fresh(d[i][j], a[i],
                       smem_descriptor(slot + b_off + i * b_step<NT> + j * 128, N * 16, 128));
    }
    wgmma_commit();
    wgmma_wait<0>();
    const long long tc = clock64();
    t_mma += tc - tb;
#pragma unroll
    for (int i = 0; i < KS; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c) pin(a[i][c]);  // kept until the wgmmas have read them
    const float* sx = reinterpret_cast<const float*>(slot + sx_off);
#pragma unroll
    for (int i = 0; i < KS; ++i) {
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) pin(d[i][j][c]);  // read only after the wait
      if (st * KS + i >= steps) break;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const float xa = w[i] * sx[i * N + 8 * j + 2 * t],
                    xb = w[i] * sx[i * N + 8 * j + 2 * t + 1];
        acc[4 * j + 0] += d[i][j][0] * xa;
        acc[4 * j + 1] += d[i][j][1] * xb;
        acc[4 * j + 2] += d[i][j][2] * xa;
        acc[4 * j + 3] += d[i][j][3] * xb;
      }
    }
  }

  // The warpgroups' sums, added in warpgroup order through shared memory ([wg - 1][c][tid]).
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  __syncthreads();  // every ring is done
  float* partial = reinterpret_cast<float*>(smem);
  if (wg > 0) {
#pragma unroll
    for (int c = 0; c < N / 2; ++c) partial[((wg - 1) * (N / 2) + c) * 128 + tid] = acc[c];
  }
  __syncthreads();
  if (wg == 0) {
    for (int w = 1; w < wgs; ++w)
#pragma unroll
      for (int c = 0; c < N / 2; ++c) acc[c] += partial[((w - 1) * (N / 2) + c) * 128 + tid];
  }
  auto for_each_output = [&](auto f) {
    if (wg != 0) return;
#pragma unroll
    for (int j = 0; j < N / 8; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const std::int64_t row = row0 + 16 * warp + g + (c < 2 ? 0 : 8);
        const std::int64_t tk = 8 * j + 2 * t + (c & 1);
        if (row < p.n && tk < p.rows) f(tk * p.y_stride + row, acc[4 * j + c]);
      }
  };
  const long long t_loop = clock64();
  store_split_outputs(p, split, cfg.k_splits, blockIdx.x, for_each_output);
  if constexpr (AMODE == 3 || AMODE == 6) {
    const long long t_end = clock64();
    if (tid == 0 && (blockIdx.x % 64) == 0 && split == 0)
      printf(
          "dense_wg NT %d block %d wg %d stages %d: issue %lld, first wait %lld, waits %lld, "
          "wgmma %lld, loop %lld, epilogue %lld cycles\n",
          NT, int(blockIdx.x), wg, n_stages, t_issued - t0, t_first, t_wait, t_mma,
          t_loop - t_issued, t_end - t_loop);
  }
}

struct dense_wg_shape {
  std::int64_t row_blocks = 0;
  dense_wg_config cfg{1, 0};
};

/// Row blocks of 64; a second K split when the row blocks alone would not give every SM two
/// blocks and each warpgroup keeps at least two steps. From the weight's shape only.
dense_wg_shape dense_wg_shape_of(const block_gemm_params& p) {
  dense_wg_shape sh;
  sh.row_blocks = (p.n + rows_per_block - 1) / rows_per_block;
  const std::int64_t steps = p.k / step_k;
  int splits = sh.row_blocks < 2 * sm_count && steps >= 2 * 4 * 2 ? 2 : 1;
  // EXPERIMENT: DEEPINFER_DENSE_WG_FILL=1 splits K until the grid has a block per SM (each
  // warpgroup keeping at least 4 k-steps): more than two splits add with atomics (or in order
  // with ordered splits), so the bits then vary run to run unless ordered.
  static const bool fill = detail::env_switch("DEEPINFER_DENSE_WG_FILL", false);
  if (fill) {
    const std::int64_t want = (sm_count + sh.row_blocks - 1) / sh.row_blocks;
    const std::int64_t most = std::max<std::int64_t>(1, steps / (wgs * 4));
    splits = int(std::max<std::int64_t>(splits, std::min(want, most)));
  }
  sh.cfg = dense_wg_config{splits, int((steps + splits - 1) / splits * step_k)};
  return sh;
}

std::atomic<bool> g_dense_wg{detail::env_switch("DEEPINFER_DENSE_WG", false)};
std::atomic<long> g_launches{0};

template <int NT>
void launch_n(const block_gemm_params& p, const dense_wg_shape& sh, cudaStream_t stream) {
  static const int env_mode = std::getenv("DEEPINFER_DENSE_WG_AMODE")  // EXPERIMENT
                                  ? std::atoi(std::getenv("DEEPINFER_DENSE_WG_AMODE"))
                                  : 0;
  // The TMA modes take 4 k-steps (128 bytes) per stage: up to 16 rows; the others fall back.
  const int amode = (env_mode == 5 || env_mode == 6) && ks_for<NT> != 4 ? 0 : env_mode;
  using kernel_t = void (*)(block_gemm_params, dense_wg_config, const CUtensorMap);
  kernel_t kernel = &dense_wg_kernel<NT, 0>;
  if (amode == 1) kernel = &dense_wg_kernel<NT, 1>;
  if (amode == 2) kernel = &dense_wg_kernel<NT, 2>;
  if (amode == 3) kernel = &dense_wg_kernel<NT, 3>;
  if (amode == 4) kernel = &dense_wg_kernel<NT, 4>;
  CUtensorMap map{};
  if constexpr (ks_for<NT> == 4) {
    if (amode == 5) kernel = &dense_wg_kernel<NT, 5>;
    if (amode == 6) kernel = &dense_wg_kernel<NT, 6>;
    if (amode == 5 || amode == 6) map = byte_tensor_map_2d(p.weight, p.k, p.n, 128, rows_per_block);
  }
  static std::atomic<std::size_t> l[7][detail::max_tracked_devices];
  detail::ensure_smem(reinterpret_cast<const void*>(kernel), std::size_t(smem_bytes<NT>),
                      l[amode >= 0 && amode <= 6 ? amode : 0]);
  const dim3 grid(unsigned(sh.row_blocks), unsigned(sh.cfg.k_splits));
  detail::launch("dense_wg_gemm", kernel, grid, wgs * 128, smem_bytes<NT>, stream, p, sh.cfg, map);
}

bool aligned16(const void* ptr) {
  return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0;
}

}  // namespace

void set_dense_wg(bool on) {
  g_dense_wg = on;
}
bool get_dense_wg() {
  return g_dense_wg;
}
long dense_wg_launches() {
  return g_launches;
}

bool dense_wg_takes(const block_gemm_params& p) {
  auto pow2 = [](std::int64_t v) { return v > 0 && (v & (v - 1)) == 0; };
  return g_dense_wg && !p.offsets && !p.fp4 && p.groups == 1 && p.act_group_offset == 0 &&
         p.rows >= 1 && p.rows == p.max_rows && p.rows <= max_tokens && p.n >= 1 && p.k >= step_k &&
         p.k % step_k == 0 && p.block_rows % 16 == 0 && p.block_cols >= 32 && pow2(p.block_cols) &&
         p.act_block >= 32 && pow2(p.act_block) && p.y_stride == p.n && p.k % 16 == 0 &&
         p.act_stride % 16 == 0 && aligned16(p.weight) && aligned16(p.act);
}

block_gemm_plan plan_dense_wg(const block_gemm_params& p) {
  const dense_wg_shape sh = dense_wg_shape_of(p);
  return {sh.cfg.k_splits, sh.row_blocks};
}

void launch_dense_wg(const block_gemm_params& p, cudaStream_t stream) {
  DI_CHECK(dense_wg_takes(p),
           "dense_wg_gemm: not a dense FP8 GEMM of 1..64 rows it takes ({} rows, switched {})",
           p.rows, g_dense_wg ? "on" : "off");
  const dense_wg_shape sh = dense_wg_shape_of(p);
  if (sh.cfg.k_splits > 1 && !p.split_work)  // 0 + a + b: exact, in any order
    CUDA_CHECK(cudaMemsetAsync(p.y, 0, std::size_t(p.y_elements) * sizeof(float), stream));
  detail::by_row_tiles<8>(p.rows, [&](auto nt) { launch_n<decltype(nt)::value>(p, sh, stream); });
  ++g_launches;
}

}  // namespace di::cuda
