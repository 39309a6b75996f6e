// ring_gemm: block_gemm's dense FP8 GEMM for decode batches of 9..64 rows with V4's scale
// blocks (128 x 128 weight blocks, 128-input activation blocks) on a TMA-filled shared-memory
// ring. OPT-IN (set_ring_gemm / DEEPINFER_RING_GEMM=1): right and tested, a little faster than
// cuBLASLt's block-scaled GEMM kernel by kernel, but no faster in a decode step (session 35,
// H200, kernel rows as act-quant + GEMM graphs, 16 / 64 rows, us: V4 wq_b 16.3 / 17.6 against
// cuBLASLt 17.8 / 19.9, wo_b 18.8 / 20.0 against 21.0 / 21.7, shared_w1 10.9 / 12.9 against
// 12.1 / 12.9; v4-flash-L4 decode b16 2.80-2.81 against 2.80-2.88 ms, b64 4.95-5.03 against
// 4.92-4.93). The same ring with copies only (the consumers skipping the MMAs) read wq_b in
// 13.5 us: the structure itself stays at ~0.6 of the copy rate at this size. V4.1's 32-input
// blocks -- a promotion every 32-input step, pipelined one step deep -- measured 0.13-0.15 of
// the copy rate (against the wide tiles' 0.21-0.41) and were taken out.
//
// Why it was built: cuBLASLt streams V4's projections at 0.36-0.45 of the copy rate at 16..64
// rows and needs its own activation scale layout (a second act_quant after the fused norms);
// dense_wg_gemm's wide tiles (register-batched weight loads) stalled at their cluster splits'
// barriers. Here the weights and the activations go through a shared-memory ring filled by the
// tensor memory accelerator (cp.async.bulk.tensor, 128-byte swizzle), so the bytes in flight
// cost no registers, blocks are persistent (one per SM), and the activation scales are read in
// the layout the fused norms write ([rows, blocks]).
//
// Layout: a block is one producer warp and two consumer warpgroups; a work unit is 128 weight
// rows (a tile: 64 a warpgroup, one 128-row scale block) by one 128-input scale block. A stage
// of the ring holds the unit's weights (128 x 128 bytes) and the 64-token activation tile of the
// same inputs (64 x 128 bytes; TMA fills the rows past the batch with zeros). A consumer
// warpgroup multiplies a stage with four wgmma m64n64k32 e4m3, both operands in shared memory
// (K-major, 128-byte swizzle), summed in the tensor core, then promotes once:
// acc += d * (weight scale * activation scale of the token) -- a promotion every 128 inputs.
// Two sets of MMA results let the next unit's MMAs run while one is promoted. An mbarrier per
// stage counts the TMA bytes landed (full), another the consumer warps done reading it (empty).
//
// Work: with at least ~0.9 of the grid's waves filled by whole tiles (V4's wq_b: 256 tiles),
// a block takes whole tiles -- blockIdx.x, + grid, ... -- over all of K and stores its sums:
// deterministic, and a token's result does not depend on the batch (9..64 rows: the same
// units, the same order). Otherwise (few tiles over long K: wo_b, the shared experts) the
// units of all tiles are cut into one equal contiguous range per block ("stream-K"), and a
// block adds each tile's partial sums into the zeroed output with fp32 atomics, whose order
// varies from run to run: never in the batch-invariant mode (ordered splits), as the wide tiles.
//
// Early weights: the producer requests the first stages' weights before it waits for the
// kernel before it in the stream (programmatic dependent launch, launch.cuh) -- the weights are
// constant -- and their activations after the wait.
#include "kernels/cuda/gemm_kernels.hpp"
#include "kernels/cuda/launch.cuh"

#include "common/error.hpp"
#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/kernel_attributes.hpp"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/dtype.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace di::cuda {

namespace {

using namespace gemm_detail;

constexpr int tile_rows = 128;  // weight rows of a unit: two warpgroups of 64
constexpr int tile_tokens = 64;
constexpr int unit_k = 128;                       // inputs of a unit: one scale block
constexpr int default_stages = 4;                 // (DEEPINFER_RING_GEMM_STAGES=6: six)
constexpr int weight_bytes = tile_rows * unit_k;  // 16 KB a stage
constexpr int act_bytes = tile_tokens * unit_k;   // 8 KB a stage
constexpr int consumers = 256;
constexpr int threads = consumers + 32;  // two consumer warpgroups and a producer warp
constexpr int max_act_blocks = 256;      // K up to 32768: the staged activation scales, 64 KB
constexpr std::int64_t min_rows = 9, max_rows = 64;

struct ring_args {
  const std::uint8_t* wscale_e8m0;
  const float* wscale_f32;
  std::int64_t wscale_cols;
  const float* act_scale;
  std::int64_t act_scale_stride;
  float* y;
  std::int64_t y_stride;
  int rows;
  std::int64_t n;
  int blocks_k;  // 128-input units per tile (= activation and weight scale blocks)
  std::int64_t tiles;
  bool stream_k;
  bool early;
};

std::size_t smem_of(std::int64_t act_blocks, int stages) {
  return 1024 /* alignment */ + std::size_t(stages) * (weight_bytes + act_bytes) +
         std::size_t(act_blocks) * tile_tokens * sizeof(float) + 2 * stages * sizeof(std::uint64_t);
}

/// The units a block walks, in order: `count` of them from (tile, kb), the next one by next()
/// (no 64-bit division per unit: the producer issues a unit's copies from one thread).
struct unit_cursor {
  std::int64_t tile = 0;
  int kb = 0;
  std::int64_t count = 0;
  std::int64_t tile_step = 1;
  int blocks_k = 1;
  __device__ explicit unit_cursor(const ring_args& a) : blocks_k(a.blocks_k) {
    const std::int64_t grid = gridDim.x, b = blockIdx.x;
    if (a.stream_k) {
      const std::int64_t total = a.tiles * a.blocks_k, first = b * total / grid;
      count = (b + 1) * total / grid - first;
      tile = first / a.blocks_k;
      kb = int(first % a.blocks_k);
    } else {
      count = (b < a.tiles ? (a.tiles - 1 - b) / grid + 1 : 0) * a.blocks_k;
      tile = b;
      tile_step = grid;
    }
  }
  __device__ void next() {
    if (++kb == blocks_k) {
      kb = 0;
      tile += tile_step;
    }
  }
};

__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int x, int y,
                                            std::uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3}], [%4];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(x), "r"(y), "r"(smem_addr(bar))
      : "memory");
}

/// A K-major shared-memory operand of 8-row groups of 128-byte rows in TMA's 128-byte swizzle
/// (1024 bytes a group); `smem` 1024-byte aligned, plus k * 32 bytes for the k-th 32-input step.
__device__ __forceinline__ std::uint64_t swizzled_descriptor(const void* smem) {
  const std::uint64_t addr = std::uint64_t(__cvta_generic_to_shared(smem));
  return ((addr & 0x3ffff) >> 4) | (std::uint64_t(1) << 16) | (std::uint64_t(1024 >> 4) << 32) |
         (std::uint64_t(1) << 62);
}

/// d = A B (Acc false: fresh, d only written -- no wait for the MMAs that last wrote it) or
/// d += A B (Acc true), m64n64k32 e4m3, A and B from shared-memory descriptors; d in mma.sync
/// m16n8's layout per 8-token group j at d[4j .. 4j + 3].
#define DI_RING_D32(c)                                                                          \
  c(d[0]), c(d[1]), c(d[2]), c(d[3]), c(d[4]), c(d[5]), c(d[6]), c(d[7]), c(d[8]), c(d[9]),     \
      c(d[10]), c(d[11]), c(d[12]), c(d[13]), c(d[14]), c(d[15]), c(d[16]), c(d[17]), c(d[18]), \
      c(d[19]), c(d[20]), c(d[21]), c(d[22]), c(d[23]), c(d[24]), c(d[25]), c(d[26]), c(d[27]), \
      c(d[28]), c(d[29]), c(d[30]), c(d[31])
#define DI_RING_WGMMA(scale_d)                                                                  \
  "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "                                       \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24," \
  "%25,%26,%27,%28,%29,%30,%31}, %32, %33, " scale_d ", 1, 1;\n"
template <bool Acc>
__device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], std::uint64_t a, std::uint64_t b) {
  if constexpr (Acc)
    asm volatile(DI_RING_WGMMA("1") : DI_RING_D32("+f") : "l"(a), "l"(b));
  else
    asm volatile(DI_RING_WGMMA("0") : DI_RING_D32("=f") : "l"(a), "l"(b));
}
#undef DI_RING_WGMMA
#undef DI_RING_D32

template <int stages>
__global__ void __launch_bounds__(threads, 1)
    ring_gemm_kernel(const __grid_constant__ CUtensorMap wmap,
                     const __grid_constant__ CUtensorMap xmap, const ring_args a) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char* base = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) & ~std::uintptr_t(1023));
  unsigned char* wbuf = base;                          // [stages][128 rows][128 bytes]
  unsigned char* xbuf = wbuf + stages * weight_bytes;  // [stages][64 tokens][128 bytes]
  float* xs = reinterpret_cast<float*>(xbuf + stages * act_bytes);  // [blocks_k][64 tokens]
  auto* full = reinterpret_cast<std::uint64_t*>(xs + a.blocks_k * tile_tokens);
  std::uint64_t* empty = full + stages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unit_cursor walk(a);

  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(full + s, 1);
      mbar_init(empty + s, consumers / 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (warp == consumers / 32) {  // the producer
    if (lane == 0) {
      const int early = a.early ? int(std::min<std::int64_t>(walk.count, stages)) : 0;
      unit_cursor u = walk;
      for (int c = 0; c < early; ++c, u.next()) {
        mbar_expect_tx(full + c, weight_bytes + act_bytes);
        tma_load_2d(wbuf + c * weight_bytes, &wmap, u.kb * unit_k, int(u.tile * tile_rows),
                    full + c);
      }
      asm volatile("griddepcontrol.wait;" ::: "memory");
      asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
      u = walk;
      int s = 0;
      unsigned phase = 0;  // of the ring's pass: the empty barriers' parity to wait for
      for (std::int64_t c = 0; c < walk.count; ++c, u.next()) {
        if (c >= stages) mbar_wait(empty + s, phase ^ 1u);
        if (c >= early) {
          mbar_expect_tx(full + s, weight_bytes + act_bytes);
          tma_load_2d(wbuf + s * weight_bytes, &wmap, u.kb * unit_k, int(u.tile * tile_rows),
                      full + s);
        }
        tma_load_2d(xbuf + s * act_bytes, &xmap, u.kb * unit_k, 0, full + s);
        if (++s == stages) {
          s = 0;
          phase ^= 1u;
        }
      }
    } else {
      asm volatile("griddepcontrol.wait;" ::: "memory");
      asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    }
    return;
  }

  // The consumers: the activation scales of the blocks of K this block's units take (all of
  // them once it walks a whole tile), token-minor, zero past the batch.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const int staged = int(std::min<std::int64_t>(walk.count, a.blocks_k));
  for (int i = threadIdx.x; i < staged * tile_tokens; i += consumers) {
    int kb = walk.kb + i / tile_tokens;
    if (kb >= a.blocks_k) kb -= a.blocks_k;
    const int token = i % tile_tokens;
    xs[kb * tile_tokens + token] =
        token < a.rows ? a.act_scale[std::int64_t(token) * a.act_scale_stride + kb] : 0.f;
  }
  asm volatile("bar.sync 1, %0;\n" ::"n"(consumers) : "memory");

  const int wg = threadIdx.x / 128, warp_in_wg = warp % 4, g = lane / 4, t = lane % 4;
  float acc[32], d0[32], d1[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = 0.f;
  const std::int64_t warp_row = wg * 64 + warp_in_wg * 16;
  // The ring position of the next unit to issue: its stage and the full barriers' parity.
  int s = 0;
  unsigned phase = 0;
  // Waits for the next unit's stage and starts its four MMAs into d (summed in the tensor core).
  auto issue = [&](float(&d)[32]) {
    mbar_wait(full + s, phase);
    const std::uint64_t da = swizzled_descriptor(wbuf + s * weight_bytes + wg * 64 * unit_k);
    const std::uint64_t db = swizzled_descriptor(xbuf + s * act_bytes);
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < unit_k / 32; ++k) {
      if (k == 0)
        wgmma_ss_n64<false>(d, da, db);
      else
        wgmma_ss_n64<true>(d, da + 2 * k, db + 2 * k);
    }
    wgmma_commit();
    if (++s == stages) {
      s = 0;
      phase ^= 1u;
    }
  };
  // The unit to finish next: u, the e-th of the block, in stage done_stage.
  std::int64_t e = 0;
  const std::int64_t total = walk.count;
  int done_stage = 0;
  unit_cursor u = walk;
  // u's weight scale (128-row tiles over 128-row scale blocks).
  auto weight_scale = [&] {
    const std::int64_t at = u.tile * a.wscale_cols + u.kb;
    return a.wscale_f32 ? __ldg(a.wscale_f32 + at) : e8m0_to_f32(__ldg(a.wscale_e8m0 + at));
  };
  // After u's MMAs into d completed: its stage back to the producer, d promoted into acc with
  // the weight scale ws, and at the end of the block's part of a tile the sums stored (or added).
  auto finish = [&](float(&d)[32], float ws) {
#pragma unroll
    for (int i = 0; i < 32; ++i) pin(d[i]);
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + done_stage);
    if (++done_stage == stages) done_stage = 0;
    const float2* sc = reinterpret_cast<const float2*>(xs + u.kb * tile_tokens);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float2 x = sc[4 * j + t];  // tokens 8j + 2t, 8j + 2t + 1
      const float f0 = ws * x.x, f1 = ws * x.y;
      acc[4 * j] += d[4 * j] * f0;
      acc[4 * j + 1] += d[4 * j + 1] * f1;
      acc[4 * j + 2] += d[4 * j + 2] * f0;
      acc[4 * j + 3] += d[4 * j + 3] * f1;
    }
    ++e;
    if (u.kb == a.blocks_k - 1 || e == total) {  // the tile's sums (or part) are done
      const std::int64_t row0 = u.tile * tile_rows + warp_row + g;
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const std::int64_t row = row0 + 8 * ((i / 2) % 2);
        const int token = 8 * (i / 4) + 2 * t + i % 2;
        if (row < a.n && token < a.rows) {
          float* out = a.y + std::int64_t(token) * a.y_stride + row;
          if (a.stream_k)
            atomicAdd(out, acc[i]);
          else
            *out = acc[i];
        }
        acc[i] = 0.f;
      }
    }
    u.next();
  };
  // Two sets of MMA results: unit e + 1's MMAs run while unit e is promoted (its weight
  // scale requested before). Straight-line paths only: a branch merging registers an MMA may
  // still be writing makes ptxas wait for it.
  if (total == 0) return;
  issue(d0);
  for (;;) {
    float ws = weight_scale();
    if (e + 1 >= total) {
      wgmma_wait<0>();
      finish(d0, ws);
      break;
    }
    issue(d1);
    wgmma_wait<1>();
    finish(d0, ws);
    ws = weight_scale();
    if (e + 1 >= total) {
      wgmma_wait<0>();
      finish(d1, ws);
      break;
    }
    issue(d0);
    wgmma_wait<1>();
    finish(d1, ws);
  }
}

std::atomic<bool> g_on{detail::env_switch("DEEPINFER_RING_GEMM", false)};
std::atomic<bool> g_early{detail::env_switch("DEEPINFER_RING_GEMM_EARLY", true)};
std::atomic<long> g_launches{0};
std::atomic<int> g_stages{
    int(detail::env_count("DEEPINFER_RING_GEMM_STAGES", default_stages, 6, default_stages))};

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return PFN_cuTensorMapEncodeTiled_v12000(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

/// A 2-D tensor map of `rows` rows of `k` bytes, `stride` bytes apart, in boxes of `box_rows`
/// x 128 bytes with the 128-byte swizzle (rows past the end read as zeros).
CUtensorMap byte_map(const std::uint8_t* data, std::int64_t k, std::int64_t rows,
                     std::int64_t stride, int box_rows) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {cuuint64_t(k), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(stride)};
  const cuuint32_t box[2] = {cuuint32_t(unit_k), cuuint32_t(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = tensor_map_encoder()(
      &map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<std::uint8_t*>(data), dims, strides, box,
      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  DI_CHECK(r == CUDA_SUCCESS,
           "ring_gemm: cuTensorMapEncodeTiled failed ({}) for {} rows of {} bytes", int(r), rows,
           k);
  return map;
}

bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

}  // namespace

bool ring_gemm_takes_shape(std::int64_t rows, bool fp8, int block_rows, int block_cols,
                           int act_block, std::int64_t k) {
  return g_on && !get_ordered_gemm_splits() && fp8 && rows >= min_rows && rows <= max_rows &&
         block_rows == tile_rows && block_cols == unit_k && act_block == unit_k && k > 0 &&
         k % unit_k == 0 && k / unit_k <= max_act_blocks && tensor_map_encoder() != nullptr;
}

bool ring_gemm_takes(const block_gemm_params& p) {
  if (p.fp4 || p.offsets || p.weight_b || p.split_work || p.groups != 1 || p.n <= 0 ||
      (!p.wscale_e8m0 && !p.wscale_f32))
    return false;
  const std::int64_t rows = std::max(p.rows, p.max_rows);
  return p.rows == rows &&
         ring_gemm_takes_shape(rows, true, p.block_rows, p.block_cols, p.act_block, p.k) &&
         p.act_stride % 16 == 0 && aligned16(p.act) && aligned16(p.weight) &&
         p.act_scale_stride >= p.k / unit_k && p.wscale_cols >= p.k / unit_k;
}

ring_gemm_plan plan_ring_gemm(std::int64_t n, std::int64_t k, int multiprocessors) {
  ring_gemm_plan plan;
  plan.tiles = (n + tile_rows - 1) / tile_rows;
  plan.blocks_k = int(k / unit_k);
  const std::int64_t sms = std::max(1, multiprocessors);
  const std::int64_t waves = (plan.tiles + sms - 1) / sms;
  // Whole tiles where they fill at least 0.9 of the waves they take; else stream-K.
  plan.stream_k = plan.tiles * 10 < waves * sms * 9;
  plan.blocks =
      int(plan.stream_k ? std::min(sms, plan.tiles * plan.blocks_k) : std::min(sms, plan.tiles));
  return plan;
}

void launch_ring_gemm(const block_gemm_params& p, cudaStream_t stream) {
  DI_CHECK(
      ring_gemm_takes(p),
      "ring_gemm: dense FP8 weights with 128 x 128 scale blocks, 128-input activation blocks, "
      "{}..{} rows, K a multiple of 128 up to {}, 16-byte aligned operands, one group, outside "
      "the batch-invariant mode, switched on (got {} rows, K {}, blocks {} x {} / {}, switch "
      "{})",
      min_rows, max_rows, max_act_blocks * unit_k, p.rows, p.k, p.block_rows, p.block_cols,
      p.act_block, g_on ? "on" : "off");
  ++g_launches;
  const ring_gemm_plan plan = plan_ring_gemm(p.n, p.k, detail::multiprocessor_count());
  const CUtensorMap wmap = byte_map(p.weight, p.k, p.n, p.k, tile_rows);
  const CUtensorMap xmap = byte_map(p.act, p.k, p.rows, p.act_stride, tile_tokens);
  const ring_args args{p.wscale_e8m0, p.wscale_f32,  p.wscale_cols, p.act_scale, p.act_scale_stride,
                       p.y,           p.y_stride,    int(p.rows),   p.n,         plan.blocks_k,
                       plan.tiles,    plan.stream_k, g_early.load()};
  if (plan.stream_k && !p.y_zeroed)  // the blocks add their parts into it
    zero_outputs(p.y, p.y_elements, stream);
  static std::atomic<std::size_t> limits[2][detail::max_tracked_devices];
  auto go = [&](auto kernel, int stages, int which) {
    detail::ensure_smem(reinterpret_cast<const void*>(kernel), smem_of(max_act_blocks, stages),
                        limits[which]);
    detail::launch("ring_gemm", kernel, dim3(unsigned(plan.blocks)), dim3(threads),
                   smem_of(plan.blocks_k, stages), stream, wmap, xmap, args);
  };
  if (g_stages.load() == 6)
    go(&ring_gemm_kernel<6>, 6, 0);
  else
    go(&ring_gemm_kernel<default_stages>, default_stages, 1);
}

void set_ring_gemm(bool on) {
  g_on = on;
}
bool get_ring_gemm() {
  return g_on;
}
void set_ring_gemm_early(bool on) {
  g_early = on;
}
long ring_gemm_launches() {
  return g_launches;
}

}  // namespace di::cuda
