// The indexer on the GPU: relu-weighted scores of the query heads against the compressed
// entries' keys (read in place from their packed FP4 rows), exact top-k selection (radix
// select of the k-th key, then a bitonic sort of the k picks: descending score, ties by
// lower index, as the CPU's partial_sort -- or, for masked_topk, the picks written in entry
// order by a prefix count, no sort), the visibility / candidate masks of masked_topk, and
// V4.1's candidate blocks.
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/model_common.cuh"

#include <cfloat>

#include <cuda_pipeline.h>

#include <algorithm>

namespace di::cuda {

namespace {

using detail::dev_rows;

constexpr int kScoreEntries = 16;   // entries per block of index_scores
constexpr int kScoreThreads = 256;  // 16 groups of 4 heads x 16 entries
constexpr int kScoreHeads = 64;     // heads padded to 64 (zero q rows, zero weights)

/// Block (tile of 16 entries, token): q into shared memory as [64][dim + 4] (heads padded with
/// zeros; by cp.async, in flight while the keys decode) and the tile's keys transposed as
/// [dim][16]; thread (hq, e) forms the dot products of heads 4hq.. with entry e. Tiles of 64
/// entries (a 4 x 4 register tile per thread) left 8-17 blocks of long dependent chains at batch
/// 1 -- 26-29 us per call, ncu (session 18): 8 warps per SM issuing every 7-8 cycles, waiting on
/// shared loads and instruction fetch; 16-entry tiles give 4x the blocks and a quarter of the
/// chain each. Each dot product runs over the inputs in order; a score adds its heads'
/// relu(dot) * weight in head order within a group of 4, then the 16 groups in order -- the
/// same arithmetic for a token whatever the batch (and whatever the tile). The minimum of one
/// block per SM matters: with the thread bound alone ptxas (CUDA 13) held this kernel at 32
/// registers and spilled 420 bytes.
__global__ void __launch_bounds__(kScoreThreads, 1)
    index_scores_kernel(const float* q, const float* weights, dev_rows keys,
                        const std::int32_t* key_rows, std::int64_t entries, float* scores,
                        int heads, int dim) {
  detail::grid_dependency_sync();
  extern __shared__ __align__(16) float sm[];
  const int ldq = dim + 4;                  // q rows 16-byte aligned, 4 banks apart
  float* sQ = sm;                           // [kScoreHeads][ldq]
  float* sK = sQ + kScoreHeads * ldq;       // [dim][kScoreEntries]
  float* sPart = sK + dim * kScoreEntries;  // [16 head groups][kScoreEntries]
  const std::int64_t t = blockIdx.y;
  const std::int64_t e0 = std::int64_t(blockIdx.x) * kScoreEntries;
  const int tid = int(threadIdx.x);
  const int quads = dim / 4;
  for (int i = tid; i < kScoreHeads * quads; i += kScoreThreads) {
    const int h = i / quads, d0 = (i % quads) * 4;
    const bool live = h < heads;  // padded heads: zero-filled
    __pipeline_memcpy_async(sQ + h * ldq + d0, q + (t * heads + (live ? h : 0)) * dim + d0, 16,
                            live ? 0 : 16);
  }
  __pipeline_commit();
  // keys: thread c decodes 8 inputs of row c % kScoreEntries (a missing row: zeros, score 0).
  const int chunks = dim / 8;
#pragma unroll 4
  for (int c = tid; c < kScoreEntries * chunks; c += kScoreThreads) {
    const int row = c % kScoreEntries, d0 = (c / kScoreEntries) * 8;
    float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (e0 + row < entries) {
      const std::int64_t r = key_rows ? std::int64_t(key_rows[t * entries + e0 + row]) : e0 + row;
      if (r >= 0 && r < keys.rows) detail::load8(keys, dim, r, d0, v);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) sK[(d0 + j) * kScoreEntries + row] = v[j];
  }
  __pipeline_wait_prior(0);
  __syncthreads();
  static_assert(kScoreThreads == 16 * kScoreEntries, "16 head groups x the tile's entries");
  const int eq = tid % kScoreEntries, hq = tid / kScoreEntries;
  const float* qh = sQ + 4 * hq * ldq;
  float w[4];  // (loaded before the products: their latency hides behind them)
#pragma unroll
  for (int i = 0; i < 4; ++i) w[i] = 4 * hq + i < heads ? weights[t * heads + 4 * hq + i] : 0.0f;
  float dot[4] = {};  // heads 4hq..
#pragma unroll 4
  for (int d = 0; d < dim; ++d) {
    const float b = sK[d * kScoreEntries + eq];
#pragma unroll
    for (int i = 0; i < 4; ++i) dot[i] = fmaf(qh[i * ldq + d], b, dot[i]);
  }
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) acc += fmaxf(dot[i], 0.0f) * w[i];
  sPart[hq * kScoreEntries + eq] = acc;
  __syncthreads();
  if (tid < kScoreEntries && e0 + tid < entries) {
    float acc = 0.0f;
#pragma unroll
    for (int g = 0; g < 16; ++g) acc += sPart[g * kScoreEntries + tid];
    scores[t * entries + e0 + tid] = acc;
  }
}

constexpr int kTopkThreads = 1024;

struct topk_smem {
  unsigned hist[256];
  unsigned warp_counts[64];  // two sets: block_prefix alternates them
  unsigned sel, k_rem, gt_count, base;
  unsigned long long keys[topk_max_k];
};

__device__ __forceinline__ std::uint32_t masked_key(const topk_params& p, std::int64_t r,
                                                    std::int64_t e) {
  float s = p.scores[r * p.n + e];
  if ((p.visible && e >= p.visible[r]) || (p.allowed && p.allowed[r * p.n + e] == 0))
    s = -INFINITY;
  // NaN ranks below every number but above -inf, as the CPU's topk has it (its key would
  // otherwise sort a NaN first, or a negative NaN below -inf).
  if (s != s) s = -FLT_MAX;
  return detail::order_key(s);
}

/// Where position i of a bitonic stage (size, stride) ends up: the larger of its value `a` and
/// its partner's `b` (position i ^ stride) when it is the lower of the pair in a descending
/// run, or the upper in an ascending one; else the smaller.
__device__ __forceinline__ unsigned long long bitonic_keep(unsigned long long a,
                                                           unsigned long long b, int i, int size,
                                                           int stride) {
  const bool desc = (i & size) == 0, lower = (i & stride) == 0;
  return desc == lower ? (a > b ? a : b) : (a < b ? a : b);
}

/// The k-th largest key of row r (k < n) by radix selection: the key, how many picks equal
/// it (the lowest indices of the keys equal to it), and how many keys equal it.
struct topk_threshold {
  std::uint32_t key;
  unsigned eq_needed, eq_total;
};

__device__ topk_threshold select_threshold(const topk_params& p, std::int64_t r, topk_smem& sm) {
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  std::uint32_t prefix = 0, pmask = 0;
  if (tid == 0) sm.k_rem = unsigned(p.k);
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int i = tid; i < 256; i += kTopkThreads) sm.hist[i] = 0;
    __syncthreads();
    for (std::int64_t e = tid; e < p.n; e += kTopkThreads) {
      const std::uint32_t key = masked_key(p, r, e);
      if ((key & pmask) == prefix) atomicAdd(&sm.hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (warp == 0) {  // the digit holding the k_rem-th largest key (thread 0 walking 256 bins
                      // serially took ~4 us per pass)
      // Lane l owns bins 255 - 8l down to 248 - 8l; an inclusive scan of the lanes' totals
      // from the top finds the lane where the count reaches k_rem, which walks its 8 bins.
      const unsigned need = sm.k_rem;
      unsigned own[8], mine = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) mine += own[j] = sm.hist[255 - 8 * lane - j];
      unsigned incl = mine;
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const unsigned v = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += v;
      }
      const unsigned before = incl - mine;
      if (before < need && incl >= need) {  // exactly one lane
        unsigned cum = before;
        for (int j = 0; j < 8; ++j) {
          if (cum + own[j] >= need) {
            sm.sel = unsigned(255 - 8 * lane - j);
            sm.k_rem = need - cum;
            break;
          }
          cum += own[j];
        }
      }
      if (lane == 0) {
        sm.gt_count = 0;
        sm.base = 0;
      }
    }
    __syncthreads();
    prefix |= sm.sel << shift;
    pmask |= 255u << shift;
  }
  // The last pass counted, in the selected digit's bin, exactly the keys equal to the k-th.
  return {prefix, sm.k_rem, sm.hist[sm.sel]};
}

/// The k picks of row r (k < n) into sm.keys (unsorted): every key above the k-th largest
/// and, of the keys equal to it, the lowest indices.
__device__ void collect_picks(const topk_params& p, std::int64_t r, topk_smem& sm) {
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int k = p.k;
  const topk_threshold th = select_threshold(p, r, sm);
  const std::uint32_t thr = th.key;
  const unsigned eq_needed = th.eq_needed;
  const unsigned gt = unsigned(k) - eq_needed;
  for (std::int64_t e = tid; e < p.n; e += kTopkThreads) {
    const std::uint32_t key = masked_key(p, r, e);
    if (key > thr) {
      const unsigned at = atomicAdd(&sm.gt_count, 1u);
      sm.keys[at] = (std::uint64_t(key) << 32) | std::uint32_t(~std::uint32_t(e));
    }
  }
  // Equal keys in index order: block-wide prefix counts chunk by chunk.
  for (std::int64_t c0 = 0; c0 < p.n; c0 += kTopkThreads) {
    __syncthreads();
    const unsigned base = sm.base;
    if (base >= eq_needed) break;
    const std::int64_t e = c0 + tid;
    const bool eq = e < p.n && masked_key(p, r, e) == thr;
    const unsigned ballot = __ballot_sync(0xffffffffu, eq);
    if (lane == 0) sm.warp_counts[warp] = __popc(ballot);
    __syncthreads();
    unsigned before = 0, total = 0;
    for (int w = 0; w < kTopkThreads / 32; ++w) {
      if (w < warp) before += sm.warp_counts[w];
      total += sm.warp_counts[w];
    }
    const unsigned pos = base + before + __popc(ballot & ((1u << lane) - 1u));
    if (eq && pos < eq_needed)
      sm.keys[gt + pos] = (std::uint64_t(thr) << 32) | std::uint32_t(~std::uint32_t(e));
    __syncthreads();
    if (tid == 0) sm.base = base + total;
  }
}

/// Block-wide exclusive prefix count of `flag` in thread order through counts[32] (one
/// barrier; the caller alternates the counts between calls so that no barrier is needed
/// before the next one writes): {this thread's position, the block's total}.
__device__ __forceinline__ uint2 block_prefix(bool flag, unsigned* counts) {
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const unsigned ballot = __ballot_sync(0xffffffffu, flag);
  if (lane == 0) counts[warp] = __popc(ballot);
  __syncthreads();
  unsigned before = 0, total = 0;
#pragma unroll 8
  for (int w = 0; w < kTopkThreads / 32; ++w) {
    const unsigned c = counts[w];
    before += w < warp ? c : 0u;
    total += c;
  }
  return {before + __popc(ballot & ((1u << lane) - 1u)), total};
}

/// index_order: the picks of row r written in ascending entry order (and, with p.map, their
/// mapped rows), masked picks as -1 after them. No sort: the threshold, then one pass over the
/// entries in order with a block-wide prefix count per chunk of kTopkThreads (two where keys
/// equal to the threshold are only partly picked). With k == n every unmasked entry is a pick.
__device__ void write_in_order(const topk_params& p, std::int64_t r, topk_smem& sm) {
  const int tid = int(threadIdx.x);
  const int k = p.k;
  const bool take_all = k == p.n;
  topk_threshold th{0u, 0u, 0u};
  if (!take_all) th = select_threshold(p, r, sm);
  const bool some_eq = th.eq_needed < th.eq_total;  // ties at the threshold: lowest indices
  const std::uint32_t neg_inf = detail::order_key(-INFINITY);
  std::int32_t* out = p.out + r * k;
  std::int32_t* mapped = p.mapped ? p.mapped + r * k : nullptr;
  unsigned written = 0, eq_seen = 0;  // the same in every thread
  int parity = 0;
  for (std::int64_t c0 = 0; c0 < p.n && written < unsigned(k); c0 += kTopkThreads) {
    const std::int64_t e = c0 + tid;
    const std::uint32_t key = e < p.n ? masked_key(p, r, e) : neg_inf;
    const bool live = key != neg_inf;  // a masked pick is written as -1 below
    bool pick = live && (take_all || key > th.key || (!some_eq && key == th.key));
    if (some_eq) {
      const bool eq = live && key == th.key;
      const uint2 q = block_prefix(eq, sm.warp_counts + 32 * parity);
      pick = pick || (eq && eq_seen + q.x < th.eq_needed);
      eq_seen += q.y;
      parity ^= 1;
    }
    const uint2 at = block_prefix(pick, sm.warp_counts + 32 * parity);
    parity ^= 1;
    if (pick) {
      out[written + at.x] = std::int32_t(e);
      if (mapped) mapped[written + at.x] = p.map[r * p.n + e];
    }
    written += at.y;
  }
  for (unsigned j = written + unsigned(tid); j < unsigned(k); j += kTopkThreads) {
    out[j] = -1;
    if (mapped) mapped[j] = -1;
  }
}

/// One block per row: radix-select the k-th largest key, collect the picks, sort them (or, with
/// p.index_order, write them in entry order). With k == n every entry is a pick and the
/// selection is skipped.
__global__ void __launch_bounds__(kTopkThreads) topk_kernel(const topk_params p) {
  detail::grid_dependency_sync();
  extern __shared__ unsigned char raw[];
  topk_smem& sm = *reinterpret_cast<topk_smem*>(raw);
  const std::int64_t r = blockIdx.x;
  const int tid = int(threadIdx.x);
  const int k = p.k;
  if (p.index_order) {
    write_in_order(p, r, sm);
    return;
  }
  if (k == p.n) {  // every entry (the same picks the selection would make)
    for (int e = tid; e < k; e += kTopkThreads)
      sm.keys[e] = (std::uint64_t(masked_key(p, r, e)) << 32) | std::uint32_t(~std::uint32_t(e));
  } else {
    collect_picks(p, r, sm);
  }
  __syncthreads();
  int n2 = 1;
  while (n2 < k) n2 <<= 1;
  // Bitonic sort, descending (keys are unique: the index is in their low half, so any correct
  // sort gives the same order). Thread tid holds positions tid + c * kTopkThreads in registers;
  // stages with partners in the same warp (stride < 32) exchange by shuffles, the others through
  // shared memory (a barrier per stage was most of the kernel at batch 1: 12-16 us, session 18).
  constexpr int kPer = topk_max_k / kTopkThreads;
  static_assert(topk_max_k % kTopkThreads == 0 && kTopkThreads % 32 == 0, "whole warps");
  unsigned long long v[kPer];
#pragma unroll
  for (int c = 0; c < kPer; ++c) {
    const int i = tid + c * kTopkThreads;
    v[c] = i < k ? sm.keys[i] : 0ull;  // padding below every key: sorts last
  }
  for (int size = 2; size <= n2; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      if (stride >= 32) {
        __syncthreads();  // the previous stage's reads are done
#pragma unroll
        for (int c = 0; c < kPer; ++c)
          if (tid + c * kTopkThreads < n2) sm.keys[tid + c * kTopkThreads] = v[c];
        __syncthreads();
#pragma unroll
        for (int c = 0; c < kPer; ++c) {
          const int i = tid + c * kTopkThreads;
          if (i < n2) v[c] = bitonic_keep(v[c], sm.keys[i ^ stride], i, size, stride);
        }
      } else {  // whole warps shuffle; positions past n2 exchange among themselves, unused
#pragma unroll
        for (int c = 0; c < kPer; ++c) {
          const int i = tid + c * kTopkThreads;
          const unsigned long long b = __shfl_xor_sync(0xffffffffu, v[c], stride);
          if (i < n2) v[c] = bitonic_keep(v[c], b, i, size, stride);
        }
      }
    }
  }
  const std::uint32_t neg_inf = detail::order_key(-INFINITY);
#pragma unroll
  for (int c = 0; c < kPer; ++c) {
    const int j = tid + c * kTopkThreads;
    if (j >= k) continue;
    const std::uint32_t key = std::uint32_t(v[c] >> 32);
    p.out[r * k + j] = key == neg_inf ? -1 : std::int32_t(~std::uint32_t(v[c]));
  }
}

/// block_scores[t, b] = max over visible entries of block b; the newest visible block +inf.
__global__ void block_max_kernel(const float* scores, const std::int64_t* visible, float* out,
                                 std::int64_t tokens, std::int64_t entries, std::int64_t blocks,
                                 int block_size) {
  detail::grid_dependency_sync();
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= tokens * blocks) return;
  const std::int64_t t = i / blocks, b = i % blocks;
  const std::int64_t vis = min(visible[t], entries);
  float m = -INFINITY;
  const std::int64_t end = min((b + 1) * block_size, vis);
  for (std::int64_t e = b * block_size; e < end; ++e) m = fmaxf(m, scores[t * entries + e]);
  if (visible[t] > 0 && b == (visible[t] - 1) / block_size) m = INFINITY;
  out[i] = m;
}

__global__ void mark_blocks_kernel(const std::int32_t* picked, std::uint8_t* keep,
                                   std::int64_t tokens, std::int64_t entries, int k,
                                   int block_size) {
  detail::grid_dependency_sync();
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= tokens * k * std::int64_t(block_size)) return;
  const std::int64_t t = i / (std::int64_t(k) * block_size);
  const std::int64_t j = (i / block_size) % k, off = i % block_size;
  const std::int32_t blk = picked[t * k + j];
  if (blk < 0) return;
  const std::int64_t e = std::int64_t(blk) * block_size + off;
  if (e < entries) keep[t * entries + e] = 1;
}

}  // namespace

void launch_index_scores(const index_scores_params& p, cudaStream_t stream) {
  DI_CHECK(p.tokens >= 0 && p.heads > 0 && p.heads <= 64 && p.dim > 0 && p.dim <= 256 &&
               p.dim % 8 == 0,
           "index_scores: {} heads of dim {} (supported: heads <= 64, dim <= 256, dim % 8 == 0)",
           p.heads, p.dim);
  if (p.keys.packed) {
    detail::check_row_format(p.keys.format, "index_scores keys");
    DI_CHECK(p.keys.format.dim() == p.dim, "index_scores: key rows of {} for q of {}",
             p.keys.format.dim(), p.dim);
  }
  DI_CHECK(!p.key_rows || p.entries >= 0, "index_scores: {} entries per token", p.entries);
  const std::int64_t entries = p.key_rows ? p.entries : p.keys.rows;
  if (p.tokens == 0 || entries == 0) return;
  if (p.keys.rows == 0) {  // per-token rows into an empty table: every score is 0
    CUDA_CHECK(cudaMemsetAsync(p.scores, 0, std::size_t(p.tokens) * std::size_t(entries) * 4, stream));
    return;
  }
  DI_CHECK(p.tokens <= 65535, "index_scores: {} tokens in one call (at most 65535)", p.tokens);
  DI_CHECK(p.q && p.weights && p.keys.data && p.scores, "index_scores: missing operand");
  DI_CHECK(reinterpret_cast<std::uintptr_t>(p.q) % 16 == 0, "index_scores: q not 16-byte aligned");
  const std::size_t smem = (std::size_t(kScoreHeads) * (p.dim + 4) +
                            std::size_t(kScoreEntries) * p.dim + 16 * kScoreEntries) *
                           sizeof(float);
  static std::atomic<std::size_t> limits[16];
  detail::ensure_smem(reinterpret_cast<const void*>(&index_scores_kernel), smem, limits);
  const dim3 grid(detail::grid_for(entries, kScoreEntries), unsigned(p.tokens));
  detail::launch("index_scores", index_scores_kernel, grid, kScoreThreads, smem, stream, p.q,
                 p.weights, detail::make_dev_rows(p.keys), p.key_rows, entries, p.scores, p.heads,
                 p.dim);
}

void launch_topk(const topk_params& p, cudaStream_t stream) {
  DI_CHECK(p.k >= 0 && p.k <= p.n && p.k <= topk_max_k, "topk: k = {} of {} values (at most {})",
           p.k, p.n, topk_max_k);
  if (p.rows == 0 || p.k == 0) return;
  DI_CHECK(p.scores && p.out, "topk: missing operand");
  DI_CHECK(!p.mapped || (p.index_order && p.map), "topk: mapped picks need index_order and a map");
  static std::atomic<std::size_t> limits[16];
  detail::ensure_smem(reinterpret_cast<const void*>(&topk_kernel), sizeof(topk_smem), limits);
  detail::launch("topk", topk_kernel, unsigned(p.rows), kTopkThreads, sizeof(topk_smem), stream, p);
}

std::size_t candidate_blocks_work_bytes(std::int64_t tokens, std::int64_t entries, int block_size,
                                        int topk_blocks) {
  const std::int64_t blocks = block_size > 0 ? (entries + block_size - 1) / block_size : 0;
  const std::int64_t k = std::min<std::int64_t>(topk_blocks, blocks);
  return std::size_t(tokens * blocks) * sizeof(float) + std::size_t(tokens * k) * 4 + 16;
}

void launch_candidate_blocks(const candidate_blocks_params& p, cudaStream_t stream) {
  DI_CHECK(p.topk_blocks > 0 && p.block_size > 0, "candidate_blocks: top {} blocks of {}",
           p.topk_blocks, p.block_size);
  if (p.tokens == 0 || p.entries == 0) return;
  DI_CHECK(p.scores && p.visible && p.keep && p.work, "candidate_blocks: missing operand");
  const std::int64_t blocks = (p.entries + p.block_size - 1) / p.block_size;
  const int k = int(std::min<std::int64_t>(p.topk_blocks, blocks));
  DI_CHECK(k <= topk_max_k, "candidate_blocks: top {} blocks (at most {})", k, topk_max_k);
  float* block_scores = static_cast<float*>(p.work);
  auto* picked = reinterpret_cast<std::int32_t*>(
      (reinterpret_cast<std::uintptr_t>(block_scores + p.tokens * blocks) + 15) & ~std::uintptr_t(15));
  detail::launch("block_max", block_max_kernel, detail::grid_for(p.tokens * blocks, 256), 256, 0,
                 stream, p.scores, p.visible, block_scores, p.tokens, p.entries, blocks,
                 p.block_size);
  topk_params tp;
  tp.scores = block_scores;
  tp.out = picked;
  tp.rows = p.tokens;
  tp.n = blocks;
  tp.k = k;
  tp.index_order = true;  // marked below: their order does not matter
  launch_topk(tp, stream);
  CUDA_CHECK(cudaMemsetAsync(p.keep, 0, std::size_t(p.tokens * p.entries), stream));
  const std::int64_t work = p.tokens * k * std::int64_t(p.block_size);
  detail::launch("mark_blocks", mark_blocks_kernel, detail::grid_for(work, 256), 256, 0, stream,
                 picked, p.keep, p.tokens, p.entries, k, p.block_size);
}

}  // namespace di::cuda
