// fp8_split_gemm: grouped_linear's decode kernel for 1..64 fp32 rows and an FP8 e4m3 weight
// with e8m0 block scales, on the bf16 tensor cores without losing the activations' precision:
// each activation x is split into hi = bf16(x) and lo = bf16(x - hi) (16 of fp32's 24
// significant bits; what is left is below 2^-17 |x|) and y = W hi + W lo, the weight decoded
// exactly (e4m3 times a power of two is a bf16 value) and the products exact in the MMA's
// fp32 accumulation (mma.sync m16n8k16 bf16). fp8_gemv (CUDA cores) read every activation row
// from L2 once per weight row -- 32 bytes of activations per weight byte at 8 rows, so it ran
// at the L2's pace, not the HBM's; here a warp's 16 weight rows share each activation load and
// the 4 row slices of a block share them again through L1.
//
// Each warp owns 16 weight rows and a range of K; a lane loads 16 contiguous codes of row g
// and of row g + 8 per 64 inputs (bytes 16t..16t+15), two such 64-input halves per batch, one
// batch loading while the previous one multiplies. The MMA's k slots are a permutation of
// those inputs -- in step s of a half, slots 2t, 2t+1 hold inputs 16t + 4s + {0, 1} and slots
// 2t+8, 2t+9 inputs 16t + 4s + {2, 3} -- and the activations (token g of each 8-token tile,
// the same 16 inputs: four float4 loads) take the same permutation, so that the sum is over
// the same products. Two warps of a block split K and add in warp order through shared
// memory; a second block along K (decided by the weight's shape only) runs in a cluster with
// the first and hands it its sums through distributed shared memory (a + b, as the fp32 atomic
// adds onto a zeroed output this replaced gave, without their memset). A row's result does
// not depend on the other rows or on the token tiles, so a token's output does not change
// with the batch.
#include "kernels/cuda/fresh_loads.cuh"
#include "kernels/cuda/gemm_kernels.hpp"
#include "kernels/cuda/kernel_attributes.hpp"
#include "kernels/cuda/launch.cuh"

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/block_gemm_common.cuh"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/dtype.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace di::cuda {

namespace {

constexpr int slices = 4;  // 16-row slices of a block
constexpr int wk = 2;      // warps of a slice along K
constexpr int warps = slices * wk;
constexpr int half_k = 64;  // inputs of one 16-byte load per row and lane
constexpr int batch_k = 2 * half_k;

/// x0, x1 -> (hi, lo) bf16x2 words with x = hi + lo + (below 2^-17 |x|).
__device__ __forceinline__ void split2(float x0, float x1, std::uint32_t& hi, std::uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
  const float2 back = __bfloat1622float2(h);
  hi = *reinterpret_cast<const std::uint32_t*>(&h);
  lo = gemm_detail::bf16x2(x0 - back.x, x1 - back.y);
}

/// d += a b on the bf16 tensor cores: m16n8k16, fp32 accumulate.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const std::uint32_t (&a)[4],
                                         std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// One batch of a lane's weights: 16 codes of rows g (lo) and g + 8 (hi) in each 64-input
/// half, and their block scales.
struct weight_batch {
  uint4 lo[2], hi[2];
  float s_lo[2], s_hi[2];
};

/// A lane's two weight rows in a warp's 16 (n0 + g and n0 + g + 8 of group `group`, clamped to
/// the last row) and their scale rows: what both kernels load and decode the same way.
struct lane_rows {
  const std::uint8_t *w_lo, *w_hi, *sc_lo, *sc_hi;
  int col_shift, t;

  __device__ lane_rows(const fp8_gemv_params& p, std::int64_t group, std::int64_t n0, int g, int t_)
      : t(t_) {
    const std::int64_t r_lo = group * p.out + min(n0 + g, p.out - 1);
    const std::int64_t r_hi = group * p.out + min(n0 + g + 8, p.out - 1);
    w_lo = p.w + r_lo * p.in + 16 * t;
    w_hi = p.w + r_hi * p.in + 16 * t;
    sc_lo = p.scale_e8m0 + (r_lo / p.block_rows) * p.scale_cols;
    sc_hi = p.scale_e8m0 + (r_hi / p.block_rows) * p.scale_cols;
    col_shift = 31 - __clz(p.block_cols);
  }

  /// The lane's codes and scales of `Halves` 64-input halves from k0; zero past ke (whose
  /// activations are zero too).
  template <int Halves>
  __device__ __forceinline__ void load(weight_batch& b, std::int64_t k0, std::int64_t ke) const {
#pragma unroll
    for (int h = 0; h < Halves; ++h) {
      const std::int64_t k = k0 + h * half_k + 16 * t;
      if (k < ke) {
        b.lo[h] = gemm_detail::load_stream16(w_lo + k0 + h * half_k);
        b.hi[h] = gemm_detail::load_stream16(w_hi + k0 + h * half_k);
        b.s_lo[h] = e8m0_to_f32(sc_lo[k >> col_shift]);
        b.s_hi[h] = e8m0_to_f32(sc_hi[k >> col_shift]);
      } else {
        b.lo[h] = b.hi[h] = make_uint4(0, 0, 0, 0);
        b.s_lo[h] = b.s_hi[h] = 0.0f;
      }
    }
  }
};

/// Step s's A fragment (m16n8k16 bf16) of half h: inputs 16t + 4s + {0, 1} of rows g / g + 8 in
/// k slots 2t, 2t + 1 and inputs 16t + 4s + {2, 3} in slots 2t + 8, 2t + 9, decoded exactly.
__device__ __forceinline__ void a_fragment(const weight_batch& b, int h, int s,
                                           std::uint32_t (&a)[4]) {
  const std::uint32_t wl = (&b.lo[h].x)[s], wh = (&b.hi[h].x)[s];
  a[0] = gemm_detail::e4m3x2_scaled_bf16(wl, b.s_lo[h]);
  a[1] = gemm_detail::e4m3x2_scaled_bf16(wh, b.s_hi[h]);
  a[2] = gemm_detail::e4m3x2_scaled_bf16(wl >> 16, b.s_lo[h]);
  a[3] = gemm_detail::e4m3x2_scaled_bf16(wh >> 16, b.s_hi[h]);
}

/// y's rows n0 + g and n0 + g + 8 (within the group) for the lane's tokens 8j + 2t (+1), in
/// mma.sync m16n8's accumulator layout; rows and tokens past the ends are not written.
template <int NT>
__device__ __forceinline__ void store_rows(const fp8_gemv_params& p, const float (&acc)[NT][4],
                                           std::int64_t group, std::int64_t n0, int g, int t) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const std::int64_t r = n0 + g + (c < 2 ? 0 : 8);
      const std::int64_t tk = 8 * j + 2 * t + (c & 1);
      if (r >= p.out || tk >= p.rows) continue;
      p.y[tk * p.groups * p.out + group * p.out + r] = acc[j][c];
    }
}

template <int NT>
__device__ __forceinline__ void zero(float (&acc)[NT][4]) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[j][c] = 0.0f;
}

template <int NT>
__global__ void __launch_bounds__(warps * 32, NT >= 8 ? 1 : 2)
    fp8_split_gemm_kernel(fp8_gemv_params p, int per_split) {
  detail::grid_dependency_sync();
  __shared__ float partial[slices][32][NT * 4];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const int slice = warp % slices, wk_i = warp / slices;
  const std::int64_t group = blockIdx.y;
  const std::int64_t n0 = std::int64_t(blockIdx.x) * slices * 16 + slice * 16;  // within group
  // This warp's K range: the split's, halved between the slice's two warps in whole batches.
  const std::int64_t split_begin = std::int64_t(blockIdx.z) * per_split;
  const std::int64_t split_end = min(p.in, split_begin + per_split);
  const std::int64_t half_range =
      ((split_end - split_begin + wk - 1) / wk + batch_k - 1) / batch_k * batch_k;
  const std::int64_t kb = split_begin + wk_i * half_range;
  const std::int64_t ke = min(split_end, kb + half_range);
  const bool active = n0 < p.out && kb < ke;

  const lane_rows rows(p, group, n0, g, t);
  const std::int64_t ld = p.groups * p.in;  // x's row stride
  const float* xrow[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j)
    xrow[j] = p.x + min(std::int64_t(8 * j + g), p.rows - 1) * ld + group * p.in + 16 * t;

  auto load = [&](weight_batch& b, std::int64_t k0) { rows.load<2>(b, k0, ke); };

  float acc[NT][4];
  zero(acc);

  auto multiply = [&](const weight_batch& b, std::int64_t k0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::int64_t k = k0 + h * half_k;
      const bool valid = k + 16 * t < ke;
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        std::uint32_t a[4];
        a_fragment(b, h, s, a);
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          if (valid)
            v = di::cuda::detail::load_fresh(reinterpret_cast<const float4*>(xrow[j] + k) + s);
          std::uint32_t hi0, lo0, hi1, lo1;
          split2(v.x, v.y, hi0, lo0);
          split2(v.z, v.w, hi1, lo1);
          mma_bf16(acc[j], a, hi0, hi1);
          mma_bf16(acc[j], a, lo0, lo1);
        }
      }
    }
  };

  if (active) {
    weight_batch r[2];
    load(r[0], kb);
    std::int64_t k0 = kb;
    while (k0 < ke) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {  // unrolled: r[] indices known at compile time
        if (k0 >= ke) break;
        if (k0 + batch_k < ke) load(r[(i + 1) % 2], k0 + batch_k);
        multiply(r[i], k0);
        k0 += batch_k;
      }
    }
  }

  // The slice's second warp hands its sums to the first, which adds them in that order.
  if (wk_i == 1) {
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) partial[slice][lane][j * 4 + c] = acc[j][c];
  }
  __syncthreads();
  const bool sums = wk_i == 0;  // (no early return: K splits meet the cluster barriers below)
  if (sums) {
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[j][c] += partial[slice][lane][j * 4 + c];
  }
  // Two K splits run as one cluster: split 1 hands its sums to split 0 through distributed
  // shared memory (a + b: the bits of the atomic adds onto a zeroed y this replaced).
  if (gridDim.z > 1)
    gemm_detail::add_split_pair(acc, &partial[slice][lane][0], int(blockIdx.z), sums);
  if (!sums || blockIdx.z != 0 || n0 >= p.out) return;
  store_rows(p, acc, group, n0, g, t);
}

// fp8_split_wg: the same product for 9..64 rows on the warpgroup MMA (wgmma m64nNk16 bf16,
// N = 16, 32 or 64 tokens). fp8_split_gemm's mma.sync at 64 rows ran at ~0.08 of the copy rate
// (V4 wo_a: 99 us a layer, 400 us of a 5.9 ms batch-64 step): every warp re-read and re-split
// the 64 tokens' activations for its 16 rows, with two warps per scheduler to hide it. Here a
// warpgroup takes 64 weight rows (fp8_split_gemm's block rows, so the same K splits) -- with
// the staged B image below, two warpgroups a block share each staged chunk (WGS); per chunk of 128
// inputs (64 at 64 tokens) its threads split the tokens' activations once into shared memory as
// wgmma's K-major B (hi and lo parts, the MMA's k slots in fp8_split_gemm's permutation of the
// inputs), each thread decodes its A fragments from the FP8 codes as fp8_split_gemm does, and its
// wgmmas (per k16 step: hi, lo) run while the next chunk's codes and activations load. Same
// products, fp32 accumulation in another order: results agree with fp8_split_gemm to rounding, not
// bit for bit; a row's result does not depend on the other rows (GPU test: 9 rows alone give the
// bits they get among 17..64). Measured (H200, V4 wo_a 8 x 1024 x 4096, CUDA graph, us, this /
// mma.sync): 16 rows 25.6 / 29.0, 32 rows 35.1 / 49.8, 64 rows 54.7 / 98.3 -- still only 0.14 of
// the copy rate at 64 rows: each 64-input chunk runs its split, barrier, decode and wgmmas in
// sequence, two blocks per SM.
//
// B layout per chunk: step q (= half * 4 + s), part (hi, lo), token group j (8 tokens), K half
// kc (slots 0-7 / 8-15) -> a core matrix of 8 tokens x 16 bytes at ((q * 2 + part) * NT + j) *
// 256 + kc * 128: K-adjacent core matrices 128 bytes apart, token groups 256 (wg_gemm's n32
// geometry; a bf16 k16 row is the 32 bytes an e4m3 k32 row is).

/// Inputs per chunk: two 64-input halves, one at 64 tokens (whose activations held for the
/// next chunk would not fit the registers beside the accumulators).
template <int NT>
constexpr int wg_halves = NT >= 8 ? 1 : 2;
constexpr int wg_max_chunk = 2 * half_k;
constexpr int wg_threads = 128;
/// Bytes of one chunk's B (both parts, every token group): what the block stages per chunk.
template <int NT>
constexpr int wg_chunk_bytes = wg_halves<NT>* half_k / 16 * 2 * NT * 256;
/// Staged B (p.b_image): chunks in flight per block, each in its own shared-memory stage.
constexpr int wg_stages = 4;

// Staged B (fp8_gemv_params::b_image, the default): the activations are split into their bf16
// parts once, by wg_split_image_kernel, into global memory as the very bytes each chunk's B
// holds in shared memory -- [group][chunk of K] blocks of wg_chunk_bytes -- and a block's
// thread 0 copies them in with the bulk-copy engine, wg_stages - 1 chunks ahead, each stage
// signalled by its mbarrier. Measured at 64 tokens (session 31's profile of the direct path):
// every chunk ran its activation loads, split, stores and two barriers in sequence with only
// two blocks an SM to hide them, 56 us for V4's 33.5 MB wo_a. The same bytes reach the same
// wgmmas in the same order, so the results are the direct path's bits.

/// Inputs 16 tq + 4 s .. + 3 of token 8 j + row within a 64-input half, v, split into their
/// bf16 parts and stored where step q (= half * 4 + s) of a chunk's B (at `chunk`) keeps them:
/// hi and lo in their core matrices of token group j, k slots 2 tq, 2 tq + 1 (v.x, v.y) and
/// 8 + 2 tq, 9 + 2 tq (v.z, v.w, 128 bytes on). fp8_split_wg's B layout, written by the direct
/// path's threads into shared memory and by wg_split_image_kernel into the B image alike.
template <int NT>
__device__ __forceinline__ void store_split(std::uint8_t* chunk, float4 v, int q, int j, int row,
                                            int tq) {
  std::uint32_t hi0, lo0, hi1, lo1;
  split2(v.x, v.y, hi0, lo0);
  split2(v.z, v.w, hi1, lo1);
  std::uint8_t* hi = chunk + ((q * 2 + 0) * NT + j) * 256 + row * 16 + 4 * tq;
  std::uint8_t* lo = chunk + ((q * 2 + 1) * NT + j) * 256 + row * 16 + 4 * tq;
  *reinterpret_cast<std::uint32_t*>(hi) = hi0;
  *reinterpret_cast<std::uint32_t*>(hi + 128) = hi1;
  *reinterpret_cast<std::uint32_t*>(lo) = lo0;
  *reinterpret_cast<std::uint32_t*>(lo + 128) = lo1;
}

/// The B image of x: per (group, chunk, token, float4 of inputs) one thread, writing the words
/// fp8_split_wg_kernel's store_x writes to shared memory for that float4 (zeros past the rows
/// and past K).
template <int NT>
__global__ void wg_split_image_kernel(fp8_gemv_params p, std::int64_t chunks) {
  detail::grid_dependency_sync();
  constexpr int chunk = wg_halves<NT> * half_k, tokens = 8 * NT, quads = chunk / 4;
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.groups * tokens * chunks * quads) return;
  const int m = int(i % quads);
  const std::int64_t c = (i / quads) % chunks, gt = i / quads / chunks;
  const int token = int(gt % tokens);
  const std::int64_t group = gt / tokens, k = c * chunk + 4 * m;
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (token < p.rows && k < p.in)
    v = di::cuda::detail::load_fresh(
        reinterpret_cast<const float4*>(p.x + token * p.groups * p.in + group * p.in + k));
  const int h = 4 * m / half_k, r = 4 * m % half_k, tq = r / 16, q = h * 4 + (r % 16) / 4;
  store_split<NT>(p.b_image + (group * chunks + c) * wg_chunk_bytes<NT>, v, q, token / 8, token % 8,
                  tq);
}

/// WGS warpgroups a block (staged B only), each its own 64 rows, sharing every staged chunk of
/// B: WGS = 2 halves the B bytes read from L2 per weight row (set_split_wg_warpgroups).
template <int NT, bool STAGED, int DEPTH, int WGS = 1>
__global__ void __launch_bounds__(wg_threads* WGS, WGS == 1 ? 2 : 1)
    fp8_split_wg_kernel(fp8_gemv_params p, int per_split) {
  static_assert(WGS == 1 || STAGED, "two warpgroups share a staged B only");
  using gemm_detail::pin;
  constexpr int halves = wg_halves<NT>, chunk = halves * half_k;
  constexpr int steps = chunk / 16;           // k16 steps per chunk
  constexpr int quads = halves * 4 * NT / 4;  // activation float4s per thread per chunk
  constexpr int chunk_bytes = wg_chunk_bytes<NT>;
  // Direct: one chunk's B, written by the threads. Staged: wg_stages chunks in the dynamic
  // shared memory, written by the bulk-copy engine.
  __shared__ alignas(128) std::uint8_t bsm_direct[STAGED ? 128 : chunk_bytes];
  extern __shared__ __align__(128) std::uint8_t wg_stage_smem[];
  __shared__ std::uint64_t full[STAGED ? wg_stages : 1];
  std::uint8_t* const bsm = STAGED ? wg_stage_smem : bsm_direct;
  static_assert(chunk_bytes * (STAGED ? wg_stages : 1) >= wg_threads * WGS * NT * 16,
                "the split hand-over fits bsm");
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const std::int64_t group = blockIdx.y;
  const std::int64_t n0 = std::int64_t(blockIdx.x) * (64 * WGS) + warp * 16;  // the warp's rows
  const std::int64_t kb = std::int64_t(blockIdx.z) * per_split;
  const std::int64_t ke = min(p.in, kb + per_split);

  const lane_rows rows(p, group, n0, g, t);
  const std::int64_t ld = p.groups * p.in;  // x's row stride

  // Activations: this thread's float4s of a chunk -- item i (of the warp's 2 NT) is step q =
  // warp * (2 NT / 4) ... spread so that a warp's stores fill whole 128-byte core-matrix rows:
  // lane = 4 * row + tq, item -> (q, j); the float4 holds inputs 16 tq + 4 s .. + 3 of half h.
  const int row = lane / 4, tq = lane % 4;
  auto item_q = [&](int i) { return (warp * quads + i) / NT; };
  auto item_j = [&](int i) { return (warp * quads + i) % NT; };
  auto load_x = [&](float4(&xr)[quads], std::int64_t k0) {
#pragma unroll
    for (int i = 0; i < quads; ++i) {
      const int q = item_q(i), j = item_j(i);
      const std::int64_t k = k0 + (q / 4) * half_k + 16 * tq + 4 * (q % 4);
      const std::int64_t token = 8 * j + row;
      xr[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (k < ke && token < p.rows)
        xr[i] = di::cuda::detail::load_fresh(
            reinterpret_cast<const float4*>(p.x + token * ld + group * p.in + k));
    }
  };
  auto store_x = [&](const float4(&xr)[quads]) {
#pragma unroll
    for (int i = 0; i < quads; ++i) store_split<NT>(bsm, xr[i], item_q(i), item_j(i), row, tq);
  };

  auto load_w = [&](weight_batch& wb, std::int64_t k0) { rows.load<halves>(wb, k0, ke); };

  float acc[NT][4];
  zero(acc);

  // One chunk: its activations (in xr) split into bsm, its A fragments decoded from wb, whose
  // registers then take the codes two chunks on (DRAM's latency is longer than a chunk's
  // wgmmas); the next chunk's activations (from L2) load into xr while the wgmmas run. Staged:
  // the chunk's B is in `b` already (the caller waited for its stage).
  float4 xr[STAGED ? 1 : quads];
  auto multiply = [&](weight_batch& wb, std::int64_t k0, const std::uint8_t* b) {
    if constexpr (!STAGED) {
      __syncthreads();  // the chunk before's wgmmas have read bsm (every warp waited for them)
      store_x(xr);
      gemm_detail::fence_proxy_async();
      __syncthreads();
    }
    std::uint32_t a[steps][4];
#pragma unroll
    for (int q = 0; q < steps; ++q) {
      a_fragment(wb, q / 4, q % 4, a[q]);
#pragma unroll
      for (int c = 0; c < 4; ++c) pin(a[q][c]);
    }
    if (k0 + DEPTH * chunk < ke) load_w(wb, k0 + DEPTH * chunk);
    if constexpr (!STAGED)
      if (k0 + chunk < ke) load_x(xr, k0 + chunk);
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) pin(acc[j][c]);
    gemm_detail::wgmma_fence();
#pragma unroll
    for (int q = 0; q < steps; ++q) {
#pragma unroll
      for (int part = 0; part < 2; ++part)
        gemm_detail::wgmma_bf16<NT>(
            acc, a[q], gemm_detail::smem_descriptor(b + (q * 2 + part) * NT * 256, 128, 256));
    }
    gemm_detail::wgmma_commit();
    gemm_detail::wgmma_wait<0>();
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) pin(acc[j][c]);
#pragma unroll
    for (int q = 0; q < steps; ++q)
#pragma unroll
      for (int c = 0; c < 4; ++c) pin(a[q][c]);
  };

  // The weights are constant: the first two chunks' codes load before the wait for the kernel
  // before (programmatic dependent launch); the activations after it.
  if constexpr (STAGED) {
    if (threadIdx.x == 0) {
      for (int s = 0; s < wg_stages; ++s) gemm_detail::mbar_init(&full[s], 1);
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
  }
  weight_batch wb[DEPTH];  // chunks of weights in flight
#pragma unroll
  for (int d = 0; d < DEPTH; ++d)
    if (kb + d * chunk < ke) load_w(wb[d], kb + d * chunk);
  detail::grid_dependency_sync();
  if constexpr (STAGED) {
    // This split's chunks of the group's B image, each into stage (chunk % wg_stages) once the
    // chunk that stage held before has been multiplied by every warp.
    const std::int64_t chunks = (p.in + chunk - 1) / chunk;
    const int n = kb < ke ? int((ke - kb + chunk - 1) / chunk) : 0;
    const std::uint8_t* image = p.b_image + (group * chunks + kb / chunk) * chunk_bytes;
    auto stage_in = [&](int c) {
      const int s = c % wg_stages;
      gemm_detail::mbar_expect_tx(&full[s], unsigned(chunk_bytes));
      gemm_detail::bulk_copy(bsm + s * chunk_bytes, image + std::int64_t(c) * chunk_bytes,
                             unsigned(chunk_bytes), &full[s]);
    };
    if (threadIdx.x == 0)
      for (int c = 0; c < wg_stages - 1 && c < n; ++c) stage_in(c);
    for (int c = 0; c < n;) {
#pragma unroll
      for (int i = 0; i < DEPTH; ++i) {  // unrolled: wb[] indices known at compile time
        if (c >= n) break;
        __syncthreads();  // chunk c - 1's wgmmas are done in every warp: its stage is free
        if (threadIdx.x == 0 && c + wg_stages - 1 < n) stage_in(c + wg_stages - 1);
        gemm_detail::mbar_wait(&full[c % wg_stages], unsigned(c / wg_stages) & 1u);
        multiply(wb[i], kb + std::int64_t(c) * chunk, bsm + (c % wg_stages) * chunk_bytes);
        ++c;
      }
    }
  } else {
    if (kb < ke) load_x(xr, kb);
    for (std::int64_t k0 = kb; k0 < ke;) {
#pragma unroll
      for (int i = 0; i < DEPTH; ++i) {  // unrolled: wb[] indices known at compile time
        if (k0 >= ke) break;
        multiply(wb[i], k0, bsm);
        k0 += chunk;
      }
    }
  }

  // The K splits run as one cluster: splits 1.. hand their sums to split 0, added in rank
  // order, through the B buffer (free now: add_split_ranks synchronizes the block first).
  if (gridDim.z > 1)
    gemm_detail::add_split_ranks(acc, reinterpret_cast<float*>(bsm) + threadIdx.x * NT * 4,
                                 int(blockIdx.z), int(gridDim.z), true);
  if (blockIdx.z != 0 || n0 >= p.out) return;
  store_rows(p, acc, group, n0, g, t);
}

/// Chunks of weights a staged fp8_split_wg warp keeps in flight: 4 (DEEPINFER_SPLIT_WG_DEPTH=2:
/// two, as the direct path). H200, session 32, V4 wo_a, kernel rows (us, 4 / 2): M=16 22.9 /
/// 26.1, M=32 27.6 / 32.8, M=64 48.3 / 50.2 -- the freed activation registers hold them.
int wg_depth() {
  static const int depth = [] {
    const auto d = detail::env_count("DEEPINFER_SPLIT_WG_DEPTH", 4, 4, 2);
    if (d == 3)
      std::fprintf(stderr, "deepinfer: DEEPINFER_SPLIT_WG_DEPTH=3 ignored (2 or 4); using 4\n");
    return d == 2 ? 2 : 4;
  }();
  return depth;
}

std::atomic<int> g_split_wg_wgs{int(detail::env_count("DEEPINFER_SPLIT_WG_WGS", 2, 2, 1))};

/// Blocks along K: two when the row blocks alone leave the GPU short of streaming warps
/// (the weight's shape only, never the rows).
int k_splits_for(const fp8_gemv_params& p) {
  const std::int64_t blocks = p.groups * ((p.out + slices * 16 - 1) / (slices * 16));
  return blocks < 2 * 132 && p.in >= 8 * batch_k ? 2 : 1;
}

/// fp8_split_wg's blocks along K: fp8_split_gemm's rule (two, as a cluster, when the row blocks
/// alone leave the GPU short of blocks; the weight's shape only, never the rows, so a row's
/// result does not change with the batch). DEEPINFER_SPLIT_WG_KSPLITS=1|2|4 forces it for
/// measurements -- V4 wo_a at 64 rows (H200, session 25): 64.0 / 54.7 / 109.9 us.
int wg_k_splits(const fp8_gemv_params& p) {
  static const std::int64_t forced = detail::env_count("DEEPINFER_SPLIT_WG_KSPLITS", 0, 4);
  if (forced == 1 || forced == 2 || forced == 4) return int(forced);
  return k_splits_for(p);
}

}  // namespace

bool fp8_split_gemm_fits(std::int64_t rows, std::int64_t in, int block_cols, bool e8m0) {
  return e8m0 && rows >= 1 && rows <= fp8_split_gemm_max_rows && in % 16 == 0 && block_cols >= 16 &&
         (block_cols & (block_cols - 1)) == 0;
}

void launch_fp8_split_gemm(const fp8_gemv_params& p, cudaStream_t stream) {
  DI_CHECK(fp8_split_gemm_fits(p.rows, p.in, p.block_cols, p.scale_e8m0 != nullptr),
           "fp8_split_gemm: {} rows of {} inputs with {}-input scale blocks ({} scales) are not "
           "supported",
           p.rows, p.in, p.block_cols, p.scale_e8m0 ? "e8m0" : "f32");
  if (p.groups * p.out == 0) return;
  const int splits = k_splits_for(p);
  const std::int64_t per_split = (p.in + splits - 1) / splits;
  const dim3 grid(unsigned((p.out + slices * 16 - 1) / (slices * 16)), unsigned(p.groups),
                  unsigned(splits));
  const int per = int((per_split + batch_k - 1) / batch_k * batch_k);
  detail::by_row_tiles<8>(p.rows, [&](auto nt) {  // 8-row tiles
    detail::launch_in("fp8_split_gemm", fp8_split_gemm_kernel<decltype(nt)::value>, grid,
                      warps * 32, dim3(1, 1, unsigned(splits)), 0, stream, p, per);
  });
}

int split_wg_warpgroups() {
  return g_split_wg_wgs;
}

void set_split_wg_warpgroups(int wgs) {
  DI_CHECK(wgs == 1 || wgs == 2, "fp8_split_wg: {} warpgroups a block (1 or 2)", wgs);
  g_split_wg_wgs = wgs;
}

bool fp8_split_wg_fits(std::int64_t rows, std::int64_t in, int block_cols, bool e8m0) {
  return rows > 8 && fp8_split_gemm_fits(rows, in, block_cols, e8m0);
}

void launch_fp8_split_wg(const fp8_gemv_params& p, cudaStream_t stream) {
  DI_CHECK(fp8_split_wg_fits(p.rows, p.in, p.block_cols, p.scale_e8m0 != nullptr),
           "fp8_split_wg: {} rows of {} inputs with {}-input scale blocks ({} scales) are not "
           "supported (9..64 rows, e8m0)",
           p.rows, p.in, p.block_cols, p.scale_e8m0 ? "e8m0" : "f32");
  DI_CHECK(reinterpret_cast<std::uintptr_t>(p.x) % 16 == 0 && (p.groups * p.in) % 4 == 0,
           "fp8_split_wg: activations not 16-byte aligned");
  if (p.groups * p.out == 0) return;
  const int splits = wg_k_splits(p);
  const std::int64_t per_split = (p.in + splits - 1) / splits;
  const int wgs = p.b_image != nullptr ? split_wg_warpgroups() : 1;
  const dim3 grid(unsigned((p.out + 64 * wgs - 1) / (64 * wgs)), unsigned(p.groups),
                  unsigned(splits));
  const int per = int((per_split + wg_max_chunk - 1) / wg_max_chunk * wg_max_chunk);
  detail::by_row_tiles<8>(p.rows, [&](auto nt) {  // 16, 32 or 64 tokens
    constexpr int NT = decltype(nt)::value < 2 ? 2 : decltype(nt)::value;
    if (p.b_image == nullptr) {
      detail::launch_in("fp8_split_wg", fp8_split_wg_kernel<NT, false, 2>, grid, wg_threads,
                        dim3(1, 1, unsigned(splits)), 0, stream, p, per);
      return;
    }
    DI_CHECK(reinterpret_cast<std::uintptr_t>(p.b_image) % 128 == 0,
             "fp8_split_wg: B image not 128-byte aligned");
    constexpr int chunk = wg_halves<NT> * half_k;
    const std::int64_t chunks = (p.in + chunk - 1) / chunk;
    const std::int64_t items = p.groups * 8 * NT * chunks * (chunk / 4);
    detail::launch("fp8_split_wg_image", wg_split_image_kernel<NT>, unsigned((items + 255) / 256),
                   256, 0, stream, p, chunks);
    const std::size_t smem = std::size_t(wg_stages) * wg_chunk_bytes<NT>;
    auto go = [&](auto kernel, std::atomic<std::size_t>(&limits)[detail::max_tracked_devices]) {
      detail::ensure_smem(reinterpret_cast<const void*>(kernel), smem, limits);
      detail::launch_in("fp8_split_wg", kernel, grid, wg_threads * wgs,
                        dim3(1, 1, unsigned(splits)), smem, stream, p, per);
    };
    static std::atomic<std::size_t> limits2[detail::max_tracked_devices];
    static std::atomic<std::size_t> limits4[detail::max_tracked_devices];
    static std::atomic<std::size_t> limits4w[detail::max_tracked_devices];
    if (wg_depth() == 4 && wgs == 2)
      go(&fp8_split_wg_kernel<NT, true, 4, 2>, limits4w);
    else if (wg_depth() == 4)
      go(&fp8_split_wg_kernel<NT, true, 4>, limits4);
    else
      go(&fp8_split_wg_kernel<NT, true, 2>, limits2);
  });
}

std::size_t fp8_split_wg_image_bytes(std::int64_t rows, std::int64_t groups, std::int64_t in) {
  std::size_t bytes = 0;
  detail::by_row_tiles<8>(rows, [&](auto nt) {
    constexpr int NT = decltype(nt)::value < 2 ? 2 : decltype(nt)::value;
    constexpr int chunk = wg_halves<NT> * half_k;
    bytes = std::size_t(groups) * std::size_t((in + chunk - 1) / chunk) * wg_chunk_bytes<NT>;
  });
  return bytes;
}

}  // namespace di::cuda
