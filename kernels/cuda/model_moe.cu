// MoE on the GPU apart from the expert GEMMs and the row gathers: sqrt-softplus routing with
// bias-corrected top-k (or V4's fixed hash-routed experts), grouping the routed pairs by
// expert (offsets and permutation on the device) and the clamped SwiGLU.
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/model_common.cuh"
#include "kernels/quant_math.hpp"

#include <cfloat>

namespace di::cuda {

namespace {

constexpr int kRouteThreads = 128;
constexpr int kMaxExperts = 1024;
constexpr int kMaxTopK = 16;

/// One block per token: scores in shared memory, k rounds of a block argmax (ties: lower id).
__global__ void route_kernel(const route_params p) {
  detail::grid_dependency_sync();
  __shared__ float sScore[kMaxExperts];
  __shared__ float sBiased[kMaxExperts];
  __shared__ float sVal[kRouteThreads / 32];
  __shared__ int sIdx[kRouteThreads / 32];
  __shared__ int sChosen[kMaxTopK];
  const std::int64_t t = blockIdx.x;
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  for (int e = tid; e < p.experts; e += kRouteThreads) {
    const float z = p.logits[t * p.experts + e] / p.gate_temp;
    const float softplus = z > 20.0f ? z : log1pf(expf(z));
    const float s = sqrtf(softplus);
    sScore[e] = s;
    // A NaN score ranks below every number but above -inf (taken), as in the CPU's topk: a
    // token whose scores are all NaN still names experts, and its NaN weights reach the logits.
    const float b = p.bias ? s + p.bias[e] : s;
    sBiased[e] = b != b ? -FLT_MAX : b;
  }
  __syncthreads();
  if (p.fixed) {
    if (tid < p.top_k) sChosen[tid] = p.fixed[t * p.top_k + tid];
  } else {
    for (int j = 0; j < p.top_k; ++j) {
      float best = -INFINITY;
      int idx = 0x7fffffff;
      for (int e = tid; e < p.experts; e += kRouteThreads) {
        const float v = sBiased[e];
        if (v > best || (v == best && e < idx)) {
          best = v;
          idx = e;
        }
      }
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best, o);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (ov > best || (ov == best && oi < idx)) {
          best = ov;
          idx = oi;
        }
      }
      if (lane == 0) {
        sVal[warp] = best;
        sIdx[warp] = idx;
      }
      __syncthreads();
      if (tid == 0) {
        float b = sVal[0];
        int i = sIdx[0];
        for (int w = 1; w < kRouteThreads / 32; ++w)
          if (sVal[w] > b || (sVal[w] == b && sIdx[w] < i)) {
            b = sVal[w];
            i = sIdx[w];
          }
        sChosen[j] = i;
        if (i < p.experts) sBiased[i] = -INFINITY;  // taken (none left: i stays past the end)
      }
      __syncthreads();
    }
  }
  __syncthreads();
  if (tid == 0) {
    float w[kMaxTopK];
    float sum = 0.0f;
    for (int j = 0; j < p.top_k; ++j) {
      int e = sChosen[j];
      if (e < 0 || e >= p.experts) e = 0;  // hash table out of range: contained, see header
      w[j] = sScore[e];
      sum += w[j];
    }
    for (int j = 0; j < p.top_k; ++j) {
      float v = w[j];
      if (p.normalize) v /= sum + p.normalize_eps;
      v *= p.route_scale;
      p.weights[t * p.top_k + j] = v;
      p.experts_out[t * p.top_k + j] = sChosen[j];
    }
  }
}

/// SwiGLU of element i (row i / inter): the CPU twin's clamps and order.
__device__ __forceinline__ float swiglu_value(const swiglu_params& p, std::int64_t i) {
  float gv = p.gate[i], uv = p.up[i];
  if (p.limit > 0.0f) {
    uv = fminf(fmaxf(uv, -p.limit), p.limit);
    gv = fminf(gv, p.limit);
  }
  const float silu = gv / (1.0f + expf(-gv));
  const float v = silu * uv;
  return p.row_scale ? p.row_scale[i / p.inter] * v : v;
}

__global__ void swiglu_kernel(const swiglu_params p) {
  detail::grid_dependency_sync();
  const std::int64_t n = p.rows * p.inter;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    p.out[i] = swiglu_value(p, i);
}

constexpr int kQuantWarps = 8;

/// A warp per (row, quantization block): the block's values (lanes strided by 32), their amax
/// by a butterfly, then act_quant_kernel's scale and codes -- the same bytes as quantizing out.
__global__ void swiglu_quant_kernel(const swiglu_params p) {
  detail::grid_dependency_sync();
  const std::int64_t blocks_per_row = p.inter / p.quant_block;
  const std::int64_t item = std::int64_t(blockIdx.x) * kQuantWarps + threadIdx.x / 32;
  if (item >= p.rows * blocks_per_row) return;  // whole warps
  const int lane = int(threadIdx.x) % 32, per = p.quant_block / 32;
  const std::int64_t r = item / blocks_per_row, b = item % blocks_per_row;
  const std::int64_t base = r * p.inter + b * p.quant_block;
  float v[4];
  float amax = 0.0f;
  for (int u = 0; u < per; ++u) {
    v[u] = swiglu_value(p, base + lane + 32 * u);
    p.out[base + lane + 32 * u] = v[u];
    amax = fmaxf(amax, fabsf(v[u]));
  }
  amax = detail::warp_max(amax);
  const float scale = fp8_block_scale(amax);
  for (int u = 0; u < per; ++u) p.codes[base + lane + 32 * u] = fp8_code(v[u], scale);
  if (lane == 0) {
    p.scales[r * blocks_per_row + b] = scale;
    if (p.scales_mn) p.scales_mn[b * p.rows + r] = scale;
  }
}

constexpr int kGroupThreads = 1024;
constexpr int kGroupChunk = 4096;  // expert ids staged in shared memory per pass

/// Exclusive scan of sCount[0..n) in place by warp 0 (lane l owns a run of consecutive
/// entries; the lanes' totals scanned with shuffles), the total left in sCount[n]. The
/// caller synchronises before and after.
__device__ void scan_counts_warp0(std::int32_t* sCount, int n) {
  const int lane = int(threadIdx.x) & 31;
  const int per = (n + 31) / 32, lo = min(n, lane * per), hi = min(n, lo + per);
  std::int32_t mine = 0;
  for (int e = lo; e < hi; ++e) mine += sCount[e];
  std::int32_t incl = mine;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const std::int32_t v = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += v;
  }
  std::int32_t at = incl - mine;
  for (int e = lo; e < hi; ++e) {
    const std::int32_t c = sCount[e];
    sCount[e] = at;
    at += c;
  }
  if (lane == 31) sCount[n] = incl;
}

/// One block. Thread (g, e) -- e = tid % experts, g = tid / experts, G = 1024 / experts groups
/// (4 at 256 experts) -- owns expert e within the g-th contiguous quarter (for G = 4) of each
/// chunk of pairs staged in shared memory, so the pairs stay in order: a pair's slot is its
/// expert's offset, plus the expert's pairs in earlier chunks and earlier groups of this chunk,
/// plus those before it in its own range. The first version walked every pair with one thread
/// per expert and scanned the offsets with one thread: ~30 us at batch 64, 8 at batch 1 (ncu,
/// session 14).
__global__ void __launch_bounds__(kGroupThreads)
    group_experts_kernel(const group_experts_params p) {
  detail::grid_dependency_sync();
  __shared__ std::int32_t sIds[kGroupChunk];
  __shared__ std::int32_t sCount[kMaxExperts + 1];  // per expert: pairs, then first slot
  __shared__ std::int32_t sGroup[kGroupThreads];    // [G][experts]: this chunk's counts
  const int tid = int(threadIdx.x), E = p.experts;
  const int G = kGroupThreads / E, g = tid / E, e = tid % E;
  const bool owner = g < G;
  std::int32_t total = 0;  // pass 0: pairs of (g, e) over every chunk
  for (int pass = 0; pass < 2; ++pass) {
    for (std::int64_t base = 0; base < p.pairs; base += kGroupChunk) {
      const int n = int(p.pairs - base < kGroupChunk ? p.pairs - base : kGroupChunk);
      __syncthreads();  // the previous chunk's reads are done
      for (int i = tid; i < n; i += kGroupThreads) {
        const std::int32_t x = p.experts_in[base + i];
        sIds[i] = x < 0 || x >= E ? 0 : x;  // contained as in route_kernel
      }
      __syncthreads();
      const int lo = int(std::int64_t(n) * g / G), hi = int(std::int64_t(n) * (g + 1) / G);
      std::int32_t cnt = 0;
      if (owner) {
#pragma unroll 8
        for (int i = lo; i < hi; ++i) cnt += sIds[i] == e;
      }
      if (pass == 0) {
        total += cnt;
        continue;
      }
      if (owner) sGroup[g * E + e] = cnt;
      __syncthreads();
      if (owner) {
        std::int32_t at = sCount[e];
        for (int h = 0; h < g; ++h) at += sGroup[h * E + e];
        for (int i = lo; i < hi && cnt > 0; ++i) {
          if (sIds[i] != e) continue;
          p.rows[at] = (base + i) / p.k;
          p.weights[at] = p.weights_in[base + i];
          if (p.slots) p.slots[base + i] = at;
          ++at;
          --cnt;
        }
      }
      __syncthreads();  // every (g, e) has read sCount[e]
      if (owner && g == 0) {
        std::int32_t all = 0;
        for (int h = 0; h < G; ++h) all += sGroup[h * E + e];
        sCount[e] += all;  // the next chunk's pairs of e start after this one's
      }
    }
    if (pass == 0) {
      if (owner) sGroup[g * E + e] = total;
      __syncthreads();
      if (owner && g == 0) {
        std::int32_t all = 0;
        for (int h = 0; h < G; ++h) all += sGroup[h * E + e];
        sCount[e] = all;
      }
      __syncthreads();
      if (tid < 32) scan_counts_warp0(sCount, E);
      __syncthreads();
      for (int x = tid; x <= E; x += kGroupThreads) p.offsets[x] = sCount[x];
    }
  }
}

// Decode-sized groupings (at most kPairThreads pairs, at most kPairMaxExperts experts): one
// thread per pair instead of group_experts_kernel's per-expert walks over the pairs (18 us a
// launch at batch 64, where a walk covers 96-192 pairs twice). A pair's slot is its expert's
// offset, plus the expert's pairs in earlier warps (per-warp counts in shared memory, summed
// over the warps before), plus those before it in its own warp (__match_any_sync): the pairs
// stay in pair order within each expert, so the same rows as group_experts_kernel.
constexpr int kPairThreads = 1024;
constexpr int kPairWarps = kPairThreads / 32;
constexpr int kPairMaxExperts = 640;  // per-warp counts (40 KB) + sCount within 48 KB

__global__ void __launch_bounds__(kPairThreads) group_pairs_kernel(const group_experts_params p) {
  detail::grid_dependency_sync();
  extern __shared__ std::uint16_t sWarp[];          // [warps][experts]: counts, then prefixes
  __shared__ std::int32_t sCount[kMaxExperts + 1];  // per expert: pairs, then first slot
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32, E = p.experts;
  for (int x = tid; x < kPairWarps * E; x += kPairThreads) sWarp[x] = 0;
  const bool mine = tid < p.pairs;
  std::int32_t e = 0;
  if (mine) {
    const std::int32_t x = p.experts_in[tid];
    e = x < 0 || x >= E ? 0 : x;  // contained as in route_kernel
  }
  __syncthreads();
  const unsigned active = __ballot_sync(0xffffffffu, mine);
  int before_in_warp = 0;
  if (mine) {
    const unsigned same = __match_any_sync(active, e);
    before_in_warp = __popc(same & ((1u << lane) - 1u));
    if (before_in_warp == 0) sWarp[warp * E + e] = std::uint16_t(__popc(same));
  }
  __syncthreads();
  for (int x = tid; x < E; x += kPairThreads) {  // per expert: prefixes over the warps, total
    std::int32_t run = 0;
    for (int w = 0; w < kPairWarps; ++w) {
      const std::int32_t c = sWarp[w * E + x];
      sWarp[w * E + x] = std::uint16_t(run);
      run += c;
    }
    sCount[x] = run;
  }
  __syncthreads();
  if (tid < 32) scan_counts_warp0(sCount, E);
  __syncthreads();
  for (int x = tid; x <= E; x += kPairThreads) p.offsets[x] = sCount[x];
  if (!mine) return;
  const std::int32_t at = sCount[e] + sWarp[warp * E + e] + before_in_warp;
  p.rows[at] = tid / p.k;
  p.weights[at] = p.weights_in[tid];
  if (p.slots) p.slots[tid] = at;
}

/// Whether group_experts takes group_pairs_kernel where it fits (DEEPINFER_GROUP_PAIRS, on by
/// default; the same rows either way).
bool group_pairs_on() {
  static const bool on = detail::env_switch("DEEPINFER_GROUP_PAIRS", true);
  return on;
}

// The chunked path (more than group_experts_one_block_pairs pairs).
constexpr int kPlaceChunk = 1024;  // pairs per chunk (one placing warp each)
constexpr int kCountThreads = 256;

std::int64_t place_chunks(const group_experts_params& p) {
  return (p.pairs + kPlaceChunk - 1) / kPlaceChunk;
}

__device__ __forceinline__ std::int32_t contained_expert(std::int32_t x, int experts) {
  return x < 0 || x >= experts ? 0 : x;  // as route_kernel and group_experts_kernel contain it
}

/// counts[c * E + e]: pairs of expert e in chunk c.
__global__ void __launch_bounds__(kCountThreads)
    group_count_kernel(const group_experts_params p, std::int32_t* counts) {
  detail::grid_dependency_sync();
  __shared__ std::int32_t hist[kMaxExperts];
  const int E = p.experts;
  for (int e = int(threadIdx.x); e < E; e += kCountThreads) hist[e] = 0;
  __syncthreads();
  const std::int64_t base = std::int64_t(blockIdx.x) * kPlaceChunk;
  const int n = int(min(std::int64_t(kPlaceChunk), p.pairs - base));
  for (int i = int(threadIdx.x); i < n; i += kCountThreads)
    atomicAdd(&hist[contained_expert(p.experts_in[base + i], E)], 1);  // counts: any order
  __syncthreads();
  for (int e = int(threadIdx.x); e < E; e += kCountThreads) counts[blockIdx.x * E + e] = hist[e];
}

/// One block: thread e turns its expert's counts into each chunk's first slot (in place) and
/// writes the offsets.
__global__ void __launch_bounds__(kGroupThreads)
    group_scan_kernel(const group_experts_params p, int chunks, std::int32_t* counts) {
  detail::grid_dependency_sync();
  __shared__ std::int32_t sCount[kMaxExperts + 1];
  const int E = p.experts, e = int(threadIdx.x);
  std::int32_t total = 0;
  if (e < E)
    for (int c = 0; c < chunks; ++c) {  // chunks before c, within expert e
      const std::int32_t n = counts[c * E + e];
      counts[c * E + e] = total;
      total += n;
    }
  if (e < E) sCount[e] = total;
  __syncthreads();
  if (threadIdx.x < 32) scan_counts_warp0(sCount, E);
  __syncthreads();
  for (int x = e; x <= E; x += kGroupThreads) p.offsets[x] = sCount[x];
  if (e < E)
    for (int c = 0; c < chunks; ++c) counts[c * E + e] += sCount[e];
}

/// One warp per chunk: its pairs in order, 32 at a time; lanes of one expert take consecutive
/// slots in lane order (__match_any_sync), after the expert's pairs of earlier steps and chunks.
__global__ void __launch_bounds__(32)
    group_place_kernel(const group_experts_params p, const std::int32_t* first) {
  detail::grid_dependency_sync();
  __shared__ std::int32_t next[kMaxExperts];
  __shared__ std::int32_t sIds[kPlaceChunk];
  __shared__ float sWeights[kPlaceChunk];
  const int E = p.experts, lane = int(threadIdx.x);
  const std::int64_t base = std::int64_t(blockIdx.x) * kPlaceChunk;
  const int n = int(min(std::int64_t(kPlaceChunk), p.pairs - base));
  for (int e = lane; e < E; e += 32) next[e] = first[blockIdx.x * E + e];
  for (int i = lane; i < n; i += 32) {  // every load issued before the walk
    sIds[i] = contained_expert(p.experts_in[base + i], E);
    sWeights[i] = p.weights_in[base + i];
  }
  __syncwarp();
  for (int s = 0; s < n; s += 32) {
    const int i = s + lane;
    const std::int32_t x = i < n ? sIds[i] : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, x);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    if (x >= 0) {
      const std::int32_t at = next[x] + rank;
      p.rows[at] = (base + i) / p.k;
      p.weights[at] = sWeights[i];
      if (p.slots) p.slots[base + i] = at;
    }
    __syncwarp();  // every lane has read next[x]
    if (x >= 0 && rank == 0) next[x] += __popc(peers);
    __syncwarp();
  }
}

}  // namespace

std::size_t group_experts_workspace_bytes(const group_experts_params& p) {
  if (p.pairs <= group_experts_one_block_pairs) return 0;
  return std::size_t(place_chunks(p)) * std::size_t(p.experts) * sizeof(std::int32_t);
}

void launch_route(const route_params& p, cudaStream_t stream) {
  DI_CHECK(p.experts > 0 && p.experts <= kMaxExperts && p.top_k > 0 && p.top_k <= kMaxTopK &&
               p.top_k <= p.experts,
           "route: top {} of {} experts (at most {} of {})", p.top_k, p.experts, kMaxTopK,
           kMaxExperts);
  if (p.tokens == 0) return;
  DI_CHECK(p.logits && p.weights && p.experts_out, "route: missing operand");
  detail::launch("route", route_kernel, unsigned(p.tokens), kRouteThreads, 0, stream, p);
}

void launch_group_experts(const group_experts_params& p, cudaStream_t stream) {
  DI_CHECK(p.experts > 0 && p.experts <= kMaxExperts && p.k > 0 && p.pairs >= 0 &&
               p.pairs % p.k == 0,
           "group_experts: {} pairs of {} over {} experts (at most {})", p.pairs, p.k, p.experts,
           kMaxExperts);
  DI_CHECK(p.offsets && (p.pairs == 0 || (p.experts_in && p.weights_in && p.rows && p.weights)),
           "group_experts: missing operand");
  if (p.pairs <= kPairThreads && p.experts <= kPairMaxExperts && group_pairs_on()) {
    detail::launch("group_pairs", group_pairs_kernel, 1, kPairThreads,
                   std::size_t(kPairWarps) * std::size_t(p.experts) * sizeof(std::uint16_t), stream,
                   p);
    return;
  }
  if (p.pairs <= group_experts_one_block_pairs) {
    detail::launch("group_experts", group_experts_kernel, 1, kGroupThreads, 0, stream, p);
    return;
  }
  DI_CHECK(p.workspace && p.workspace_bytes >= group_experts_workspace_bytes(p),
           "group_experts: workspace of {} bytes, needs {}", p.workspace_bytes,
           group_experts_workspace_bytes(p));
  const std::int64_t chunks = place_chunks(p);
  DI_CHECK(chunks < (std::int64_t(1) << 31) / p.experts, "group_experts: {} pairs", p.pairs);
  auto* counts = static_cast<std::int32_t*>(p.workspace);
  detail::launch("group_count", group_count_kernel, unsigned(chunks), kCountThreads, 0, stream, p,
                 counts);
  detail::launch("group_scan", group_scan_kernel, 1, kGroupThreads, 0, stream, p, int(chunks),
                 counts);
  detail::launch("group_place", group_place_kernel, unsigned(chunks), 32, 0, stream, p,
                 static_cast<const std::int32_t*>(counts));
}

void launch_swiglu(const swiglu_params& p, cudaStream_t stream) {
  DI_CHECK(p.rows >= 0 && p.inter >= 0, "swiglu: [{}, {}]", p.rows, p.inter);
  if (p.rows * p.inter == 0) return;
  DI_CHECK(p.gate && p.up && p.out, "swiglu: missing operand");
  if (p.quant_block > 0) {
    DI_CHECK((p.quant_block == 32 || p.quant_block == 64 || p.quant_block == 128) &&
                 p.inter % p.quant_block == 0 && p.codes && p.scales,
             "swiglu: cannot quantize rows of {} in blocks of {}", p.inter, p.quant_block);
    const std::int64_t items = p.rows * (p.inter / p.quant_block);
    detail::launch("swiglu_quant", swiglu_quant_kernel, detail::grid_for(items, kQuantWarps),
                   kQuantWarps * 32, 0, stream, p);
    return;
  }
  const unsigned grid = std::min<unsigned>(detail::grid_for(p.rows * p.inter, 256), 132u * 16u);
  detail::launch("swiglu", swiglu_kernel, grid, 256, 0, stream, p);
}

}  // namespace di::cuda
