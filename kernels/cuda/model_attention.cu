// Sparse attention with sinks on the tensor cores (the CUDA twin of ops::sparse_attention,
// fused with the cache decode): per query token and group of 64 heads, one block walks the
// token's rows (window ring rows, then selected compressed entries) in tiles of 64, decodes
// each tile's packed FP8/FP4 rows straight into shared memory as fp16 (exact for FP4 rows and
// for FP8 blocks with amax above 448 * 2^-16), computes S = Q K^T with the warpgroup MMA
// (wgmma m64n32k16, both operands read from shared memory) and O += P V with mma.sync m16n8k16
// (fp16 in, fp32 accumulate; q pre-multiplied by the softmax scale) and an online softmax, and
// adds the sink to the denominator at the end. Short row lists are split across blocks
// (flash-decoding) and combined by a second kernel.
//
// Block: 512 threads (16 warps, 4 warpgroups). Shared memory (from a 1024-byte aligned base):
// Q [64][D] fp16 in wgmma's K-major layout with the 128-byte swizzle (see swz()), K [64][D]
// fp16 in its K-major layout without swizzle (see blk()), S [64][68] f32 twice, P [64][72] fp16,
// row statistics, the FP4 byte table, the staged packed rows. Phase 1: warpgroup (rh, kh) computes
// S for rows 32rh.. over dims kh*D/2..; phase 2: 8 threads per head update max/sum and write P;
// phase 3: warp (hg, dq) accumulates O for heads 32hg.. and dims dq*D/8.. in registers. The next
// tile's packed rows are copied into shared memory (cp.async) while the current tile is multiplied.
// (Session 30: the mma.sync phase 1 before this waited on its ldmatrix loads -- ncu at batch
// 128: a third of the kernel's stall samples, short scoreboard. bench_attention_decode, same
// call, flushed us at batch 1 / 32 / 64 / 128: mma.sync 19.9 / 39.6 / 50.6 / 86.2; this layout
// 19.7 / 39.4 / 50.0 / 84.0; Q and K both swizzled 20.4 / 39.9 / 50.4 / 86.0; both in blk()'s
// layout 22.0 / 39.5 / 48.7 / 79.1 -- fastest per tile, but Q's loads in the 8-row pattern that
// layout's stores need cost batch 1 about 2 us.)
#include "kernels/cuda/fresh_loads.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/model_common.cuh"
#include "kernels/cuda/wgmma.cuh"

#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>

namespace di::cuda {

namespace {

using detail::dev_rows;

constexpr int kThreads = 512;
constexpr int kHeads = 64;  // heads per block (M of both products)
constexpr int kRows = 64;   // kv rows per tile
constexpr int kSld = kRows + 4;
constexpr int kPld = kRows + 8;

struct attn_args {
  const float* q;
  float* out;
  const float* sinks;
  int tokens, heads;
  float scale;
  dev_rows win, ext;
  const std::int32_t* win_idx;
  const std::int32_t* ext_idx;
  int win_k, ext_k;
  bool win_fast, ext_fast;
  int splits, tiles_per_split;
  int stage_ld;    // bytes per staged packed row (a multiple of 16)
  float* part_o;   // [splits, tokens, heads, D]
  float* part_ml;  // [splits, tokens, heads, 2]
};

template <int D>
struct layout {
  static constexpr std::size_t q_off = 0;
  static constexpr std::size_t k_off = q_off + std::size_t(kHeads) * D * 2;
  static constexpr std::size_t s_off = k_off + std::size_t(kRows) * D * 2;
  static constexpr std::size_t s2_off = s_off + std::size_t(kHeads) * kSld * 4;  // 2nd k half
  static constexpr std::size_t p_off = s2_off + std::size_t(kHeads) * kSld * 4;
  static constexpr std::size_t stat_off = p_off + std::size_t(kHeads) * kPld * 2;
  static constexpr std::size_t stage_off = stat_off + std::size_t(3 * kHeads + kRows) * 4;
  /// bytes of the staging area for packed rows of at most max_stage_row bytes
  static constexpr std::size_t lut_off = stage_off;  // [256] u32: byte -> fp16 pair of its nibbles
  static constexpr std::size_t kind_off = lut_off + 256 * 4;    // [kRows] i32 row kinds
  static constexpr std::size_t row_off = kind_off + kRows * 4;  // [kRows] i64 rows (slow path)
  static constexpr std::size_t stage_rows_off = row_off + kRows * 8;
  static constexpr std::size_t bytes(int stage_ld) {
    return stage_rows_off + std::size_t(kRows) * stage_ld;
  }
  static constexpr int chunks = D / 64;  // 8-value chunks per thread per tile
  /// bytes to allocate: the layout plus the pad that aligns its base to 1024 bytes
  static constexpr std::size_t alloc(int stage_ld) { return bytes(stage_ld) + 1024; }
};

/// Where value (r, c) of a [64][D] fp16 tile (Q or K) lies in shared memory, in halves: wgmma's
/// K-major layout with the 128-byte swizzle -- atoms of 8 rows x 64 values (1024 bytes, the
/// 16-byte chunk c / 8 % 8 of row r stored at chunk (c / 8 ^ r) % 8), 8 row groups of one
/// 64-value column block after another, then the next column block. A row's 128 bytes of one
/// atom are contiguous (a warp writing a row: no bank conflict), and the 8 rows of one chunk
/// column lie in 8 different bank groups (an ldmatrix matrix: no conflict either).
template <int D>
__device__ __forceinline__ int swz(int r, int c) {
  return (c >> 6) * (64 * 64) + (r >> 3) * 512 + (r & 7) * 64 + ((((c >> 3) ^ r) & 7) << 3) +
         (c & 7);
}

/// Where value (r, c) of the K tile lies in shared memory, in halves: wgmma's K-major layout
/// without swizzle, core matrices of 8 rows x 8 values (128 contiguous bytes), K-adjacent ones
/// next to each other, then the next 8 rows. An 8 x 8 block is one ldmatrix matrix and one
/// conflict-free 128-byte access. (Session 30, bench_attention_decode at batch 128, Q swizzled:
/// 84 us with K in this layout, 86 with K swizzled like Q.)
template <int D>
__device__ __forceinline__ int blk(int r, int c) {
  return ((r >> 3) * (D / 8) + (c >> 3)) * 64 + (r & 7) * 8 + (c & 7);
}

/// The low word of a K-major 128-byte-swizzle wgmma descriptor of the atom column at `p` (start
/// address, LBO unused: 1); swz_desc_hi holds SBO = 1024 bytes (8 rows) and the swizzle mode.
/// The kernel keeps only low words in registers (whole descriptors spilled at D = 512).
__device__ __forceinline__ std::uint32_t swz_desc_lo(const void* p) {
  return ((unsigned(__cvta_generic_to_shared(p)) & 0x3ffffu) >> 4) | (1u << 16);
}
constexpr std::uint64_t swz_desc_hi = (std::uint64_t(1) << 62) | (std::uint64_t(1024 >> 4) << 32);

__device__ __forceinline__ void ldsm_x4(std::uint32_t (&r)[4], const void* p) {
  const unsigned a = unsigned(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_trans(std::uint32_t (&r)[4], const void* p) {
  const unsigned a = unsigned(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void mma_f16(float (&c)[4], const std::uint32_t (&a)[4],
                                        std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ std::uint32_t pack_h2(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&v);
}
__device__ __forceinline__ __half2 as_h2(std::uint32_t u) {
  return *reinterpret_cast<const __half2*>(&u);
}
__device__ __forceinline__ std::uint32_t h2_bits(__half2 v) {
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

/// e2m1 nibble -> float (same values as di::e2m1_to_f32, -0 for code 8).
__device__ __forceinline__ float e2m1_fast(std::uint32_t n) {
  const std::uint32_t c = n & 7u;
  const std::uint32_t bits =
      c >= 2u ? ((((c >> 1) + 126u) << 23) | ((c & 1u) << 22)) : (c ? 0x3f000000u : 0u);
  return __uint_as_float(bits | ((n & 8u) << 28));
}

/// What row `s` of a token's list is: 0 unused, 1/2 fast window/extra (staged packed rows),
/// 3/4 window/extra decoded straight from global memory (f32 rows, unaligned formats).
enum row_kind : int { kNone = 0, kFastWin = 1, kFastExt = 2, kSlowWin = 3, kSlowExt = 4 };

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned a = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::);
}

/// Slot `s` of token t as loaded but not yet checked: its raw index and list. Loaded one tile
/// ahead so that the index read's latency hides behind a tile's products.
struct pending_slot {
  std::int32_t idx;
  bool win;
};
__device__ __forceinline__ pending_slot load_slot(const attn_args& a, int t, int s) {
  if (s >= a.win_k + a.ext_k) return {-1, true};
  const bool win = s < a.win_k;
  return {win ? di::cuda::detail::load_fresh(a.win_idx + std::int64_t(t) * a.win_k + s)
              : di::cuda::detail::load_fresh(a.ext_idx + std::int64_t(t) * a.ext_k + (s - a.win_k)),
          win};
}

/// Row tid / 8 of the next tile: its kind and row into sKind/sRow (lane 0 of the 8), and the
/// packed bytes the fast path decodes into `stage` ([kRows][stage_ld]), 16 bytes per
/// cp.async, split over the row's 8 threads.
__device__ __forceinline__ void stage_row(const attn_args& a, pending_slot ps, std::uint8_t* stage,
                                          int stage_ld, int* sKind, std::int64_t* sRow) {
  const int row = int(threadIdx.x) >> 3, part = int(threadIdx.x) & 7;
  const dev_rows& tb = ps.win ? a.win : a.ext;
  const bool valid = ps.idx >= 0 && ps.idx < tb.rows;
  const bool fast = ps.win ? a.win_fast : a.ext_fast;
  const int kind =
      !valid ? kNone : (fast ? (ps.win ? kFastWin : kFastExt) : (ps.win ? kSlowWin : kSlowExt));
  if (part == 0) {
    sKind[row] = kind;
    sRow[row] = ps.idx;
  }
  if (valid && fast) {
    const std::uint8_t* src = tb.data + std::size_t(ps.idx) * std::size_t(tb.f.row_bytes);
    for (int off = part * 16; off < tb.f.row_bytes; off += 8 * 16)
      cp_async16(stage + row * stage_ld + off, src + off);
  }
  cp_async_commit();
}

/// fp16 of a power-of-two scale 2^k (0 below 2^-24; callers keep k <= 15).
__device__ __forceinline__ std::uint32_t h2_pow2(int k) {
  const std::uint32_t h = k >= -14 ? std::uint32_t(k + 15) << 10 : (k >= -24 ? 1u << (k + 24) : 0u);
  return h | (h << 16);
}

/// fp16 pairs of the 8 e4m3 codes in `w` times the e8m0 scale `e` (exact unless the scale is
/// below 2^-15, when values under 2^-24 round).
__device__ __forceinline__ uint4 fp8x8_to_h(uint2 w, std::uint8_t e) {
  std::uint32_t r[4];
  const int k = int(e) - 127;
  if (k <= 15 && e != 0) {
    const __half2 sc = as_h2(h2_pow2(k));
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const std::uint32_t word = j < 2 ? w.x : w.y;
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
          __nv_fp8x2_storage_t((word >> (16 * (j % 2))) & 0xffffu), __NV_E4M3);
      r[j] = h2_bits(__hmul2(*reinterpret_cast<const __half2*>(&h), sc));
    }
  } else {  // out of fp16's range: through fp32 (saturates to inf above 65504)
    const float sc = e8m0_to_f32(e);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const std::uint32_t word = j < 2 ? w.x : w.y;
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
          __nv_fp8x2_storage_t((word >> (16 * (j % 2))) & 0xffffu), __NV_E4M3);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
      r[j] = pack_h2(f.x * sc, f.y * sc);
    }
  }
  return make_uint4(r[0], r[1], r[2], r[3]);
}

/// fp16 pairs of the 8 e2m1 codes in `w` (low nibble first) through the byte table `lut`
/// (byte -> fp16 pair of its two nibbles), times the block scale.
__device__ __forceinline__ uint4 fp4x8_to_h(std::uint32_t w, const std::uint32_t* lut, __half2 sc) {
  std::uint32_t r[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) r[j] = h2_bits(__hmul2(as_h2(lut[(w >> (8 * j)) & 0xffu]), sc));
  return make_uint4(r[0], r[1], r[2], r[3]);
}

__device__ __forceinline__ __half2 fp4_scale_h2(bool e4m3_scale, std::uint8_t b) {
  if (e4m3_scale) {
    const __half_raw h = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(b), __NV_E4M3);
    return __half2(__half(h), __half(h));
  }
  const float sc = e8m0_to_f32(b);
  return __floats2half2_rn(sc, sc);
}

/// Where this thread's chunk of 8 values lies in a packed row of one format. kThreads is a
/// multiple of D / 8, so the chunk's column d0 is the same in every row the thread decodes:
/// the offsets are worked out once per block (the block-scale index divides by a runtime block
/// size, which cost a software division per chunk inside the tile loop).
struct chunk_plan {
  int scale_off;    ///< byte of the chunk's block scale within the row
  int code_off;     ///< first byte of the chunk's codes within the row
  int raw_off;      ///< first byte of the chunk's fp32 values (raw dims; V4's rope tail), or -1
  bool fp4;         ///< e2m1 codes (else e4m3)
  bool e4m3_scale;  ///< fp4_e4m3 rows: e4m3 block scales (else e8m0)
};

/// The chunk column (in values) thread `tid` decodes in every row of a tile: lanes 8 apart
/// take neighbouring chunks, the 8 lanes between them 8 neighbouring rows (one 128-byte core
/// matrix of blk()'s layout per 8 lanes: conflict-free stores).
template <int D>
__device__ __forceinline__ int chunk_col(int tid) {
  static_assert(kThreads % D == 0, "a thread's chunk column is the same in every row");
  return ((tid >> 3) % (D / 8)) * 8;
}

template <int D>
__device__ __forceinline__ chunk_plan plan_chunk(const detail::dev_format& f) {
  const int d0 = chunk_col<D>(int(threadIdx.x));
  if (d0 >= f.quant_dims)  // is_fast: quant_dims % 8 == 0, so a chunk is codes or raw values
    return {0, 0, f.code_bytes + f.scale_bytes + (d0 - f.quant_dims) * 4, false, false};
  return {f.code_bytes + d0 / f.block, f.fp4 ? d0 / 2 : d0, -1, f.fp4,
          f.quant == int(cache_quant::fp4_e4m3)};
}

/// fp16 pairs of the 8 fp32 values at byte `off` of a staged row (any alignment: V4's rope
/// tail starts at byte 455). Aligned word reads, shifted into place; the word past the values
/// is read only when they are unaligned, and then lies inside the 16-byte padded row. Rounds as
/// the slow path's pack_h2 of the same floats.
__device__ __forceinline__ uint4 raw8_to_h(const std::uint8_t* row, int off) {
  const int sh = off & 3;
  const std::uint32_t* w = reinterpret_cast<const std::uint32_t*>(row + (off - sh));
  std::uint32_t u[9];
#pragma unroll
  for (int i = 0; i < 8; ++i) u[i] = w[i];
  u[8] = sh != 0 ? w[8] : 0u;
  float v[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = __uint_as_float(__funnelshift_r(u[i], u[i + 1], 8 * sh));
  return make_uint4(pack_h2(v[0], v[1]), pack_h2(v[2], v[3]), pack_h2(v[4], v[5]),
                    pack_h2(v[6], v[7]));
}

/// Decodes tile `tile` (staged rows, or the slow path straight from global memory) into sK
/// as fp16 and marks the valid rows. pw / pe: this thread's chunk in window / extra rows.
template <int D>
__device__ __forceinline__ void decode_tile(const attn_args& a, const std::uint8_t* stage,
                                            int stage_ld, const std::uint32_t* lut,
                                            const int* sKind, const std::int64_t* sRow,
                                            const chunk_plan& pw, const chunk_plan& pe, __half* sK,
                                            int* sValid) {
  constexpr int per_row = D / 8;                  // chunks of a row
  constexpr int nsub = kThreads / (8 * per_row);  // 8-row groups decoded at once
  const int tid = int(threadIdx.x), d0 = chunk_col<D>(tid);
  const int rsub = (tid >> 3) / per_row;
#pragma unroll 2
  for (int i = 0; i < layout<D>::chunks; ++i) {
    const int row = 8 * (rsub + i * nsub) + (tid & 7);
    const int kind = sKind[row];
    uint4 packed = make_uint4(0u, 0u, 0u, 0u);
    if (kind == kFastWin || kind == kFastExt) {
      // Field by field (a reference to either plan put both in local memory).
      const bool win = kind == kFastWin;
      const int code_off = win ? pw.code_off : pe.code_off;
      const int raw_off = win ? pw.raw_off : pe.raw_off;
      const std::uint8_t* r = stage + row * stage_ld;
      if (raw_off >= 0) {
        packed = raw8_to_h(r, raw_off);
      } else {
        const std::uint8_t sb = r[win ? pw.scale_off : pe.scale_off];
        packed = (win ? pw.fp4 : pe.fp4)
                     ? fp4x8_to_h(*reinterpret_cast<const std::uint32_t*>(r + code_off), lut,
                                  fp4_scale_h2(win ? pw.e4m3_scale : pe.e4m3_scale, sb))
                     : fp8x8_to_h(*reinterpret_cast<const uint2*>(r + code_off), sb);
      }
    } else if (kind != kNone) {
      float v[8];
      detail::load8(kind == kSlowWin ? a.win : a.ext, D, sRow[row], d0, v);
      packed = make_uint4(pack_h2(v[0], v[1]), pack_h2(v[2], v[3]), pack_h2(v[4], v[5]),
                          pack_h2(v[6], v[7]));
    }
    *reinterpret_cast<uint4*>(sK + blk<D>(row, d0)) = packed;
    if (d0 == 0) sValid[row] = kind != kNone;
  }
}

/// The merge of a warp's up to 64 splits (lane holds splits lane and lane + 32: their running
/// max m and sum l): each split's weight exp(m - M) into w[split], the largest max M, the
/// weighted sum L (warp-wide) and whether no split saw a row. Shared by the combine kernel and
/// the cluster epilogue: the same arithmetic, so the same bits.
struct split_merge {
  float M, L;
  bool none;
};
__device__ __forceinline__ split_merge merge_splits(const float (&m)[2], const float (&l)[2],
                                                    int splits, int lane, float* w) {
  // NaN-propagating: a split whose scores held NaN makes the row NaN, as on the CPU.
  const float M = detail::warp_max_nan(detail::max_nan(m[0], m[1]));
  const bool none = M == -INFINITY;
  float L = 0.0f;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float e = none || m[i] == -INFINITY ? 0.0f : expf(m[i] - M);
    if (lane + 32 * i < splits) w[lane + 32 * i] = e;
    L += l[i] * e;
  }
  return {M, detail::warp_sum(L), none};
}

/// The epilogue of a split launched in a cluster (attention_kernel<D, true>): this split's
/// unnormalised O goes into its shared memory over Q and K (no longer read), then -- the
/// cluster's splits all there -- this block merges heads split, split + S, ... of the head
/// group from every split's O, m and l through distributed shared memory, with
/// attention_combine_kernel's operations in its order (one warp per head: the split weights
/// over the lanes, then 4 columns per lane and float4).
template <int D>
__device__ __forceinline__ void cluster_epilogue(const attn_args& a, unsigned char* smem,
                                                 const float (&o)[2][D / 64][4], float* sM,
                                                 float* sL, const float* sSink, int t, int split,
                                                 int h0, int hg3, int dq, int g, int tq) {
  namespace cg = cooperative_groups;
  constexpr int NT = D / 64;
  constexpr int kWarps = kThreads / 32;
  __shared__ float sW[kWarps][64];
  cg::cluster_group cluster = cg::this_cluster();
  float* sO = reinterpret_cast<float*>(smem + layout<D>::q_off);  // [kHeads][D]
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float* dst = sO + (hg3 * 32 + mi * 16 + g + 8 * half) * D + dq * (D / 8) + 2 * tq;
#pragma unroll
      for (int j = 0; j < NT; ++j)
        *reinterpret_cast<float2*>(dst + j * 8) =
            make_float2(o[mi][j][2 * half], o[mi][j][2 * half + 1]);
    }
  cluster.sync();  // every split's O, m and l are in its shared memory
  const int splits = a.splits, lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  for (int hr = split + splits * warp; hr < kHeads && h0 + hr < a.heads; hr += splits * kWarps) {
    float m[2], l[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int sp = lane + 32 * i;
      m[i] = sp < splits ? cluster.map_shared_rank(sM, unsigned(sp))[hr] : -INFINITY;
      l[i] = sp < splits ? cluster.map_shared_rank(sL, unsigned(sp))[hr] : 0.0f;
    }
    const split_merge mg = merge_splits(m, l, splits, lane, sW[warp]);
    const float inv = mg.none ? 0.0f : 1.0f / (mg.L + expf(sSink[hr] - mg.M));
    __syncwarp();
    float* out = a.out + (std::int64_t(t) * a.heads + h0 + hr) * D;
    for (int d = lane * 4; d < D; d += 128) {
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
      for (int sp = 0; sp < splits; ++sp) {
        const float4 v = *reinterpret_cast<const float4*>(
            cluster.map_shared_rank(sO, unsigned(sp)) + hr * D + d);
        const float ws = sW[warp][sp];
        acc.x += v.x * ws;
        acc.y += v.y * ws;
        acc.z += v.z * ws;
        acc.w += v.w * ws;
      }
      *reinterpret_cast<float4*>(out + d) =
          make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
    }
    __syncwarp();  // sW[warp] is rewritten for the next head
  }
  cluster.sync();  // no block leaves while another reads its shared memory
}

/// CLUSTER: the splits of one (token, head group) run as one thread-block cluster and merge
/// through distributed shared memory at the end (no partials in global memory, no combine
/// launch), with attention_combine_kernel's arithmetic in its order.
template <int D, bool CLUSTER = false>
__global__ void __launch_bounds__(kThreads, 1)
    attention_kernel(const __grid_constant__ attn_args a) {
  detail::grid_dependency_sync();
  using L = layout<D>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // The swizzled tiles' atoms are 1024-byte aligned (the swizzle works on address bits 4-9).
  unsigned char* smem =
      smem_raw + ((1024u - (unsigned(__cvta_generic_to_shared(smem_raw)) & 1023u)) & 1023u);
  __half* sQ = reinterpret_cast<__half*>(smem + L::q_off);
  __half* sK = reinterpret_cast<__half*>(smem + L::k_off);
  float* sS = reinterpret_cast<float*>(smem + L::s_off);
  float* sS2 = reinterpret_cast<float*>(smem + L::s2_off);
  __half* sP = reinterpret_cast<__half*>(smem + L::p_off);
  float* sM = reinterpret_cast<float*>(smem + L::stat_off);
  float* sL = sM + kHeads;
  float* sAlpha = sL + kHeads;
  int* sValid = reinterpret_cast<int*>(sAlpha + kHeads);
  __shared__ float sSink[kHeads];  // this head group's sinks (0 past the last head)

  const int t = int(blockIdx.x), split = int(blockIdx.y), h0 = int(blockIdx.z) * kHeads;
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, tq = lane & 3;
  const int tiles = (a.win_k + a.ext_k + kRows - 1) / kRows;
  const int tile_begin = split * a.tiles_per_split;
  const int tile_end = min(tiles, tile_begin + a.tiles_per_split);

  std::uint32_t* lut = reinterpret_cast<std::uint32_t*>(smem + L::lut_off);
  int* sKind = reinterpret_cast<int*>(smem + L::kind_off);
  std::int64_t* sRow = reinterpret_cast<std::int64_t*>(smem + L::row_off);
  std::uint8_t* stage = smem + L::stage_rows_off;
  if (threadIdx.x < 256)
    lut[threadIdx.x] = pack_h2(e2m1_fast(threadIdx.x & 15u), e2m1_fast(threadIdx.x >> 4));
  const chunk_plan plan_w = plan_chunk<D>(a.win.f), plan_e = plan_chunk<D>(a.ext.f);
  const int my_row = tid >> 3;  // the staging row this thread helps copy
  pending_slot next{-1, true};
  if (tile_begin < tile_end) {
    stage_row(a, load_slot(a, t, tile_begin * kRows + my_row), stage, a.stage_ld, sKind, sRow);
    if (tile_begin + 1 < tile_end) next = load_slot(a, t, (tile_begin + 1) * kRows + my_row);
  }

  // Q rows of this head group times the softmax scale, as fp16 (heads past the end are zero).
  // Every load is issued before the first is used (one memory latency, not one per group of
  // unrolled iterations: ncu put the prologue's wait on these loads at ~6% of the batch-128
  // kernel, and a lone tile per block at batch 1 pays it in full).
  constexpr int q_loads = kHeads * (D / 4) / kThreads;  // float4 per thread: 4, 8 or 16
  static_assert(kHeads * (D / 4) % kThreads == 0, "Q splits evenly over the threads");
  float4 qv[q_loads];
#pragma unroll
  for (int j = 0; j < q_loads; ++j) {
    const int i = tid + j * kThreads, hh = i / (D / 4), c4 = (i % (D / 4)) * 4;
    qv[j] = h0 + hh < a.heads ? di::cuda::detail::load_fresh(reinterpret_cast<const float4*>(
                                    a.q + (std::int64_t(t) * a.heads + h0 + hh) * D + c4))
                              : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  if (tid < kHeads) {
    sM[tid] = -INFINITY;
    sL[tid] = 0.0f;
    // The sinks, read once here (their latency hides behind Q's) for the epilogue.
    sSink[tid] = h0 + tid < a.heads ? __ldg(a.sinks + h0 + tid) : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < q_loads; ++j) {
    const int i = tid + j * kThreads, hh = i / (D / 4), c4 = (i % (D / 4)) * 4;
    uint2 w;
    w.x = pack_h2(qv[j].x * a.scale, qv[j].y * a.scale);
    w.y = pack_h2(qv[j].z * a.scale, qv[j].w * a.scale);
    *reinterpret_cast<uint2*>(sQ + swz<D>(hh, c4)) = w;  // c4 % 8 stays in its chunk
  }

  constexpr int NT = D / 64;  // 8-column n-tiles of O per warp
  float o[2][NT][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int j = 0; j < NT; ++j) o[mi][j][0] = o[mi][j][1] = o[mi][j][2] = o[mi][j][3] = 0.0f;
  // Phase 1: warpgroup (rh, kh), all heads x rows 32rh.. over dims kh*D/2.. (its warp w % 4
  // holds heads 16(w % 4)..); phase 3: warp (hg3, dq), heads 32hg3.. x dims dq*D/8...
  const int kh = (warp >> 2) & 1, rh = warp >> 3, hw = warp & 3;
  const int hg3 = warp & 1, dq = warp >> 1;
  using namespace gemm_detail;
  // The descriptors' low words at dims kh*D/2. Q (swizzled): step k adds its atom column (a
  // 64-value column holds 64 rows: 8 KB) and 32 bytes a step inside it; K (blk(), LBO 128
  // bytes, SBO D / 8 * 128 in k_desc_hi): 256 bytes a step.
  const std::uint32_t q_desc = swz_desc_lo(sQ + swz<D>(0, kh * (D / 2)));
  const std::uint32_t k_desc =
      std::uint32_t(smem_descriptor(sK + blk<D>(32 * rh, kh * (D / 2)), 128, 0));
  constexpr std::uint64_t k_desc_hi = std::uint64_t(D / 8 * 128 >> 4) << 32;

  for (int tile = tile_begin; tile < tile_end; ++tile) {
    cp_async_wait_all();
    __syncthreads();
    decode_tile<D>(a, stage, a.stage_ld, lut, sKind, sRow, plan_w, plan_e, sK, sValid);
    fence_proxy_async();  // sK (and, the first time, sQ) are read by wgmma
    __syncthreads();
    if (tile + 1 < tile_end) {
      stage_row(a, next, stage, a.stage_ld, sKind, sRow);
      if (tile + 2 < tile_end) next = load_slot(a, t, (tile + 2) * kRows + my_row);
    }

    {  // phase 1: partial S = (scale q) K^T, all heads x rows 32rh.., dims kh*D/2..
      float acc[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) acc[i] = 0.0f;
#pragma unroll
      for (int i = 0; i < 16; ++i) pin(acc[i]);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < D / 32; ++k)  // 16 values a step
        wgmma_f16_ss_n32(acc, swz_desc_hi | (q_desc + (k >> 2) * 512 + (k & 3) * 2),
                         k_desc_hi | (k_desc + 16 * k));
      wgmma_commit();
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < 16; ++i) pin(acc[i]);
      float* dstS = kh == 0 ? sS : sS2;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int col = rh * 32 + j * 8 + 2 * tq, row = hw * 16 + g;
        // invalid rows: -inf in the first half's partial (the sum stays -inf)
        const bool v0 = kh != 0 || sValid[col] != 0, v1 = kh != 0 || sValid[col + 1] != 0;
        dstS[row * kSld + col] = v0 ? acc[4 * j] : -INFINITY;
        dstS[row * kSld + col + 1] = v1 ? acc[4 * j + 1] : -INFINITY;
        dstS[(row + 8) * kSld + col] = v0 ? acc[4 * j + 2] : -INFINITY;
        dstS[(row + 8) * kSld + col + 1] = v1 ? acc[4 * j + 3] : -INFINITY;
      }
    }
    __syncthreads();
    {  // phase 2: online softmax, 8 threads per head row
      const int r = tid >> 3, part = tid & 7;
      const float* srow = sS + r * kSld + part * 8;
      const float* srow2 = sS2 + r * kSld + part * 8;
      float s[8];
      float mt = -INFINITY;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        s[j] = srow[j] + srow2[j];
        mt = detail::max_nan(mt, s[j]);  // a NaN score makes the row NaN (CPU: the same)
      }
      mt = detail::max_nan(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
      mt = detail::max_nan(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
      mt = detail::max_nan(mt, __shfl_xor_sync(0xffffffffu, mt, 4));
      const float m_old = sM[r];
      const float m_new = detail::max_nan(m_old, mt);
      const bool empty = m_new == -INFINITY;
      const float alpha = empty ? 1.0f : expf(m_old - m_new);
      float sum = 0.0f;
      std::uint32_t pw[4];
#pragma unroll
      for (int j = 0; j < 8; j += 2) {
        const float p0 = empty ? 0.0f : expf(s[j] - m_new);
        const float p1 = empty ? 0.0f : expf(s[j + 1] - m_new);
        sum += p0 + p1;
        pw[j / 2] = pack_h2(p0, p1);
      }
      *reinterpret_cast<uint4*>(sP + r * kPld + part * 8) = make_uint4(pw[0], pw[1], pw[2], pw[3]);
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      sum += __shfl_xor_sync(0xffffffffu, sum, 4);
      if (part == 0) {
        sL[r] = sL[r] * alpha + sum;
        sM[r] = m_new;
        sAlpha[r] = alpha;
      }
    }
    __syncthreads();
    {  // phase 3: O = alpha O + P V for heads 32hg3.., dims dq*D/8..
      float a_lo[2], a_hi[2];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        a_lo[mi] = sAlpha[hg3 * 32 + mi * 16 + g];
        a_hi[mi] = sAlpha[hg3 * 32 + mi * 16 + g + 8];
      }
      if (!__all_sync(0xffffffffu, a_lo[0] == 1.0f && a_hi[0] == 1.0f && a_lo[1] == 1.0f &&
                                       a_hi[1] == 1.0f)) {  // max moved: rescale
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            o[mi][j][0] *= a_lo[mi];
            o[mi][j][1] *= a_lo[mi];
            o[mi][j][2] *= a_hi[mi];
            o[mi][j][3] *= a_hi[mi];
          }
      }
      const __half* pa = sP + (hg3 * 32 + (lane & 15)) * kPld + (lane >> 4) * 8;
      // lane's row address of each 8 x 8 matrix: row k0 + lane % 16, values dq*D/8 + 16jp +
      // 8(lane / 16)..
#pragma unroll
      for (int k0 = 0; k0 < kRows; k0 += 16) {
        std::uint32_t p0[4], p1[4];
        ldsm_x4(p0, pa + k0);
        ldsm_x4(p1, pa + 16 * kPld + k0);
#pragma unroll
        for (int jp = 0; jp < NT / 2; ++jp) {
          std::uint32_t bf[4];
          ldsm_x4_trans(bf,
                        sK + blk<D>(k0 + (lane & 15), dq * (D / 8) + jp * 16 + (lane >> 4) * 8));
          mma_f16(o[0][2 * jp], p0, bf[0], bf[1]);
          mma_f16(o[0][2 * jp + 1], p0, bf[2], bf[3]);
          mma_f16(o[1][2 * jp], p1, bf[0], bf[1]);
          mma_f16(o[1][2 * jp + 1], p1, bf[2], bf[3]);
        }
      }
    }
    __syncthreads();
  }
  if (tile_begin >= tile_end) __syncthreads();  // sM/sL initialised above

  if constexpr (CLUSTER) {
    if (a.splits > 1) {  // uniform over the grid
      cluster_epilogue<D>(a, smem, o, sM, sL, sSink, t, split, h0, hg3, dq, g, tq);
      return;
    }
  }
  // Epilogue: rows g and g + 8 of each of this warp's two 16-head tiles, columns
  // dq*D/8 + 8j + 2tq.
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int hr = hg3 * 32 + mi * 16 + g + 8 * half, head = h0 + hr;
      if (head >= a.heads) continue;
      const float m = sM[hr], l = sL[hr];
      const std::int64_t th = std::int64_t(t) * a.heads + head;
      if (a.splits == 1) {
        const bool none = m == -INFINITY;
        const float inv = none ? 0.0f : 1.0f / (l + expf(sSink[hr] - m));
        float* dst = a.out + th * D + dq * (D / 8) + 2 * tq;
#pragma unroll
        for (int j = 0; j < NT; ++j)
          *reinterpret_cast<float2*>(dst + j * 8) =
              make_float2(o[mi][j][2 * half] * inv, o[mi][j][2 * half + 1] * inv);
      } else {
        const std::int64_t ph = std::int64_t(split) * a.tokens * a.heads + th;
        float* dst = a.part_o + ph * D + dq * (D / 8) + 2 * tq;
#pragma unroll
        for (int j = 0; j < NT; ++j)
          *reinterpret_cast<float2*>(dst + j * 8) =
              make_float2(o[mi][j][2 * half], o[mi][j][2 * half + 1]);
        if (dq == 0 && tq == 0) {
          a.part_ml[ph * 2] = m;
          a.part_ml[ph * 2 + 1] = l;
        }
      }
    }
}

/// Merges the splits of one (token, head): out = sum_s O_s e^(m_s - M) / (sum_s l_s e^(m_s - M)
/// + e^(sink - M)). Warp 0 forms the split weights; every thread then sums 4 columns.
__global__ void attention_combine_kernel(const float* part_o, const float* part_ml,
                                         const float* sinks, float* out, int tokens, int heads,
                                         int dim, int splits) {
  detail::grid_dependency_sync();
  __shared__ float w[64];
  __shared__ float inv;
  const std::int64_t th = blockIdx.x;  // token * heads + head
  const std::int64_t stride = std::int64_t(tokens) * heads;
  if (threadIdx.x < 32) {
    const int lane = int(threadIdx.x);
    float m[2], l[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int sp = lane + 32 * i;
      m[i] = sp < splits ? part_ml[(sp * stride + th) * 2] : -INFINITY;
      l[i] = sp < splits ? part_ml[(sp * stride + th) * 2 + 1] : 0.0f;
    }
    const split_merge mg = merge_splits(m, l, splits, lane, w);
    if (lane == 0) inv = mg.none ? 0.0f : 1.0f / (mg.L + expf(sinks[th % heads] - mg.M));
  }
  __syncthreads();
  for (int d = int(threadIdx.x) * 4; d < dim; d += int(blockDim.x) * 4) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
    for (int sp = 0; sp < splits; ++sp) {
      const float4 v = di::cuda::detail::load_fresh(
          reinterpret_cast<const float4*>(part_o + (sp * stride + th) * dim + d));
      const float ws = w[sp];
      acc.x += v.x * ws;
      acc.y += v.y * ws;
      acc.z += v.z * ws;
      acc.w += v.w * ws;
    }
    const float iv = inv;
    *reinterpret_cast<float4*>(out + th * dim + d) =
        make_float4(acc.x * iv, acc.y * iv, acc.z * iv, acc.w * iv);
  }
}

int device_sms() {
  static const int sms = [] {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      n = 132;
    return n > 0 ? n : 132;
  }();
  return sms;
}

/// Longest packed row the staging area takes (V4.1's FP8 window row is 528 bytes).
constexpr int max_stage_row = 1040;

/// Whether t's rows take the staged path: packed rows of a 16-byte multiple (cp.async of 16
/// bytes from a 16-byte-aligned table) whose chunks of 8 values are each all codes of one
/// scale block or all raw fp32 values (V4's rows: 448 FP8 + 7 scales + 64 fp32, padded to 720).
bool is_fast(const device_rows& t, int dim) {
  if (!t.packed) return false;
  const cache_row_format& f = t.format;
  return f.dim() == dim && f.quant_dims % 8 == 0 && f.block % 8 == 0 && f.row_bytes() % 16 == 0 &&
         (reinterpret_cast<std::uintptr_t>(t.data) % 16) == 0 &&
         f.row_bytes() <= std::size_t(max_stage_row);
}

void check_table(const device_rows& t, int dim, int k, const char* what) {
  if (k == 0) return;
  DI_CHECK(t.data != nullptr && t.rows >= 0, "attention: {} table missing", what);
  if (t.packed) {
    detail::check_row_format(t.format, what);
    DI_CHECK(t.format.dim() == dim, "attention: {} rows hold {} values, head dim {}", what,
             t.format.dim(), dim);
  } else {
    DI_CHECK(reinterpret_cast<std::uintptr_t>(t.data) % 16 == 0,
             "attention: f32 {} rows must be 16-byte aligned", what);
  }
}

/// The dynamic shared memory set on attention_kernel<D, true> per device (ensure_smem's record,
/// shared by the launch and cluster_fits).
template <int D>
std::atomic<std::size_t> (&cluster_smem_limits())[detail::max_tracked_devices] {
  static std::atomic<std::size_t> limits[detail::max_tracked_devices];
  return limits;
}

template <int D>
void launch_dim(const attn_args& a, int head_groups, bool cluster, cudaStream_t stream) {
  const std::size_t smem = layout<D>::alloc(a.stage_ld);
  const dim3 grid(unsigned(a.tokens), unsigned(a.splits), unsigned(head_groups));
  if (cluster) {
    detail::ensure_smem(reinterpret_cast<const void*>(&attention_kernel<D, true>), smem,
                        cluster_smem_limits<D>());
    detail::launch_in("attention", attention_kernel<D, true>, grid, kThreads,
                      dim3(1, unsigned(a.splits), 1), smem, stream, a);
    return;
  }
  static std::atomic<std::size_t> limits[16];
  detail::ensure_smem(reinterpret_cast<const void*>(&attention_kernel<D>), smem, limits);
  detail::launch("attention", attention_kernel<D>, grid, kThreads, smem, stream, a);
}

/// Splits merged in clusters: 1 any 2..16, 0 never, -1 (the default) two. H200 (session 17,
/// bench_attention_decode, L2 flushed, 4096-entry V4.1 layer): batch 64 (2 splits) 50.6 us in
/// clusters vs 56.6 with the combine kernel; batch 1 (10 splits) 21.1 vs 19.6, batch 32 (4)
/// 66.8 vs 39.2 -- larger clusters wait for whole groups of free multiprocessors.
std::atomic<int> g_cluster{
    detail::env_mode("DEEPINFER_ATTN_CLUSTER", "attention splits merge in clusters when two")};

/// Bytes per staged packed row of p's tables (a multiple of 16; 16 when none is staged).
int stage_ld_of(const attention_params& p) {
  int stage = 16;
  if (is_fast(p.window, p.dim)) stage = std::max(stage, int(p.window.format.row_bytes()));
  if (is_fast(p.extra, p.dim)) stage = std::max(stage, int(p.extra.format.row_bytes()));
  return (stage + 15) / 16 * 16;
}

/// Whether clusters of `splits` blocks of attention_kernel<D, true> with a staging area of
/// stage_ld bytes per row can be resident on this GPU: asked once per (head dim, splits,
/// stage_ld).
template <int D>
bool cluster_fits(int splits, int stage_ld) {
  static std::atomic<int> known[17][max_stage_row / 16 + 2];  // 0 unknown, 1 yes, 2 no
  std::atomic<int>& slot = known[splits][stage_ld / 16];
  int k = slot.load();
  if (k == 0) {
    const void* kernel = reinterpret_cast<const void*>(&attention_kernel<D, true>);
    const std::size_t smem = layout<D>::alloc(stage_ld);
    bool ok = smem <= 227 * 1024 &&
              cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==
                  cudaSuccess;
    if (ok) detail::ensure_smem(kernel, smem, cluster_smem_limits<D>());
    int clusters = 0;
    if (ok) {
      cudaLaunchAttribute attribute[1] = {};
      attribute[0].id = cudaLaunchAttributeClusterDimension;
      attribute[0].val.clusterDim.x = 1;
      attribute[0].val.clusterDim.y = unsigned(splits);
      attribute[0].val.clusterDim.z = 1;
      cudaLaunchConfig_t config = {};
      config.gridDim = dim3(1, unsigned(splits), 1);
      config.blockDim = dim3(kThreads);
      config.dynamicSmemBytes = smem;
      config.attrs = attribute;
      config.numAttrs = 1;
      ok =
          cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) == cudaSuccess && clusters > 0;
    }
    cudaGetLastError();  // a refusal is an answer, not a pending error
    k = ok ? 1 : 2;
    slot = k;
  }
  return k == 1;
}

/// Whether p's splits merge inside a cluster (set_attention_cluster) rather than through the
/// workspace and attention_combine_kernel.
bool clustered(const attention_params& p, int splits) {
  const int mode = g_cluster;
  if (mode == 0 || splits <= 1 || splits > 16 || (mode < 0 && splits != 2)) return false;
  const int stage_ld = stage_ld_of(p);
  switch (p.dim) {
    case 128:
      return cluster_fits<128>(splits, stage_ld);
    case 256:
      return cluster_fits<256>(splits, stage_ld);
    default:
      return cluster_fits<512>(splits, stage_ld);
  }
}

}  // namespace

void set_attention_cluster(int mode) {
  DI_CHECK(mode >= -1 && mode <= 1, "attention cluster mode {} (expected -1, 0 or 1)", mode);
  g_cluster = mode;
}
int get_attention_cluster() {
  return g_cluster;
}

int attention_splits(const attention_params& p) {
  const int total = p.window_k + p.extra_k;
  const int tiles = (total + kRows - 1) / kRows;
  if (tiles <= 1 || p.tokens <= 0) return 1;
  if (p.num_splits > 0) return std::min({p.num_splits, tiles, 64});
  const std::int64_t blocks = std::int64_t(p.tokens) * ((p.heads + kHeads - 1) / kHeads);
  const int sms = device_sms();
  int best = 1;
  double best_cost = 1e300;
  // The merge costs about a tile through the combine kernel, half of one inside a cluster (two
  // splits): a 2-tile sliding-window layer at batch 1 then takes two blocks instead of one.
  const double cluster_merge = clustered(p, 2) ? 0.5 : 1.0;
  for (int s = 1; s <= std::min(tiles, 64); ++s) {
    const double waves = double((blocks * s + sms - 1) / sms);
    const double merge = s == 1 ? 0.0 : s == 2 ? cluster_merge : 1.0;
    const double cost = waves * double((tiles + s - 1) / s) + merge;
    if (cost < best_cost - 1e-9) {
      best_cost = cost;
      best = s;
    }
  }
  return best;
}

std::size_t attention_workspace_bytes(const attention_params& p) {
  const int s = attention_splits(p);
  if (s <= 1 || clustered(p, s)) return 0;
  return std::size_t(s) * std::size_t(p.tokens) * std::size_t(p.heads) * (std::size_t(p.dim) + 2) *
         sizeof(float);
}

void launch_attention(const attention_params& p, cudaStream_t stream) {
  DI_CHECK(p.dim == 128 || p.dim == 256 || p.dim == 512,
           "attention: head dim {} (supported: 128, 256, 512)", p.dim);
  DI_CHECK(p.tokens >= 0 && p.heads > 0 && p.window_k >= 0 && p.extra_k >= 0,
           "attention: {} tokens, {} heads, {} + {} rows", p.tokens, p.heads, p.window_k,
           p.extra_k);
  if (p.tokens == 0) return;
  DI_CHECK(p.q && p.out && p.sinks, "attention: q, out and sinks are required");
  DI_CHECK(reinterpret_cast<std::uintptr_t>(p.q) % 16 == 0 &&
               reinterpret_cast<std::uintptr_t>(p.out) % 16 == 0,
           "attention: q and out must be 16-byte aligned");
  DI_CHECK(p.window_k == 0 || p.window_idx, "attention: window indices missing");
  DI_CHECK(p.extra_k == 0 || p.extra_idx, "attention: extra indices missing");
  check_table(p.window, p.dim, p.window_k, "window");
  check_table(p.extra, p.dim, p.extra_k, "extra");
  const int splits = attention_splits(p);
  const bool cluster = clustered(p, splits);
  const std::size_t need = attention_workspace_bytes(p);
  DI_CHECK(p.workspace_bytes >= need && (need == 0 || p.workspace),
           "attention: {} splits need {} workspace bytes, got {}", splits, need, p.workspace_bytes);
  const int tiles = (p.window_k + p.extra_k + kRows - 1) / kRows;
  attn_args a{};
  a.q = p.q;
  a.out = p.out;
  a.sinks = p.sinks;
  a.tokens = p.tokens;
  a.heads = p.heads;
  a.scale = p.softmax_scale;
  a.win = detail::make_dev_rows(p.window);
  a.ext = detail::make_dev_rows(p.extra);
  a.win_idx = p.window_idx;
  a.ext_idx = p.extra_idx;
  a.win_k = p.window_k;
  a.ext_k = p.extra_k;
  a.win_fast = is_fast(p.window, p.dim);
  a.ext_fast = is_fast(p.extra, p.dim);
  a.splits = splits;
  a.stage_ld = stage_ld_of(p);
  a.tiles_per_split = std::max(1, (tiles + splits - 1) / splits);
  a.part_o = static_cast<float*>(p.workspace);
  a.part_ml = a.part_o ? a.part_o + std::size_t(splits) * p.tokens * p.heads * p.dim : nullptr;
  const int head_groups = (p.heads + kHeads - 1) / kHeads;
  switch (p.dim) {
    case 128:
      launch_dim<128>(a, head_groups, cluster, stream);
      break;
    case 256:
      launch_dim<256>(a, head_groups, cluster, stream);
      break;
    default:
      launch_dim<512>(a, head_groups, cluster, stream);
      break;
  }
  if (splits > 1 && !cluster) {
    const int threads = std::max(32, p.dim / 4);
    detail::launch("attention_combine", attention_combine_kernel,
                   unsigned(std::int64_t(p.tokens) * p.heads), threads, 0, stream, a.part_o,
                   a.part_ml, p.sinks, p.out, p.tokens, p.heads, p.dim, splits);
  }
}

}  // namespace di::cuda
