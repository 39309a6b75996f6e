// Token sampling on the GPU (the twin of runtime::sampler's choice over adjusted logits): one
// block per row; greedy argmax (lowest id), top-k threshold by radix select, survivor weights
// in double, the top-p threshold by a bitwise search over the order keys (deterministic sums),
// min-p, and the seeded inverse-CDF walk in ascending id order as a chunked block scan. The
// counter-based draw is runtime/sampling_rng.hpp's, bit for bit.
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/model_common.cuh"

namespace di::cuda {

namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
/// runtime::random_uniform(seed, step, 0).
__device__ __forceinline__ double random_uniform(std::uint64_t seed, std::uint64_t step) {
  std::uint64_t h = mix64(seed + 0x9E3779B97F4A7C15ull);
  h = mix64(h ^ step);
  h = mix64(h ^ 0ull);
  return double(h >> 11) * 0x1.0p-53;
}

struct smem_t {
  double dred[kWarps];
  float fred[kWarps];
  int ired[kWarps];
  unsigned hist[256];
  unsigned sel, k_rem;
  double base;
  int found;
};

/// Deterministic block sum of doubles (fixed tree: warp shuffles, then warp 0 over warps).
__device__ double block_sum_d(double v, smem_t& sm) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) sm.dred[threadIdx.x >> 5] = v;
  __syncthreads();
  double r = 0.0;
  if (threadIdx.x < 32) {
    r = sm.dred[threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
    if (threadIdx.x == 0) sm.dred[0] = r;
  }
  __syncthreads();
  r = sm.dred[0];
  __syncthreads();
  return r;
}

/// Largest logit and the lowest id holding it; count of finite logits.
__device__ void row_max(const float* l, std::int64_t n, smem_t& sm, float& m, int& arg,
                        int& finite) {
  float best = -INFINITY;
  int idx = 0x7fffffff, cnt = 0;
  for (std::int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float v = l[i];
    cnt += v > -INFINITY;
    if (v > best) {  // ids ascend per thread: strict '>' keeps the lowest
      best = v;
      idx = int(i);
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    cnt += __shfl_xor_sync(0xffffffffu, cnt, o);
    if (ob > best || (ob == best && oi < idx)) {
      best = ob;
      idx = oi;
    }
  }
  const int w = int(threadIdx.x >> 5);
  if ((threadIdx.x & 31) == 0) {
    sm.fred[w] = best;
    sm.ired[w] = idx;
    sm.hist[w] = unsigned(cnt);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float b = sm.fred[0];
    int i = sm.ired[0];
    unsigned c = sm.hist[0];
    for (int k = 1; k < kWarps; ++k) {
      c += sm.hist[k];
      if (sm.fred[k] > b || (sm.fred[k] == b && sm.ired[k] < i)) {
        b = sm.fred[k];
        i = sm.ired[k];
      }
    }
    sm.fred[0] = b;
    sm.ired[0] = i;
    sm.hist[0] = c;
  }
  __syncthreads();
  m = sm.fred[0];
  arg = sm.ired[0];
  finite = int(sm.hist[0]);
  __syncthreads();
}

/// The k-th largest finite logit (counting repeats), by radix select on order keys.
__device__ float kth_largest(const float* l, std::int64_t n, int k, smem_t& sm) {
  std::uint32_t prefix = 0, pmask = 0;
  if (threadIdx.x == 0) sm.k_rem = unsigned(k);
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int i = int(threadIdx.x); i < 256; i += kThreads) sm.hist[i] = 0;
    __syncthreads();
    for (std::int64_t i = threadIdx.x; i < n; i += kThreads) {
      const float v = l[i];
      if (!(v > -INFINITY)) continue;
      const std::uint32_t key = detail::order_key(v);
      if ((key & pmask) == prefix) atomicAdd(&sm.hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned cum = 0;
      for (int d = 255; d >= 0; --d) {
        if (cum + sm.hist[d] >= sm.k_rem) {
          sm.sel = unsigned(d);
          sm.k_rem -= cum;
          break;
        }
        cum += sm.hist[d];
      }
    }
    __syncthreads();
    prefix |= sm.sel << shift;
    pmask |= 255u << shift;
    __syncthreads();
  }
  return detail::key_to_float(prefix);
}

__device__ __forceinline__ double weight(float v, float m, double t) {
  return exp(-((double(m) - double(v)) / t));
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const sample_params p) {
  detail::grid_dependency_sync();
  __shared__ smem_t sm;
  const std::int64_t r = blockIdx.x;
  const float* l = p.logits + r * p.vocab;
  const sample_row cfg = p.rows_cfg[r];
  float m;
  int arg, finite;
  row_max(l, p.vocab, sm, m, arg, finite);
  if (p.logsumexp) {
    double s = 0.0;
    for (std::int64_t i = threadIdx.x; i < p.vocab; i += kThreads)
      if (l[i] > -INFINITY) s += exp(double(l[i]) - double(m));
    s = block_sum_d(s, sm);
    if (threadIdx.x == 0) p.logsumexp[r] = finite ? float(double(m) + log(s)) : -INFINITY;
  }
  if (finite == 0) {
    if (threadIdx.x == 0) p.tokens[r] = -1;
    return;
  }
  if (cfg.temperature < 1e-5) {
    if (threadIdx.x == 0) p.tokens[r] = arg;
    return;
  }
  const double T = cfg.temperature;
  float thr = -INFINITY;
  if (cfg.top_k > 0 && cfg.top_k < finite) thr = kth_largest(l, p.vocab, cfg.top_k, sm);
  if (cfg.top_p < 1.0) {
    double mass = 0.0;
    for (std::int64_t i = threadIdx.x; i < p.vocab; i += kThreads) {
      const float v = l[i];
      if (v > -INFINITY && v >= thr) mass += weight(v, m, T);
    }
    const double target = cfg.top_p * block_sum_d(mass, sm);
    // Largest key K with sum_{key >= K} w >= target, built bit by bit from the top.
    std::uint32_t K = 0;
    for (int bit = 31; bit >= 0; --bit) {
      const std::uint32_t cand = K | (1u << bit);
      double s = 0.0;
      for (std::int64_t i = threadIdx.x; i < p.vocab; i += kThreads) {
        const float v = l[i];
        if (v > -INFINITY && v >= thr && detail::order_key(v) >= cand) s += weight(v, m, T);
      }
      if (block_sum_d(s, sm) >= target) K = cand;
    }
    double s0 = 0.0;  // K = 0 only qualifies if the whole mass reaches the target
    for (std::int64_t i = threadIdx.x; i < p.vocab; i += kThreads) {
      const float v = l[i];
      if (v > -INFINITY && v >= thr && detail::order_key(v) >= K) s0 += weight(v, m, T);
    }
    if (block_sum_d(s0, sm) >= target) {
      // the smallest present logit >= key_to_float(K): comparing keys keeps ties together
      const float vk = detail::key_to_float(K);
      thr = fmaxf(thr, vk);
    }
  }
  // kept: finite, l >= thr, w > 0, w >= min_p
  auto kept_w = [&](float v) -> double {
    if (!(v > -INFINITY) || v < thr) return 0.0;
    const double w = weight(v, m, T);
    return (w > 0.0 && w >= cfg.min_p) ? w : 0.0;
  };
  double tot = 0.0;
  for (std::int64_t i = threadIdx.x; i < p.vocab; i += kThreads) tot += kept_w(l[i]);
  const double total = block_sum_d(tot, sm);
  const double target = random_uniform(cfg.seed, std::uint64_t(cfg.step)) * total;
  // Inverse CDF in ascending id order: chunked inclusive scan (sequential sum inside a chunk
  // of kThreads ids would differ; the scan's order is fixed, hence deterministic).
  if (threadIdx.x == 0) {
    sm.base = 0.0;
    sm.found = 0x7fffffff;
  }
  __syncthreads();
  int last_kept = -1;
  for (std::int64_t c0 = 0; c0 < p.vocab; c0 += kThreads) {
    const std::int64_t i = c0 + threadIdx.x;
    const double w = i < p.vocab ? kept_w(l[i]) : 0.0;
    if (w > 0.0) last_kept = int(i);
    double x = w;  // warp inclusive scan
    for (int o = 1; o < 32; o <<= 1) {
      const double y = __shfl_up_sync(0xffffffffu, x, o);
      if ((threadIdx.x & 31) >= unsigned(o)) x += y;
    }
    if ((threadIdx.x & 31) == 31) sm.dred[threadIdx.x >> 5] = x;
    __syncthreads();
    if (threadIdx.x < 32) {
      double t = sm.dred[threadIdx.x];
      for (int o = 1; o < 32; o <<= 1) {
        const double y = __shfl_up_sync(0xffffffffu, t, o);
        if (threadIdx.x >= unsigned(o)) t += y;
      }
      sm.dred[threadIdx.x] = t;  // inclusive over warps
    }
    __syncthreads();
    const int wi = int(threadIdx.x >> 5);
    const double running = sm.base + (wi > 0 ? sm.dred[wi - 1] : 0.0) + x;
    if (w > 0.0 && running > target) atomicMin(&sm.found, int(i));
    __syncthreads();
    const int f = sm.found;
    if (f != 0x7fffffff) {
      if (threadIdx.x == 0) p.tokens[r] = f;
      return;
    }
    __syncthreads();
    if (threadIdx.x == 0) sm.base += sm.dred[kWarps - 1];
    __syncthreads();
  }
  // rounding left none: the last kept token
  int lk = last_kept;
  for (int o = 16; o > 0; o >>= 1) lk = max(lk, __shfl_xor_sync(0xffffffffu, lk, o));
  if ((threadIdx.x & 31) == 0) sm.ired[threadIdx.x >> 5] = lk;
  __syncthreads();
  if (threadIdx.x == 0) {
    int b = -1;
    for (int k = 0; k < kWarps; ++k) b = max(b, sm.ired[k]);
    p.tokens[r] = b;
  }
}

/// One block per row: mask, then suppression, then penalties (barriers between the stages).
__global__ void logit_edit_kernel(const logit_edit_params p) {
  detail::grid_dependency_sync();
  const std::int64_t r = blockIdx.x;
  float* l = p.logits + r * p.vocab;
  if (p.allowed) {
    const std::uint32_t* mask = p.allowed + r * ((p.vocab + 31) / 32);
    for (std::int64_t i = threadIdx.x; i < p.vocab; i += blockDim.x)
      if (((mask[i >> 5] >> (i & 31)) & 1u) == 0) l[i] = -INFINITY;
  }
  __syncthreads();
  if (p.suppressed_offsets) {
    for (std::int64_t j = p.suppressed_offsets[r] + threadIdx.x; j < p.suppressed_offsets[r + 1];
         j += blockDim.x) {
      const std::int32_t id = p.suppressed_ids[j];
      if (id >= 0 && id < p.vocab) l[id] = -INFINITY;
    }
  }
  __syncthreads();
  if (p.seen_offsets) {
    const penalty_row pr = p.penalties[r];
    for (std::int64_t j = p.seen_offsets[r] + threadIdx.x; j < p.seen_offsets[r + 1];
         j += blockDim.x) {
      const std::int32_t id = p.seen_ids[j];
      if (id < 0 || id >= p.vocab) continue;
      double x = l[id];
      x = x > 0 ? __ddiv_rn(x, pr.repetition) : __dmul_rn(x, pr.repetition);
      const std::int32_t n = p.seen_num_output[j];
      // no fused multiply-add: the CPU rounds the product and each sum separately
      if (n > 0) x = __dsub_rn(x, __dadd_rn(__dmul_rn(pr.frequency, double(n)), pr.presence));
      l[id] = float(x);
    }
  }
}

}  // namespace

void launch_logit_edits(const logit_edit_params& p, cudaStream_t stream) {
  DI_CHECK(p.rows >= 0 && p.vocab > 0, "logit_edits: [{}, {}] logits", p.rows, p.vocab);
  if (p.rows == 0) return;
  DI_CHECK(p.logits, "logit_edits: missing logits");
  DI_CHECK(!p.suppressed_offsets || p.suppressed_ids, "logit_edits: suppressed ids missing");
  DI_CHECK(!p.seen_offsets || (p.seen_ids && p.seen_num_output && p.penalties),
           "logit_edits: penalty lists missing");
  detail::launch("logit_edit", logit_edit_kernel, unsigned(p.rows), 256, 0, stream, p);
}

void launch_sample(const sample_params& p, cudaStream_t stream) {
  DI_CHECK(p.rows >= 0 && p.vocab > 0 && p.vocab <= 0x7fffffff, "sample: [{}, {}] logits",
           p.rows, p.vocab);
  if (p.rows == 0) return;
  DI_CHECK(p.logits && p.rows_cfg && p.tokens, "sample: missing operand");
  detail::launch("sample", sample_kernel, unsigned(p.rows), kThreads, 0, stream, p);
}

}  // namespace di::cuda
