// Device helpers shared by the GEMM kernels (sm90_block_gemm.cu: shared-memory tiles for many
// tokens; stream_gemm.cu: register-streamed weights for decode tiles of <= 8 tokens;
// skinny_gemm.cu, pipe_gemm.cu, fp8_split_gemm.cu, fp8_gemv.cu): the cp.async copies, the
// streaming weight loads, the FP8 MMA, the e4m3 pair decode, the MXFP4 -> e4m3 nibble decode
// and its scale, a run's activation scales and the MXFP4 step promotion, the non-empty expert
// group scan, and the plain / atomic / ordered-split output store.
#pragma once

#include "kernels/cuda/fresh_loads.cuh"
#include "kernels/dtype.hpp"

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace di::cuda::gemm_detail {

/// Two e4m3 codes (low byte first) -> their exact values (e4m3 -> f16 -> f32).
__device__ __forceinline__ float2 e4m3x2_to_float2(std::uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two & 0xffffu), __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

/// bf16x2 of (lo, hi), lo in the low half (round to nearest).
__device__ __forceinline__ std::uint32_t bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

/// Two e4m3 codes (low byte first) times the power of two s as bf16x2 (exact).
__device__ __forceinline__ std::uint32_t e4m3x2_scaled_bf16(std::uint32_t two, float s) {
  const float2 f = e4m3x2_to_float2(two);
  return bf16x2(f.x * s, f.y * s);
}

/// 8 weight bytes, read-only and read once: not kept in L1, the next 256 bytes of the row
/// prefetched into L2.
__device__ __forceinline__ uint2 load_stream8(const std::uint8_t* p) {
  uint2 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];\n"
      : "=r"(v.x), "=r"(v.y)
      : "l"(p));
  return v;
}

/// 16 weight bytes, read-only and read once: not kept in L1, the next 256 bytes of the row
/// prefetched into L2 (a warp's next batches).
__device__ __forceinline__ uint4 load_stream16(const std::uint8_t* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

/// K splits launched as one thread-block cluster of `splits` blocks (split = the block's rank
/// in it): splits 1.. hand their sums `acc` to split 0 through `slot` (this thread's M x 4
/// floats of shared memory, free to reuse), and split 0 adds them to its own in rank order --
/// ((a + b) + c) + ..., the same bits whichever block finishes first; with two splits a + b,
/// the bits fp32 atomic adds of the two onto a zeroed output give. `holds`: whether this
/// thread has sums (every thread of every block must call this: it waits at the cluster's
/// barriers).
template <int M>
__device__ __forceinline__ void add_split_ranks(float (&acc)[M][4], float* slot, int split,
                                                int splits, bool holds) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  __syncthreads();  // the block's earlier readers of the slots are done
  if (split > 0 && holds) {
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int c = 0; c < 4; ++c) slot[m * 4 + c] = acc[m][c];
  }
  cluster.sync();
  if (split == 0 && holds) {
    for (int r = 1; r < splits; ++r) {
      const float* peer = cluster.map_shared_rank(slot, unsigned(r));
#pragma unroll
      for (int m = 0; m < M; ++m)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[m][c] += peer[m * 4 + c];
    }
  }
  cluster.sync();  // the other splits' shared memory stays until split 0 has read it
}
/// Two K splits as one cluster: add_split_ranks with two ranks (a + b).
template <int M>
__device__ __forceinline__ void add_split_pair(float (&acc)[M][4], float* slot, int split,
                                               bool holds) {
  add_split_ranks(acc, slot, split, 2, holds);
}

/// 16 bytes global -> shared, zero-filled when !valid.
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* global, bool valid) {
  const unsigned dst = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global),
               "r"(valid ? 16 : 0));
}
/// 16 weight bytes global -> shared, read once: not kept in L1, the next 256 bytes of the row
/// prefetched into L2 (load_stream16's hints, for a shared-memory ring).
__device__ __forceinline__ void cp_async16_stream(void* smem, const void* global) {
  const unsigned dst = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(dst), "l"(global));
}
/// 4 bytes global -> shared, zero-filled when !valid.
__device__ __forceinline__ void cp_async4_zfill(void* smem, const void* global, bool valid) {
  const unsigned dst = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(global),
               "r"(valid ? 4 : 0));
}

/// d += a b on the FP8 tensor cores: m16n8k32, e4m3 x e4m3, fp32 accumulate.
__device__ __forceinline__ void mma_e4m3(float (&d)[4], const std::uint32_t (&a)[4],
                                         std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// d = a b (fresh accumulators: no zeroing moves between promotions).
__device__ __forceinline__ void mma_e4m3_fresh(float (&d)[4], const std::uint32_t (&a)[4],
                                               std::uint32_t b0, std::uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%10,%10,%10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}

// Eight e2m1 nibbles (inputs k0..k7, low nibble first) -> e4m3 codes of value * 2^-6: the
// sign moves to bit 7 and the three magnitude bits to bits 2..4 (exponent and mantissa line
// up, subnormal 0.5 included). Low nibbles give (k0, k2, k4, k6), high ones (k1, k3, k5, k7);
// the activations are permuted to match (fp4_act_low / fp4_act_high).
__device__ __forceinline__ std::uint32_t fp4_low(std::uint32_t w) {
  return ((w << 4) & 0x80808080u) | ((w << 2) & 0x1c1c1c1cu);
}
__device__ __forceinline__ std::uint32_t fp4_high(std::uint32_t w) {
  return (w & 0x80808080u) | ((w >> 2) & 0x1c1c1c1cu);
}

// weight_matrix::interleaved also moves the bits within each byte, so that its decode takes
// fewer ALU instructions (the routed experts' decode kernels are issue-bound on the ALU pipe:
// Nsight Compute, V4 w2 at batch 64, session 31: ALU 64% of cycles, 7 of the 385 instructions
// per warp and run of 4 steps for each weight word). A byte b of plain codes (input 2i in the low
// nibble: sign b3, magnitude b2..b0; input 2i + 1 in the high one: b7, b6..b4) is stored as
// sign(2i) -> 7, magnitude(2i) -> 4..2 (already where fp4_low puts it), sign(2i + 1) -> 5,
// magnitude bit 2 (2i + 1) -> 6, bits 1..0 -> 1..0. fp4il_low is then one mask and fp4il_high
// two masks, a high multiply (the right shift, on the FMA pipe) and a shift-add (ptxas: LEA),
// 5 instructions a word where fp4_low / fp4_high took 7; both give exactly fp4_low / fp4_high of
// the plain word. Measured on the chained kernel: 340 instructions per warp and run, not 385.
DI_HOST_DEVICE constexpr std::uint32_t fp4il_from_plain(std::uint32_t b) {
  return ((b & 0x08080808u) << 4) | ((b & 0x07070707u) << 2) | ((b & 0x80808080u) >> 2) |
         (b & 0x40404040u) | ((b >> 4) & 0x03030303u);
}
DI_HOST_DEVICE constexpr std::uint32_t fp4il_to_plain(std::uint32_t x) {
  return ((x >> 4) & 0x08080808u) | ((x >> 2) & 0x07070707u) | ((x << 2) & 0x80808080u) |
         (x & 0x40404040u) | ((x << 4) & 0x30303030u);
}
static_assert(fp4il_to_plain(fp4il_from_plain(0x01234567u)) == 0x01234567u &&
              fp4il_to_plain(fp4il_from_plain(0x89abcdefu)) == 0x89abcdefu);
__device__ __forceinline__ std::uint32_t fp4il_low(std::uint32_t w) {
  return w & 0x9c9c9c9cu;
}
__device__ __forceinline__ std::uint32_t fp4il_high(std::uint32_t w) {
  // (w & 0x23) << 2 and (w & 0x40) >> 2 have no bit in common: the add is an or (the high
  // product is the right shift)
  return (w & 0x23232323u) * 4u + __umulhi(w & 0x40404040u, 0x40000000u);
}
/// The e4m3 codes of a weight word as stored, interleaved (IL) or plain: the even inputs' into
/// low, the odd inputs' into high.
template <bool IL>
__device__ __forceinline__ void fp4_codes(std::uint32_t w, std::uint32_t& low,
                                          std::uint32_t& high) {
  low = IL ? fp4il_low(w) : fp4_low(w);
  high = IL ? fp4il_high(w) : fp4_high(w);
}
/// Activation codes of inputs k0..k3 (x) and k4..k7 (y) -> (k0, k2, k4, k6) and (k1, k3, k5, k7).
__device__ __forceinline__ std::uint32_t fp4_act_low(std::uint32_t x, std::uint32_t y) {
  return __byte_perm(x, y, 0x6420);
}
__device__ __forceinline__ std::uint32_t fp4_act_high(std::uint32_t x, std::uint32_t y) {
  return __byte_perm(x, y, 0x7531);
}

/// 2^(e - 127 + 6) for an e8m0 byte: the MXFP4 scale times the 2^6 the codes above lack.
__device__ __forceinline__ float fp4_scale_factor(std::uint8_t e) {
  const int biased = min(int(e) + 6, 254);
  return __int_as_float(biased << 23);
}
/// 2^(e - 127) for byte u of a word of e8m0 scale bytes, without fp4_scale_factor_of's 2^6 and
/// clamp below (the folded promotion below carries the 2^6 on the activation side): a shift and a
/// mask. Byte 0 gives 0 (2^-127, below the smallest normal: its FP4 products are < 2^-124) and
/// byte 255 -- e8m0's NaN, the CPU's NaN -- gives infinity, so such a block's outputs are not
/// finite, as the CPU's are not.
__device__ __forceinline__ float fp4_weight_factor_of(std::uint32_t word, int u) {
  return __uint_as_float((u == 3 ? __umulhi(word, 0x80000000u) : word << (23 - 8 * u)) &
                         0x7f800000u);
}

/// fp4_scale_factor of byte u (0..3, known at compile time) of a word of scale bytes: the byte
/// moved into the exponent field (fp4_weight_factor_of: one shift, an IMAD, and one mask), then
/// the bias and the clamp in one add-min -- the same bits as fp4_scale_factor(word >> 8u), in
/// fewer ALU instructions than a byte extraction, a clamp and a shift.
__device__ __forceinline__ float fp4_scale_factor_of(std::uint32_t word, int u) {
  const std::uint32_t e = __float_as_uint(fp4_weight_factor_of(word, u));  // byte u at 23..30
  return __uint_as_float(min(e + (6u << 23), 254u << 23));
}

/// The folded promotion of a run of 4 MXFP4 steps that share one activation scale (V4's
/// 128-input activation blocks): blk = sum over the run's steps u of d_u * (weight scale of step
/// u) -- products exact (powers of two), summed in step order -- then, once per run,
/// promote_fp4_run adds blk * (activation scale * 2^6) into acc. Per step and value one FFMA
/// instead of promote_fp4_step's FMUL and FFMA, and the activation scale once a run; the sums
/// round differently from promote_fp4_step's (each step promoted on its own), to the same order.
/// (blk and d: 4 consecutive values of a thread's accumulator fragment.)
__device__ __forceinline__ void fold_fp4_step(float* blk, const float* d, std::uint32_t w_lo_word,
                                              std::uint32_t w_hi_word, int u) {
  const float w_lo = fp4_weight_factor_of(w_lo_word, u);
  const float w_hi = fp4_weight_factor_of(w_hi_word, u);
  if (u == 0) {
    blk[0] = d[0] * w_lo, blk[1] = d[1] * w_lo, blk[2] = d[2] * w_hi, blk[3] = d[3] * w_hi;
  } else {
    blk[0] = fmaf(d[0], w_lo, blk[0]), blk[1] = fmaf(d[1], w_lo, blk[1]);
    blk[2] = fmaf(d[2], w_hi, blk[2]), blk[3] = fmaf(d[3], w_hi, blk[3]);
  }
}
/// acc += blk * x for a run folded by fold_fp4_step: rows g / g + 8 in blk[0..1] / blk[2..3],
/// token columns 2t / 2t + 1 taking xa64 / xb64 (activation scale times 2^6).
__device__ __forceinline__ void promote_fp4_run(float* acc, const float* blk, float xa64,
                                                float xb64) {
  acc[0] = fmaf(blk[0], xa64, acc[0]), acc[1] = fmaf(blk[1], xb64, acc[1]);
  acc[2] = fmaf(blk[2], xa64, acc[2]), acc[3] = fmaf(blk[3], xb64, acc[3]);
}

/// The activation scales of the 4 steps from step s for a lane's two token columns (scale rows
/// sx_a, sx_b; act_shift = log2 of the activation block): with 32-input blocks (Every) one
/// 16-byte load each (read-only path when Ldg: global memory), else one load per step.
template <bool Every, bool Ldg>
__device__ __forceinline__ void run_act_scales(const float* sx_a, const float* sx_b, int s,
                                               int act_shift, float (&xa)[4], float (&xb)[4]) {
  if constexpr (Every) {
    const float4 a4 = Ldg ? di::cuda::detail::load_fresh(reinterpret_cast<const float4*>(sx_a + s))
                          : *reinterpret_cast<const float4*>(sx_a + s);
    const float4 b4 = Ldg ? di::cuda::detail::load_fresh(reinterpret_cast<const float4*>(sx_b + s))
                          : *reinterpret_cast<const float4*>(sx_b + s);
    xa[0] = a4.x, xa[1] = a4.y, xa[2] = a4.z, xa[3] = a4.w;
    xb[0] = b4.x, xb[1] = b4.y, xb[2] = b4.z, xb[3] = b4.w;
  } else {
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int col = ((s + u) * 32) >> act_shift;
      xa[u] = sx_a[col];
      xb[u] = sx_b[col];
    }
  }
}

/// One MXFP4 step promoted: acc += d * (weight scale * activation scale), d a fresh m16n8
/// result whose rows g / g + 8 take byte u of the e8m0 scale words w_lo / w_hi and whose token
/// columns 2t / 2t + 1 the activation scales xa / xb.
__device__ __forceinline__ void promote_fp4_step(float (&acc)[4], const float (&d)[4],
                                                 std::uint32_t w_lo_word, std::uint32_t w_hi_word,
                                                 int u, float xa, float xb) {
  const float w_lo = fp4_scale_factor_of(w_lo_word, u);
  const float w_hi = fp4_scale_factor_of(w_hi_word, u);
  acc[0] += d[0] * (w_lo * xa);
  acc[1] += d[1] * (w_lo * xb);
  acc[2] += d[2] * (w_hi * xa);
  acc[3] += d[3] * (w_hi * xb);
}

/// Word i (0..3, known at compile time after unrolling) of a 16-byte load.
__device__ __forceinline__ std::uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

__device__ __forceinline__ int log2_int(int v) {
  return 31 - __clz(v);
}

/// A thread's contiguous run of groups [g0, g1), its non-empty ones (mine) and those of the
/// runs before it (before): one pass over the offsets, each thread counting its run, a block
/// scan placing the runs. Called by every thread of a block of Warps warps (it synchronises).
struct nonempty_run {
  int g0, g1, mine, before;
};
template <int Warps>
__device__ nonempty_run count_nonempty_groups(const std::int32_t* offsets, int groups) {
  __shared__ int warp_total[Warps];
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int per = (groups + Warps * 32 - 1) / (Warps * 32);
  nonempty_run r{min(groups, tid * per), 0, 0, 0};
  r.g1 = min(groups, r.g0 + per);
  for (int g = r.g0; g < r.g1; ++g) r.mine += offsets[g + 1] > offsets[g] ? 1 : 0;
  int incl = r.mine;  // inclusive scan within the warp
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int v = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += v;
  }
  if (lane == 31) warp_total[warp] = incl;
  __syncthreads();
  r.before = incl - r.mine;
  for (int w = 0; w < warp; ++w) r.before += warp_total[w];
  return r;
}

/// The index of the n-th group (from 0) whose offsets range is not empty, or -1; called by
/// every thread of a block of Warps warps (it synchronises). Expert GEMMs of a few routed
/// tokens touch at most `rows` of their groups: the grid then has one row per possible
/// non-empty group instead of one per expert (6 instead of 384 at batch 1), so the few weights
/// that are read stream through the whole GPU.
template <int Warps>
__device__ int nth_nonempty_group(const std::int32_t* offsets, int groups, int n) {
  __shared__ int found;
  if (threadIdx.x == 0) found = -1;  // ordered before the writes below by the scan's barrier
  const nonempty_run r = count_nonempty_groups<Warps>(offsets, groups);
  if (n >= r.before && n < r.before + r.mine) {
    int seen = r.before;
    for (int g = r.g0; g < r.g1; ++g)
      if (offsets[g + 1] > offsets[g] && seen++ == n) found = g;
  }
  __syncthreads();
  return found;
}

/// Stores a block's outputs -- for_each_output(f) calls f(index into y, value) for each --
/// plainly (one K split), with fp32 atomic adds into the zeroed y, or, when p.split_work is
/// given, in split order: this split's partials go to split_work, p.split_counters[tile_id]
/// counts the tile's finished splits, and the last one adds every split's partials in split
/// order (the same order whichever block finishes last) and zeroes the counter for the next
/// launch or replay. Every thread of the block calls it (it synchronises).
template <typename Params, typename ForEach>
__device__ __forceinline__ void store_split_outputs(const Params& p, int split, int k_splits,
                                                    std::int64_t tile_id,
                                                    ForEach&& for_each_output) {
  if (k_splits > 1 && p.split_work) {
    __shared__ int last_split;
    float* mine = p.split_work + std::int64_t(split) * p.y_elements;
    for_each_output([&](std::int64_t o, float v) { mine[o] = v; });
    __threadfence();  // the partials are visible device-wide before the count says so
    __syncthreads();
    if (threadIdx.x == 0) {
      const unsigned done = atomicAdd(p.split_counters + tile_id, 1u);
      last_split = done == unsigned(k_splits - 1);
      if (last_split) p.split_counters[tile_id] = 0;
    }
    __syncthreads();
    if (!last_split) return;
    __threadfence();
    for_each_output([&](std::int64_t o, float) {
      float sum = 0.0f;
      for (int sp = 0; sp < k_splits; ++sp)
        sum += __ldcg(p.split_work + std::int64_t(sp) * p.y_elements + o);
      p.y[o] = sum;
    });
  } else if (k_splits > 1) {
    for_each_output([&](std::int64_t o, float v) { atomicAdd(p.y + o, v); });
  } else {
    for_each_output([&](std::int64_t o, float v) { p.y[o] = v; });
  }
}

/// Where a block of a (grouped) block_gemm launch works: blockIdx.y is its group (or, with a
/// compacted grid, the y-th non-empty one), blockIdx.z its token tile and K split. group < 0:
/// nothing to do (uniform over the block; every thread must call this, it may synchronise).
struct block_site {
  int group;
  int split;
  std::int64_t tile;
  std::int64_t row_begin;  ///< the group's first row of activations and outputs
  std::int64_t count;      ///< its rows
};
template <int Warps, typename Params>
__device__ block_site locate_block(const Params& p, bool compact, int k_splits) {
  block_site b{};
  b.group =
      compact ? nth_nonempty_group<Warps>(p.offsets, p.groups, int(blockIdx.y)) : int(blockIdx.y);
  if (b.group < 0) return b;
  b.split = int(blockIdx.z % unsigned(k_splits));
  b.tile = blockIdx.z / unsigned(k_splits);
  b.count = p.rows;
  if (p.offsets) {
    b.row_begin = p.offsets[b.group];
    b.count = p.offsets[b.group + 1] - b.row_begin;
  }
  return b;
}

}  // namespace di::cuda::gemm_detail
