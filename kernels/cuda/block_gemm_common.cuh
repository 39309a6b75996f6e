// Device helpers shared by the GEMM kernels (sm90_block_gemm.cu: shared-memory tiles for many
// tokens; stream_gemm.cu: register-streamed weights for decode tiles of <= 8 tokens;
// fp8_split_gemm.cu, fp8_gemv.cu): the FP8 MMA, the streaming weight load, the e4m3 pair
// decode, the MXFP4 -> e4m3 nibble decode
// and its scale, and the compacted-grid lookup of non-empty expert groups.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace di::cuda::gemm_detail {

/// Two e4m3 codes (low byte first) -> their exact values (e4m3 -> f16 -> f32).
__device__ __forceinline__ float2 e4m3x2_to_float2(std::uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two & 0xffffu), __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
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

/// Word i (0..3, known at compile time after unrolling) of a 16-byte load.
__device__ __forceinline__ std::uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

__device__ __forceinline__ int log2_int(int v) {
  return 31 - __clz(v);
}

/// The index of the n-th group (from 0) whose offsets range is not empty, or -1; called by
/// every thread of a block of Warps warps (it synchronises). Expert GEMMs of a few routed
/// tokens touch at most `rows` of their groups: the grid then has one row per possible
/// non-empty group instead of one per expert (6 instead of 384 at batch 1), so the few weights
/// that are read stream through the whole GPU. One pass over the offsets: each thread counts
/// the non-empty groups of a contiguous run, a block scan places the runs.
template <int Warps>
__device__ int nth_nonempty_group(const std::int32_t* offsets, int groups, int n) {
  __shared__ int warp_total[Warps];
  __shared__ int found;
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int per = (groups + Warps * 32 - 1) / (Warps * 32);
  const int g0 = min(groups, tid * per), g1 = min(groups, g0 + per);
  int mine = 0;
  for (int g = g0; g < g1; ++g) mine += offsets[g + 1] > offsets[g] ? 1 : 0;
  int incl = mine;  // inclusive scan within the warp
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int v = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += v;
  }
  if (tid == 0) found = -1;
  if (lane == 31) warp_total[warp] = incl;
  __syncthreads();
  int before = incl - mine;
  for (int w = 0; w < warp; ++w) before += warp_total[w];
  if (n >= before && n < before + mine) {
    int seen = before;
    for (int g = g0; g < g1; ++g)
      if (offsets[g + 1] > offsets[g] && seen++ == n) found = g;
  }
  __syncthreads();
  return found;
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
  b.group = compact ? nth_nonempty_group<Warps>(p.offsets, p.groups, int(blockIdx.y))
                    : int(blockIdx.y);
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
