// pipe_gemm: the decode GEMM of the MXFP4 experts (weight_matrix::interleaved), token tiles of
// at most 8 rows per group, with the weights streamed into shared memory by the bulk-copy
// engine. OPT-IN (set_pipe_gemm / DEEPINFER_PIPE_GEMM=1): correct and bit-identical to
// stream_gemm, but on the H200 still slower than it (session 9, routed V4.1/V4 expert GEMMs
// at batch 1 / 8 / 64: 0.22-0.30 / 0.38-0.42 / 0.43-0.45 of the copy bandwidth against
// stream_gemm's 0.28-0.40 / 0.46-0.54 / 0.49-0.55).
//
// Why it exists: stream_gemm's warps load their weight fragments into registers, so the bytes
// an SM keeps in flight are bounded by registers (~32 KB at two blocks of 8 warps), about what
// the H200's bandwidth-latency product asks per SM. Here the bytes in flight cost no registers:
// one producer warp per block fills a ring of `stages` stages (2..4, 32 KB each) with
// cp.async.bulk copies -- each stage `runs` interleaved runs (2 KB: 4 steps x 32 rows) of each of
// the 8 consumer warps' K ranges, one bulk copy per warp -- and the rows' scale words with
// cp.async; an mbarrier per stage counts the bytes landed and the producer lanes' copies
// (full), another the consumer warps done reading it (empty). The token tile (codes and
// scales, <= 8 tokens) is double-buffered in shared memory the same way. Blocks are persistent
// (one per SM) and walk the work items -- (non-empty group, row block) -- so the ring never
// drains between items.
//
// What limits it (session 10): the consumers' instructions, not the copies. Its MMA is
// mma.sync m16n8k32 e4m3, which sm_90 emulates (e4m3 -> f16 conversions, two f16 HMMAs and
// FADDs of the zero accumulator per call: SASS of stream_gemm, whose Nsight Compute profile on
// the same routed experts shows the ALU pipe at 60% and 127 instructions per warp and step);
// that is why neither more consumer warps (branch pipe12-wip: 12 at 128 registers, b64
// 0.40-0.44) nor more stages moved it. wg_gemm.cu multiplies on the native warpgroup MMA
// instead and is what launch_block_gemm now picks for these tiles; pipe_gemm's copy engine
// would need the same change to be worth a new measurement.
//
// Layout: in weight_matrix::interleaved a 32-row stripe of a group is contiguous, run after
// run; so is any range of whole runs of it. Consumer warp w owns stripe w / wk of the row block
// and the w % wk-th part of its K range (runs), with stream_gemm's warps along K (wk) and K
// ranges; a lane reads its 16-byte quarter of each 512-byte piece (m16 tile m, half h) --
// consecutive lanes, consecutive 16 bytes: no bank conflicts -- and multiplies exactly as
// stream_gemm's interleaved path does (every step promotes: d = a b on the FP8 tensor cores,
// acc += d * (weight scale * activation scale)). The warps of a stripe add their K parts in
// warp order through shared memory. So the result is stream_gemm's, bit for bit: deterministic
// and independent of the batch (the splits depend on the weight's shape only).
#include "kernels/cuda/gemm_kernels.hpp"
#include "kernels/cuda/launch.cuh"

#include "common/error.hpp"
#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/block_gemm_common.cuh"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/kernel_attributes.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string_view>

namespace di::cuda {

namespace {

using namespace gemm_detail;

constexpr int consumers = 8;                   // consumer warps per block
constexpr int threads = (consumers + 1) * 32;  // + one producer warp
constexpr int step_k = 32;
constexpr int run_steps = 4;                            // steps per interleaved run
constexpr int run_bytes = il_stripe_rows * run_steps * 16;  // 2048
constexpr int stripe_rows = int(il_stripe_rows);
constexpr int max_stages = 4;  // ring depth (fewer when two token tiles take the room)
constexpr int runs = 2;        // runs per warp per stage
constexpr int stage_bytes = consumers * runs * run_bytes;  // 32 KB
constexpr int max_groups = 1024;                           // groups the block lists
constexpr int smem_budget = 200 * 1024;                    // dynamic: ring + two token tiles
constexpr int act_pad = 32;  // bytes past each token's codes: a half-warp's 8-byte loads of 4
                             // tokens x 32 bytes then fall on distinct banks
constexpr int max_act_bytes = 64 * 1024;  // one 8-token tile's codes and scales
constexpr int blocks_per_sm = 1;

/// Dynamic shared memory of a launch: the ring, then two token tiles of `tokens` (<= 8) rows
/// of codes (K + act_pad bytes each) followed by their scales (K / act_block floats each).
__host__ __device__ constexpr std::int64_t act_codes_stride(std::int64_t k) {
  return k + act_pad;
}
__host__ __device__ constexpr std::int64_t act_bytes(std::int64_t k, int act_block, int tokens) {
  return tokens * (act_codes_stride(k) + (k / act_block) * 4);
}

static_assert(run_bytes == 2 * 1024, "a run is 4 steps of 32 rows x 16 bytes");

struct pipe_config {
  int wk;           ///< consumer warps per stripe along K (1, 2, 4 or 8)
  int tile_tokens;  ///< token rows a tile buffer holds: min(8, max_rows)
  int stages;       ///< ring depth (2..max_stages)
  std::int64_t row_blocks;  ///< row blocks per group (8 / wk stripes each)
};

/// Consumer warp w's K range within the block's stripe, in runs: [begin, end).
struct warp_runs {
  int begin, end;
};
__device__ __forceinline__ warp_runs runs_of(int w, int wk, int total_runs) {
  const int per = (total_runs + wk - 1) / wk;
  const int b = min(total_runs, (w % wk) * per);
  return {b, min(total_runs, b + per)};
}

/// The non-empty groups of `offsets` in order into list[], their number into *count; called by
/// every thread of the block (it synchronises).
__device__ void list_nonempty_groups(const std::int32_t* offsets, int groups, int* list,
                                     int* count) {
  const nonempty_run r = count_nonempty_groups<threads / 32>(offsets, groups);
  int at = r.before;
  for (int e = r.g0; e < r.g1; ++e)
    if (offsets[e + 1] > offsets[e]) list[at++] = e;
  if (threadIdx.x == threads - 1) *count = at;
  __syncthreads();
}

/// Consumer-only barrier (named barrier 1): the producer warp keeps streaming meanwhile.
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"r"(consumers * 32) : "memory");
}

/// EVERY: 32-input activation blocks (V4.1): a run's 4 activation scales in one 16-byte load.
/// Persistent: one block per SM walks the work items (non-empty group, row block) blockIdx.x,
/// + gridDim.x, ...; the producer streams the next item's weights while the consumers finish
/// the current one (the ring's phases run on across items), so no SM's pipeline drains
/// between items.
template <bool EVERY>
__global__ void __launch_bounds__(threads, blocks_per_sm)
    pipe_gemm_kernel(block_gemm_params p, pipe_config cfg) {
  detail::grid_dependency_sync();
  extern __shared__ __align__(128) std::uint8_t ring[];  // then two token tiles (act_bytes)
  __shared__ __align__(8) std::uint64_t full[max_stages], empty[max_stages], act_full[2],
      act_empty[2];
  // The weight scales of each stage: per consumer warp and run, a word (its 4 steps) per
  // stripe row; copied by the producer warp's lanes with cp.async (rows are 4-byte pieces).
  __shared__ std::uint32_t scale_ring[max_stages][consumers][runs][stripe_rows];
  __shared__ float partial[consumers][32][8];
  __shared__ int nonempty[max_groups + 1];  // the non-empty groups, then their count
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const bool producer = warp == consumers;
  const int stages = cfg.stages;

  list_nonempty_groups(p.offsets, p.groups, nonempty, &nonempty[max_groups]);
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(&full[s], 1 + 32);  // the bulk copies' expect_tx + each producer lane's scales
      mbar_init(&empty[s], consumers);
    }
    for (int b = 0; b < 2; ++b) {
      mbar_init(&act_full[b], 1);
      mbar_init(&act_empty[b], consumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const int total_runs = int(p.k / (step_k * run_steps));
  const int slices = consumers / cfg.wk;
  const std::int64_t row_bytes = p.k / 2;
  const int act_shift = log2_int(p.act_block);
  const std::int64_t scale_cols = p.k >> act_shift;  // the token's scales this GEMM reads
  const std::int64_t tile_bytes = act_bytes(p.k, p.act_block, cfg.tile_tokens);
  const std::int64_t items = std::int64_t(nonempty[max_groups]) * cfg.row_blocks;
  const int my_warp = producer ? 0 : warp;
  int it = 0;  // stages so far (ring slot it % stages, phase (it / stages) & 1)
  int ap = 0;  // token tiles so far (buffer ap % 2, phase (ap / 2) & 1)
  for (std::int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int group = nonempty[item / cfg.row_blocks];
    const std::int64_t rb = item % cfg.row_blocks;
    const std::int64_t row_begin = p.offsets[group];
    const std::int64_t count = p.offsets[group + 1] - row_begin;
    const std::int64_t col0 = group * p.act_group_offset;
    // Per warp: its stripe's first row and its runs (the same numbers in every thread).
    auto stripe_row = [&](int w) { return (rb * slices + w / cfg.wk) * stripe_rows; };
    auto range_of = [&](int w) {
      if (stripe_row(w) >= p.n) return warp_runs{0, 0};
      return runs_of(w, cfg.wk, total_runs);
    };
    int n_stages = 0;  // stages of one pass: the longest warp range, in pieces of `runs`
    for (int w = 0; w < consumers; ++w) {
      const warp_runs r = range_of(w);
      n_stages = max(n_stages, (r.end - r.begin + runs - 1) / runs);
    }
    // Tiles of tile_tokens (<= 8) tokens; the weights stream once per tile.
    const int passes = int((count + cfg.tile_tokens - 1) / cfg.tile_tokens);
    const warp_runs mine = range_of(my_warp);
    const std::int64_t n0 = stripe_row(my_warp);

    for (int pass = 0; pass < passes; ++pass, it += n_stages, ++ap) {
      const std::int64_t tok0 = std::int64_t(pass) * cfg.tile_tokens;
      const int tokens = int(count - tok0 < cfg.tile_tokens ? count - tok0 : cfg.tile_tokens);
      std::uint8_t* act_s = ring + std::int64_t(stages) * stage_bytes + (ap % 2) * tile_bytes;
      float* scale_s = reinterpret_cast<float*>(act_s + cfg.tile_tokens * act_codes_stride(p.k));
      if (producer) {
        // Lane w < 8 copies consumer warp w's runs (one bulk copy a stage); every lane copies
        // the scales of 8 stripe rows (8 * (lane % 4) ..) of warp lane / 4.
        const warp_runs copy_runs = lane < consumers ? range_of(lane) : warp_runs{0, 0};
        const std::uint8_t* copy_src = p.weight +
                                       (group * p.n + stripe_row(lane % consumers)) * row_bytes +
                                       std::int64_t(copy_runs.begin) * run_bytes;
        const warp_runs scale_runs = range_of(lane / 4);
        const std::uint8_t* scale_src =
            p.wscale_e8m0 +
            (group * p.n + stripe_row(lane / 4) + (lane % 4) * 8) * p.wscale_cols +
            scale_runs.begin * run_steps;
        if (lane == 0) {  // the token tile: each token's codes and scales, a bulk copy each
          mbar_wait(&act_empty[ap % 2], ((ap / 2) & 1) ^ 1);
          const unsigned code_bytes = unsigned(p.k), sc_bytes = unsigned(scale_cols * 4);
          mbar_expect_tx(&act_full[ap % 2], unsigned(tokens) * (code_bytes + sc_bytes));
          for (int i = 0; i < tokens; ++i) {
            const std::int64_t row = row_begin + tok0 + i;
            bulk_copy(act_s + i * act_codes_stride(p.k), p.act + row * p.act_stride + col0,
                      code_bytes, &act_full[ap % 2]);
            bulk_copy(scale_s + i * scale_cols,
                      p.act_scale + row * p.act_scale_stride + (col0 >> act_shift), sc_bytes,
                      &act_full[ap % 2]);
          }
        }
        for (int k = 0; k < n_stages; ++k) {
          const int slot = (it + k) % stages;
          const int cnt = max(0, min(runs, copy_runs.end - (copy_runs.begin + k * runs)));
          const int total = __reduce_add_sync(0xffffffffu, lane < consumers ? cnt : 0);
          if (lane == 0) {
            mbar_wait(&empty[slot], (((it + k) / stages) & 1) ^ 1);
            mbar_expect_tx(&full[slot], unsigned(total) * run_bytes);
          }
          __syncwarp();  // the slot is free and its bytes announced
          if (lane < consumers && cnt > 0)
            bulk_copy(ring + slot * stage_bytes + lane * runs * run_bytes,
                      copy_src + std::int64_t(k) * runs * run_bytes, unsigned(cnt) * run_bytes,
                      &full[slot]);
          const int scnt = max(0, min(runs, scale_runs.end - (scale_runs.begin + k * runs)));
          for (int r = 0; r < scnt; ++r)
#pragma unroll
            for (int i = 0; i < 8; ++i)
              cp_async4_zfill(&scale_ring[slot][lane / 4][r][(lane % 4) * 8 + i],
                              scale_src + i * p.wscale_cols + (k * runs + r) * run_steps, true);
          cp_async_arrive(&full[slot]);
        }
        __syncwarp();
        continue;
      }

      // Consumers. Token columns past the tile read its last token (never stored).
      const int tok_g = min(g, tokens - 1), tok_a = min(2 * t, tokens - 1),
                tok_b = min(2 * t + 1, tokens - 1);
      const std::uint8_t* act_row = act_s + tok_g * act_codes_stride(p.k) + 8 * t;
      const float* sx_a = scale_s + tok_a * scale_cols;
      const float* sx_b = scale_s + tok_b * scale_cols;
      float acc[2][4];
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[m][c] = 0.0f;

      // One run (4 steps); the lane holds its weight words in v[piece] (piece = 2m + h) and
      // its rows' scale words in wpk; the tokens' codes and scales come from shared memory.
      auto multiply_run = [&](const uint4 (&v)[4], const std::uint32_t (&wpk)[2][2], int run) {
        const int s = run * run_steps;  // first step
        float xa[4], xb[4];
        run_act_scales<EVERY, false>(sx_a, sx_b, s, act_shift, xa, xb);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const uint2 b = *reinterpret_cast<const uint2*>(act_row + (s + u) * step_k);
          const std::uint32_t b0 = fp4_act_low(b.x, b.y), b1 = fp4_act_high(b.x, b.y);
#pragma unroll
          for (int m = 0; m < 2; ++m) {
            const std::uint32_t lo = word_of(v[2 * m], u), hi = word_of(v[2 * m + 1], u);
            const std::uint32_t a[4] = {fp4il_low(lo), fp4il_low(hi), fp4il_high(lo),
                                        fp4il_high(hi)};
            float d[4];
            mma_e4m3_fresh(d, a, b0, b1);
            promote_fp4_step(acc[m], d, wpk[m][0], wpk[m][1], u, xa[u], xb[u]);
          }
        }
      };

      auto runs_at = [&](int k) { return max(0, min(runs, mine.end - (mine.begin + k * runs))); };
      mbar_wait(&act_full[ap % 2], (ap / 2) & 1);
      for (int k = 0; k < n_stages; ++k) {
        const int slot = (it + k) % stages;
        mbar_wait(&full[slot], ((it + k) / stages) & 1);
        const int here = runs_at(k);
        uint4 v[runs][4];
        std::uint32_t wpk[runs][2][2];
        const std::uint8_t* piece = ring + slot * stage_bytes + warp * runs * run_bytes;
#pragma unroll
        for (int r = 0; r < runs; ++r)
          if (r < here) {
#pragma unroll
            for (int q = 0; q < 4; ++q)
              v[r][q] =
                  *reinterpret_cast<const uint4*>(piece + r * run_bytes + (q * 32 + lane) * 16);
#pragma unroll
            for (int m = 0; m < 2; ++m)
#pragma unroll
              for (int h = 0; h < 2; ++h)
                wpk[r][m][h] = scale_ring[slot][warp][r][16 * m + 8 * h + g];
          }
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[slot]);  // the stage's bytes are in registers
#pragma unroll
        for (int r = 0; r < runs; ++r)
          if (r < here) multiply_run(v[r], wpk[r], mine.begin + k * runs + r);
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&act_empty[ap % 2]);  // done with this token tile

      // The warps of a stripe add their K parts in warp order; the first one stores.
      if (cfg.wk > 1) {
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
          for (int c = 0; c < 4; ++c) partial[warp][lane][m * 4 + c] = acc[m][c];
        consumers_sync();
        if (warp % cfg.wk == 0)
#pragma unroll
          for (int m = 0; m < 2; ++m)
#pragma unroll
            for (int c = 0; c < 4; ++c) {
              float sum = 0.0f;
              for (int w = 0; w < cfg.wk; ++w) sum += partial[warp + w][lane][m * 4 + c];
              acc[m][c] = sum;
            }
        consumers_sync();  // partial[] is reused by the next tile
      }
      if (warp % cfg.wk == 0 && n0 < p.n)
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const std::int64_t r = n0 + 16 * m + g + (c < 2 ? 0 : 8);
            const std::int64_t tk = tok0 + 2 * t + (c & 1);
            if (tk < count)
              p.y[group * p.y_group_offset + (row_begin + tk) * p.y_stride + r] = acc[m][c];
          }
    }
  }
}

std::atomic<long> g_launches{0};

std::atomic<bool> g_pipe_gemm{detail::env_switch("DEEPINFER_PIPE_GEMM", false)};

}  // namespace

void set_pipe_gemm(bool on) {
  g_pipe_gemm = on;
}
bool get_pipe_gemm() {
  return g_pipe_gemm;
}
long pipe_gemm_launches() {
  return g_launches;
}

bool pipe_gemm_takes(const block_gemm_params& p) {
  auto aligned16 = [](const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; };
  const bool blocks = p.act_block == 32 || p.act_block == 64 || p.act_block == 128;
  // Bulk copies move whole 16-byte units from 16-byte aligned addresses: the weight's runs,
  // each token's codes (K bytes) and scales (K / act_block floats).
  return g_pipe_gemm && p.fp4 && p.fp4_interleaved && p.wscale_e8m0 != nullptr && blocks &&
         p.offsets != nullptr && p.groups > 0 && p.groups <= max_groups && p.k > 0 &&
         p.k % (step_k * run_steps) == 0 && p.k % (4 * p.act_block) == 0 &&
         p.n % stripe_rows == 0 && p.n > 0 && act_bytes(p.k, p.act_block, 8) <= max_act_bytes &&
         p.act_stride % 16 == 0 && p.act_scale_stride % 4 == 0 &&
         (p.act_group_offset * 4) % (16 * p.act_block) == 0 && aligned16(p.weight) &&
         aligned16(p.act) && aligned16(p.act_scale);
}

pipe_gemm_plan plan_pipe_gemm(const block_gemm_params& p, int sms) {
  pipe_gemm_plan plan;
  // Warps along K as stream_gemm splits this weight (from its shape only), with the same K
  // ranges (whole runs) and the same order of additions: the same bits as stream_gemm.
  const int wk = plan_stream_gemm(p).warps_along_k;
  plan.warps_along_k = wk;
  const std::int64_t rows_per_block = std::int64_t(consumers / wk) * stripe_rows;
  plan.row_blocks = (p.n + rows_per_block - 1) / rows_per_block;
  // Items: (non-empty group, row block); at most `rows` groups are non-empty.
  const std::int64_t groups = p.rows > 0 ? std::min<std::int64_t>(p.rows, p.groups) : p.groups;
  plan.blocks = std::max<std::int64_t>(1, std::min<std::int64_t>(sms, groups * plan.row_blocks));
  plan.tile_tokens = int(std::clamp<std::int64_t>(p.max_rows, 1, 8));
  const std::int64_t tiles = 2 * act_bytes(p.k, p.act_block, plan.tile_tokens);
  plan.stages = int(std::clamp<std::int64_t>((smem_budget - tiles) / stage_bytes, 2, max_stages));
  plan.smem_bytes = plan.stages * std::int64_t(stage_bytes) + tiles;
  return plan;
}

void launch_pipe_gemm(const block_gemm_params& p, cudaStream_t stream) {
  DI_CHECK(pipe_gemm_takes(p),
           "pipe_gemm: grouped (expert) GEMMs of interleaved MXFP4 weights with e8m0 scales, K a "
           "multiple of {} and of 4 activation blocks, at most {} bytes of an 8-token tile, "
           "outputs in stripes of {}, at most {} groups, 16-byte aligned rows (got K {}, {} "
           "outputs, act_block {}, {} groups, {})",
           step_k * run_steps, max_act_bytes, stripe_rows, max_groups, p.k, p.n, p.act_block,
           p.groups, p.offsets ? "grouped" : "dense");
  if (p.max_rows == 0) return;
  ++g_launches;
  const pipe_gemm_plan plan = plan_pipe_gemm(p, detail::multiprocessor_count());
  const pipe_config cfg{plan.warps_along_k, plan.tile_tokens, plan.stages, plan.row_blocks};
  // Per instantiation and device: room for the largest layout.
  static std::atomic<std::size_t> limits_every[detail::max_tracked_devices],
      limits_other[detail::max_tracked_devices];
  const dim3 grid(unsigned(plan.blocks));
  const std::size_t smem = std::size_t(plan.smem_bytes);
  if (p.act_block == 32) {
    detail::ensure_smem(reinterpret_cast<const void*>(&pipe_gemm_kernel<true>), smem_budget,
                        limits_every);
    detail::launch("pipe_gemm", pipe_gemm_kernel<true>, grid, threads, smem, stream, p, cfg);
  } else {
    detail::ensure_smem(reinterpret_cast<const void*>(&pipe_gemm_kernel<false>), smem_budget,
                        limits_other);
    detail::launch("pipe_gemm", pipe_gemm_kernel<false>, grid, threads, smem, stream, p, cfg);
  }
}

}  // namespace di::cuda
