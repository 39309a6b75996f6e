// Manifold hyper-connections on the GPU (twin of kernels/cpu/mhc.cpp): the mixing
// coefficients of a site (RMS-scaled projections of the flattened streams, sigmoids and the
// Sinkhorn-normalised comb), V4's head mix, and the collapse / expand of the streams.
#include "kernels/cuda/fresh_loads.cuh"
#include "kernels/cuda/kernel_attributes.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/model_common.cuh"
#include "kernels/quant_math.hpp"

#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>

namespace di::cuda {

namespace {

__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

// The mixes are a skinny product [tokens, hc * dim] x [hc * dim, num_mixes] (plus each row's
// sum of squares) followed by a tiny per-token epilogue. One block per token (the first
// version) streamed the 2 MB `fn` through a single multiprocessor: 250 us per site on V4.1-Flash
// widths, 40% of a batch-1 decode step. Now the width is split into chunks of kChunk elements:
// hc_mix_partials_kernel gives every (chunk, tile of kTileTokens tokens) block its own partial
// sums, and hc_mix_finish_kernel adds a token's partials in chunk order and runs the epilogue.
// A token's arithmetic does not depend on which tile it lands in or on the batch size, so the
// result is batch-invariant and deterministic (no atomics).
constexpr int kPartThreads = 128;
constexpr int kPerThread = 2;  // elements per thread per chunk, strided by kPartThreads
constexpr int kChunk = kPartThreads * kPerThread;
constexpr int kTileTokens = 4;
constexpr int kMaxMixes = 24;  // (2 + hc) * hc for hc <= 4
constexpr int kFinishThreads = 256;

std::int64_t mix_chunks(const hc_mixes_params& p) {
  return (p.hc * p.dim + kChunk - 1) / kChunk;
}

/// The warp's sums of v[0..N) (N <= 32) by a transposing butterfly: at each of 5 levels every
/// lane sends the half of its values its partner keeps -- 31 shuffles for all N sums, where N
/// warp_sums take 5 N (100 warp_sums per warp and block were most of hc_mix_partials at prefill
/// sizes: 430 us a launch for 2048 tokens). Lane i < N returns the sum of v[i] over the lanes,
/// added in a fixed tree: deterministic, and the same for every token.
/// One level of warp_sums_transposed: w[0..2 OFF) live, w[0..OFF) after it.
template <int OFF>
__device__ __forceinline__ void transpose_level(float (&w)[32], int lane) {
  const bool upper = (lane & OFF) != 0;  // keeps the upper half of the live values
#pragma unroll
  for (int i = 0; i < OFF; ++i) {
    const float send = upper ? w[i] : w[i + OFF];
    const float keep = upper ? w[i + OFF] : w[i];
    w[i] = keep + __shfl_xor_sync(0xffffffffu, send, OFF);
  }
}

template <int N>
__device__ __forceinline__ float warp_sums_transposed(const float (&v)[N]) {
  static_assert(N >= 1 && N <= 32, "one value per lane at the end");
  float w[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) w[i] = i < N ? v[i] : 0.0f;
  const int lane = int(threadIdx.x) & 31;
  transpose_level<16>(w, lane);
  transpose_level<8>(w, lane);
  transpose_level<4>(w, lane);
  transpose_level<2>(w, lane);
  transpose_level<1>(w, lane);
  return w[0];
}

/// partial[(chunk * tokens + t) * (num_mixes + 1) + m]: chunk's share of mix m of token t;
/// entry num_mixes holds the sum of squares. The loads carry no control dependence (indices
/// are clamped and surplus values masked), so each thread issues all of them at once: at
/// decode the 2 MB `fn` is a few DRAM latencies of work, not a bandwidth problem. A block takes
/// `tiles` token tiles in turn with its chunk of `fn` held in registers (batch 64: each chunk of
/// `fn` read by 16 tiles' blocks was 24 MB of L2 reads a site, 9 us a launch); a token's sums
/// are the same whichever block takes its tile.
template <int Mixes>
__global__ void __launch_bounds__(kPartThreads)
    hc_mix_partials_kernel(const hc_mixes_params p, int num_mixes, float* partial, int tiles) {
  detail::grid_dependency_sync();
  __shared__ float sRed[kTileTokens * (Mixes + 1)][kPartThreads / 32];
  const std::int64_t width = std::int64_t(p.hc) * p.dim;
  const std::int64_t chunk = blockIdx.x;
  float fv[kPerThread][Mixes];  // this thread's fn values of the chunk (0 past the width)
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const std::int64_t i = chunk * kChunk + k * kPartThreads + threadIdx.x;
    const std::int64_t ii = i < width ? i : 0;
#pragma unroll
    for (int m = 0; m < Mixes; ++m)
      fv[k][m] = p.fn[std::int64_t(m < num_mixes ? m : num_mixes - 1) * width + ii];
  }
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int stride = num_mixes + 1;
  for (int tt = 0; tt < tiles; ++tt) {
    const std::int64_t t0 = (std::int64_t(blockIdx.y) * tiles + tt) * kTileTokens;
    if (t0 >= p.tokens) break;  // uniform over the block
    const int tile = p.tokens - t0 < kTileTokens ? int(p.tokens - t0) : kTileTokens;
    float acc[kTileTokens][Mixes + 1];
#pragma unroll
    for (int t = 0; t < kTileTokens; ++t)
#pragma unroll
      for (int m = 0; m <= Mixes; ++m) acc[t][m] = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const std::int64_t i = chunk * kChunk + k * kPartThreads + threadIdx.x;
      const bool valid = i < width;
      const std::int64_t ii = valid ? i : 0;
      float xv[kTileTokens];
#pragma unroll
      for (int t = 0; t < kTileTokens; ++t) {
        const float v = p.x[(t0 + (t < tile ? t : 0)) * width + ii];
        xv[t] = valid && t < tile ? v : 0.0f;
      }
#pragma unroll
      for (int t = 0; t < kTileTokens; ++t) acc[t][Mixes] = fmaf(xv[t], xv[t], acc[t][Mixes]);
#pragma unroll
      for (int m = 0; m < Mixes; ++m)
#pragma unroll
        for (int t = 0; t < kTileTokens; ++t) acc[t][m] = fmaf(xv[t], fv[k][m], acc[t][m]);
    }
    static_assert(Mixes + 1 <= 32, "a token's sums fit one transposed butterfly");
    if (tt > 0) __syncthreads();  // the last tile's sRed has been read
#pragma unroll
    for (int t = 0; t < kTileTokens; ++t)
      if (t < tile) {  // uniform over the block: tokens past the tile are not reduced
        const float s = warp_sums_transposed(acc[t]);
        if (lane <= Mixes) sRed[t * (Mixes + 1) + lane][warp] = s;
      }
    __syncthreads();
    for (int e = int(threadIdx.x); e < tile * (Mixes + 1); e += kPartThreads) {
      const int t = e / (Mixes + 1), m = e % (Mixes + 1);
      if (m < num_mixes || m == Mixes) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < kPartThreads / 32; ++w) s += sRed[e][w];
        partial[(chunk * p.tokens + t0 + t) * stride + (m == Mixes ? num_mixes : m)] = s;
      }
    }
  }
}

/// Token tiles a block of hc_mix_partials takes: enough blocks for two per SM, at most 8
/// tiles; DEEPINFER_HC_MIX_TILES=n: n (for comparisons; the same bits).
int mix_tiles_per_block(std::int64_t chunks, std::int64_t tiles) {
  static const int forced = int(detail::env_count("DEEPINFER_HC_MIX_TILES", 0, 64, 0));
  if (forced > 0) return forced;
  const std::int64_t want = chunks * tiles / (2 * std::int64_t(detail::multiprocessor_count()));
  return int(std::clamp<std::int64_t>(want, 1, 8));
}

/// Sinkhorn normalisation of a token's comb with one element per lane (lane = 4 j + k; lanes
/// with j or k >= hc hold 0 and take no part): row softmax (+eps), then alternating column /
/// row normalisation in the CPU twin's order (kernels/cpu/mhc.cpp). Row sums add over lane
/// bits 0-1, column sums over bits 2-3. Called by a whole warp; returns the lane's element.
__device__ float sinkhorn_lane(float v, int hc, int iters, float eps) {
  const int lane = int(threadIdx.x) & 31, j = (lane >> 2) & 3, k = lane & 3;
  const bool live = lane < 16 && j < hc && k < hc;
  auto row_sum = [](float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
  };
  auto col_sum = [](float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 4);
    return x + __shfl_xor_sync(0xffffffffu, x, 8);
  };
  float mx = live ? v : -INFINITY;
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float e = live ? expf(v - mx) : 0.0f;
  const float rs = row_sum(e);
  v = live ? e / rs + eps : 0.0f;
  for (int it = 0; it < iters; ++it) {
    if (it > 0) {
      const float r = row_sum(v);
      v = live ? v / (r + eps) : 0.0f;
    }
    const float c = col_sum(v);
    v = live ? v / (c + eps) : 0.0f;
  }
  return v;
}

/// One block per token: warps add the partials of their mixes over the chunks (lane-strided,
/// then a fixed shuffle tree: deterministic), warp 0 runs the epilogue.
__global__ void __launch_bounds__(kFinishThreads)
    hc_mix_finish_kernel(const hc_mixes_params p, int num_mixes, int chunks, const float* partial) {
  detail::grid_dependency_sync();
  __shared__ float sMix[kMaxMixes + 1];
  const std::int64_t t = blockIdx.x;
  const int stride = num_mixes + 1;
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  // Warp w adds mixes w, w + 8, ...: all of its loads of one chunk column at once (a loop per
  // mix waited for each mix's loads in turn).
  constexpr int kWarps = kFinishThreads / 32;
  constexpr int kRounds = (kMaxMixes + 1 + kWarps - 1) / kWarps;
  float part[kRounds] = {};
  for (int c = lane; c < chunks; c += 32) {
    const float* col = partial + (std::int64_t(c) * p.tokens + t) * stride;
#pragma unroll
    for (int r = 0; r < kRounds; ++r)
      if (warp + r * kWarps < stride) part[r] += col[warp + r * kWarps];
  }
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    const float sum = detail::warp_sum(part[r]);
    if (lane == 0 && warp + r * kWarps < stride) sMix[warp + r * kWarps] = sum;
  }
  __syncthreads();
  if (warp != 0) return;
  const std::int64_t width = std::int64_t(p.hc) * p.dim;
  const float rs = 1.0f / sqrtf(sMix[num_mixes] / float(width) + p.norm_eps);
  const int hc = p.hc;
  const float* s = p.scale;
  const float* b = p.base;
  if (lane < hc) p.pre[t * hc + lane] = sigmoid(sMix[lane] * rs * s[0] + b[lane]) + p.hc_eps;
  if (p.head_pre) return;  // uniform over the warp
  if (lane < hc) p.post[t * hc + lane] = 2.0f * sigmoid(sMix[hc + lane] * rs * s[1] + b[hc + lane]);
  const int j = (lane >> 2) & 3, k = lane & 3;
  const bool live = lane < 16 && j < hc && k < hc;
  const int e = j * hc + k;
  const float v = live ? sMix[2 * hc + e] * rs * s[2] + b[2 * hc + e] : 0.0f;
  const float c = sinkhorn_lane(v, hc, p.sinkhorn_iters, p.hc_eps);
  if (live) p.comb[t * hc * hc + e] = c;
}

__global__ void hc_collapse_kernel(const hc_collapse_params p) {
  detail::grid_dependency_sync();
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.tokens * p.dim) return;
  const std::int64_t t = i / p.dim, d = i % p.dim;
  float acc = 0.0f;
  for (int k = 0; k < p.hc; ++k) acc += p.pre[t * p.hc + k] * p.x[(t * p.hc + k) * p.dim + d];
  p.out[i] = acc;
}

/// Values of a row a thread keeps between the collapse and the scaling (hc_collapse_norm).
constexpr int kNormPerThread = 8;
constexpr int kMaxStreams = int(hc_collapse_norm_max_streams);  // V4 and V4.1: 4 streams
/// The cluster variant (set_hc_collapse_norm_cluster): blocks per token, threads per block and
/// values per thread (a slice of at most 1024 columns: dim <= 8192).
constexpr int kNormCluster = 8;
constexpr int kNormClusterThreads = 256;
constexpr int kNormClusterPerThread = 4;

/// The norm weights of a thread's columns (as finish_norm_row reads them; 1 without weights).
/// The cluster kernel loads them before waiting for the kernel before (PDL): norm weights are
/// constant, never written by the kernel launched just before (stream_gemm's early weights
/// rest on the same rule).
template <int NPT>
__device__ __forceinline__ void load_norm_weights(const hc_collapse_norm_params& p, std::int64_t d0,
                                                  std::int64_t end, float (&w)[NPT]) {
#pragma unroll
  for (int j = 0; j < NPT; ++j) {
    const std::int64_t d = d0 + threadIdx.x + std::int64_t(j) * blockDim.x;
    w[j] = p.weight && d < end ? p.weight[d] : 1.0f;
  }
}

/// The end of hc_collapse_norm for a thread's values v[j] (columns d0 + threadIdx.x + j *
/// blockDim.x below end) once the row's 1 / rms is known: the scaled (and weighted) row, and
/// its FP8 quantization. A quantization block is quant_block / 32 whole warps of one j
/// (blockDim.x is a multiple of 128 and d0 of quant_block), so its amax is their warps' maxima
/// combined -- a max, exact in any order: act_quant_kernel's scale and codes.
template <int NPT>
__device__ __forceinline__ void finish_norm_row(const hc_collapse_norm_params& p, std::int64_t t,
                                                float (&v)[NPT], const float (&w)[NPT], float rs,
                                                std::int64_t d0, std::int64_t end) {
  float* out = p.out + t * p.dim;
#pragma unroll
  for (int j = 0; j < NPT; ++j) {
    const std::int64_t d = d0 + threadIdx.x + std::int64_t(j) * blockDim.x;
    const float y = v[j] * rs;
    v[j] = d < end ? (p.weight ? w[j] * y : y) : 0.0f;  // the output value
    if (d < end) out[d] = v[j];
  }
  if (p.quant_block == 0) return;  // uniform
  __shared__ float warp_amax[NPT][32];
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
#pragma unroll
  for (int j = 0; j < NPT; ++j) {
    const float a = detail::warp_max(fabsf(v[j]));
    if (lane == 0) warp_amax[j][warp] = a;
  }
  __syncthreads();
  const int wpb = p.quant_block / 32, w0 = warp / wpb * wpb;
  std::uint8_t* codes = p.codes + t * p.dim;
#pragma unroll
  for (int j = 0; j < NPT; ++j) {
    const std::int64_t d = d0 + threadIdx.x + std::int64_t(j) * blockDim.x;
    if (d >= end) break;
    float amax = 0.0f;
    for (int w = w0; w < w0 + wpb; ++w) amax = fmaxf(amax, warp_amax[j][w]);
    const float scale = fp8_block_scale(amax);
    codes[d] = fp8_code(v[j], scale);
    if (d % p.quant_block == 0) {
      p.scales[t * (p.dim / p.quant_block) + d / p.quant_block] = scale;
      if (p.scales_mn) p.scales_mn[d / p.quant_block * p.tokens + t] = scale;
    }
  }
}

/// A thread's columns d0 + threadIdx.x + j * blockDim.x (below end) collapsed over the streams
/// (each value summed in stream order, as hc_collapse_kernel does) into v, and the sum of their
/// squares. Every load is issued before the first is used (a runtime loop over the streams
/// waited for each load in turn: ~32 memory latencies, 17 us per call at batch 1, ncu session 14).
template <int NPT>
__device__ __forceinline__ float collapse_values(const hc_collapse_norm_params& p, std::int64_t t,
                                                 std::int64_t d0, std::int64_t end,
                                                 float (&v)[NPT]) {
  const float* pre = p.pre + t * p.hc;
  const float* x = p.x + t * p.hc * p.dim;
  float w[kMaxStreams], xv[NPT][kMaxStreams];
#pragma unroll
  for (int k = 0; k < kMaxStreams; ++k) w[k] = k < p.hc ? pre[k] : 0.0f;
#pragma unroll
  for (int j = 0; j < NPT; ++j) {
    const std::int64_t d = d0 + threadIdx.x + std::int64_t(j) * blockDim.x;
#pragma unroll
    for (int k = 0; k < kMaxStreams; ++k) xv[j][k] = d < end && k < p.hc ? x[k * p.dim + d] : 0.0f;
  }
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < NPT; ++j) {
    float acc = 0.0f;  // summed over the streams in stream order, as hc_collapse_kernel does
#pragma unroll
    for (int k = 0; k < kMaxStreams; ++k)
      if (k < p.hc) acc += w[k] * xv[j][k];
    v[j] = acc;
    sum += acc * acc;
  }
  return sum;
}

/// One block per token: rms_norm(hc_collapse(x, pre)) without the [tokens, dim] temporary and
/// the second launch. dim <= kNormPerThread * blockDim.x.
__global__ void __launch_bounds__(1024) hc_collapse_norm_kernel(const hc_collapse_norm_params p) {
  detail::grid_dependency_sync();
  __shared__ float scratch[32];
  const std::int64_t t = blockIdx.x;
  float v[kNormPerThread];
  const float sum = detail::block_sum(collapse_values(p, t, 0, p.dim, v), scratch);
  float w[kNormPerThread];  // after the sum: up to 1024 threads keep within 64 registers
  load_norm_weights(p, 0, p.dim, w);
  finish_norm_row(p, t, v, w, 1.0f / sqrtf(sum / float(p.dim) + p.eps), 0, p.dim);
}

/// hc_collapse_norm on a cluster of kNormCluster blocks per token, each a slice of dim /
/// kNormCluster columns (a whole number of quantization blocks): the one-block kernel is bound
/// by its one SM issuing the loads, sums and codes of a whole row (12.6 us at V4.1's 4096 x 4,
/// ncu session 18: an instruction every 12.7 cycles per warp, 32 warps on 4 schedulers). Each
/// block sums its slice's squares; every block then adds the kNormCluster partial sums in rank
/// order from distributed shared memory (the same 1 / rms in every block).
__global__ void __launch_bounds__(kNormClusterThreads, 1)
    hc_collapse_norm_cluster_kernel(const hc_collapse_norm_params p) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const std::int64_t slice = p.dim / kNormCluster;
  const std::int64_t d0 = std::int64_t(cluster.block_rank()) * slice;
  float w[kNormClusterPerThread];
  load_norm_weights(p, d0, d0 + slice, w);  // constant: before the wait
  detail::grid_dependency_sync();
  __shared__ float scratch[32];
  __shared__ float slice_sum;
  const std::int64_t t = blockIdx.x / kNormCluster;
  float v[kNormClusterPerThread];
  const float sum = detail::block_sum(collapse_values(p, t, d0, d0 + slice, v), scratch);
  if (threadIdx.x == 0) slice_sum = sum;
  cluster.sync();
  float total = 0.0f;
#pragma unroll
  for (int r = 0; r < kNormCluster; ++r) total += *cluster.map_shared_rank(&slice_sum, unsigned(r));
  cluster.sync();  // no block leaves while another reads its slice_sum
  finish_norm_row(p, t, v, w, 1.0f / sqrtf(total / float(p.dim) + p.eps), d0, d0 + slice);
}

/// Block (x, y): stream row x = t * hc + k of the output, columns y * blockDim.x + thread (a
/// 64-bit division per element made this kernel 5x slower than its memory traffic at prefill
/// sizes: 450 us for 2048 tokens x 4 x 5120).
__global__ void hc_expand_kernel(const hc_expand_params p) {
  detail::grid_dependency_sync();
  const std::int64_t d = std::int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (d >= p.dim) return;
  const int row = int(blockIdx.x), t = row / p.hc, k = row % p.hc;  // 32-bit: row < 2^31
  const std::int64_t i = std::int64_t(row) * p.dim + d;
  float mixed = 0.0f;
  for (int j = 0; j < p.hc; ++j)
    mixed += p.comb[(std::int64_t(t) * p.hc + j) * p.hc + k] *
             p.residual[(std::int64_t(t) * p.hc + j) * p.dim + d];
  p.out[i] = p.post[std::int64_t(t) * p.hc + k] * p.y[std::int64_t(t) * p.dim + d] + mixed;
}

/// hc_expand_kernel's values for 4 columns of a token at once, every stream: each residual
/// float4 read once (the kernel above reads each residual value once per output stream, hc
/// times), the same products summed in the same order (the same bits). dim % 4 == 0, 16-byte
/// aligned rows, hc <= kExpandMaxHc.
constexpr int kExpandMaxHc = 4;
__global__ void hc_expand_vec_kernel(const hc_expand_params p) {
  detail::grid_dependency_sync();
  const std::int64_t quads = p.dim / 4;
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.tokens * quads) return;
  const std::int64_t t = i / quads, d = 4 * (i % quads);
  float4 r[kExpandMaxHc];  // fixed bounds below: kept in registers
#pragma unroll
  for (int j = 0; j < kExpandMaxHc; ++j)
    if (j < p.hc)
      r[j] = di::cuda::detail::load_fresh(
          reinterpret_cast<const float4*>(p.residual + (t * p.hc + j) * p.dim + d));
  const float4 y =
      di::cuda::detail::load_fresh(reinterpret_cast<const float4*>(p.y + t * p.dim + d));
#pragma unroll
  for (int k = 0; k < kExpandMaxHc; ++k) {
    if (k >= p.hc) break;
    float4 mixed = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int j = 0; j < kExpandMaxHc; ++j) {
      if (j >= p.hc) break;
      const float c = p.comb[(t * p.hc + j) * p.hc + k];
      mixed.x += c * r[j].x;
      mixed.y += c * r[j].y;
      mixed.z += c * r[j].z;
      mixed.w += c * r[j].w;
    }
    const float post = p.post[t * p.hc + k];
    float4 o;
    o.x = post * y.x + mixed.x;
    o.y = post * y.y + mixed.y;
    o.z = post * y.z + mixed.z;
    o.w = post * y.w + mixed.w;
    *reinterpret_cast<float4*>(p.out + (t * p.hc + k) * p.dim + d) = o;
  }
}

std::atomic<bool> g_expand_vec{detail::env_switch("DEEPINFER_HC_EXPAND_VEC", true)};

}  // namespace

void set_hc_expand_vec(bool on) {
  g_expand_vec = on;
}

bool hc_expand_vec() {
  return g_expand_vec;
}

std::size_t hc_mixes_workspace_bytes(const hc_mixes_params& p) {
  const int num_mixes = p.head_pre ? p.hc : (2 + p.hc) * p.hc;
  return std::size_t(mix_chunks(p)) * std::size_t(p.tokens) * std::size_t(num_mixes + 1) *
         sizeof(float);
}

void launch_hc_mixes(const hc_mixes_params& p, cudaStream_t stream) {
  const int num_mixes = p.head_pre ? p.hc : (2 + p.hc) * p.hc;
  DI_CHECK(p.hc > 0 && p.hc <= 4 && p.dim > 0 && p.tokens >= 0 && p.sinkhorn_iters >= 1,
           "hc_mixes: {} streams of {} (at most 4 streams)", p.hc, p.dim);
  if (p.tokens == 0) return;
  DI_CHECK(p.x && p.fn && p.scale && p.base && p.pre && (p.head_pre || (p.post && p.comb)),
           "hc_mixes: missing operand");
  DI_CHECK(p.workspace && p.workspace_bytes >= hc_mixes_workspace_bytes(p),
           "hc_mixes: workspace of {} bytes, needs {}", p.workspace_bytes,
           hc_mixes_workspace_bytes(p));
  const std::int64_t chunks = mix_chunks(p);
  DI_CHECK(chunks < (1 << 30) && (p.tokens + kTileTokens - 1) / kTileTokens < 65536,
           "hc_mixes: {} tokens of width {} exceed one launch", p.tokens, p.hc * p.dim);
  const std::int64_t token_tiles = (p.tokens + kTileTokens - 1) / kTileTokens;
  const int per_block = mix_tiles_per_block(chunks, token_tiles);
  const dim3 grid(unsigned(chunks), unsigned((token_tiles + per_block - 1) / per_block));
  float* partial = static_cast<float*>(p.workspace);
  if (num_mixes <= 8)
    detail::launch("hc_mix_partials", hc_mix_partials_kernel<8>, grid, kPartThreads, 0, stream, p,
                   num_mixes, partial, per_block);
  else if (num_mixes <= 16)
    detail::launch("hc_mix_partials", hc_mix_partials_kernel<16>, grid, kPartThreads, 0, stream, p,
                   num_mixes, partial, per_block);
  else
    detail::launch("hc_mix_partials", hc_mix_partials_kernel<kMaxMixes>, grid, kPartThreads, 0,
                   stream, p, num_mixes, partial, per_block);
  detail::launch("hc_mix_finish", hc_mix_finish_kernel, unsigned(p.tokens), kFinishThreads, 0,
                 stream, p, num_mixes, int(chunks), partial);
}

void launch_hc_collapse(const hc_collapse_params& p, cudaStream_t stream) {
  DI_CHECK(p.hc > 0 && p.dim >= 0 && p.tokens >= 0, "hc_collapse: {} streams of {}", p.hc, p.dim);
  if (p.tokens * p.dim == 0) return;
  DI_CHECK(p.x && p.pre && p.out, "hc_collapse: missing operand");
  detail::launch("hc_collapse", hc_collapse_kernel, detail::grid_for(p.tokens * p.dim, 256), 256, 0,
                 stream, p);
}

void launch_hc_collapse_norm(const hc_collapse_norm_params& p, cudaStream_t stream) {
  DI_CHECK(p.dim >= 1 && p.dim <= hc_collapse_norm_max_dim && p.hc >= 1 && p.hc <= kMaxStreams &&
               p.tokens >= 0,
           "hc_collapse_norm: {} streams of {} (at most {} streams)", p.hc, p.dim, kMaxStreams);
  if (p.tokens == 0) return;
  // As rms_norm: the thread count from the width alone (batch-invariant).
  const int threads = p.dim >= 4096 ? 1024 : p.dim >= 1024 ? 512 : 256;
  static_assert(hc_collapse_norm_max_dim <= kNormPerThread * 1024, "rows fit the registers");
  DI_CHECK(
      p.quant_block == 0 || ((p.quant_block == 32 || p.quant_block == 64 || p.quant_block == 128) &&
                             p.dim % p.quant_block == 0 && p.codes && p.scales),
      "hc_collapse_norm: cannot quantize rows of {} in blocks of {}", p.dim, p.quant_block);
  if (hc_collapse_norm_uses_cluster(p.dim)) {
    detail::launch_in("hc_collapse_norm", hc_collapse_norm_cluster_kernel,
                      unsigned(p.tokens * kNormCluster), kNormClusterThreads,
                      dim3(kNormCluster, 1, 1), 0, stream, p);
    return;
  }
  detail::launch("hc_collapse_norm", hc_collapse_norm_kernel, unsigned(p.tokens), threads, 0,
                 stream, p);
}

namespace {
std::atomic<bool> g_norm_cluster{detail::env_switch("DEEPINFER_HC_NORM_CLUSTER", true)};
}  // namespace

void set_hc_collapse_norm_cluster(bool on) {
  g_norm_cluster = on;
}

bool hc_collapse_norm_cluster() {
  return g_norm_cluster;
}

bool hc_collapse_norm_uses_cluster(std::int64_t dim) {
  return g_norm_cluster && dim % (kNormCluster * 128) == 0 &&
         dim / kNormCluster <= kNormClusterPerThread * kNormClusterThreads;
}

void launch_hc_expand(const hc_expand_params& p, cudaStream_t stream) {
  DI_CHECK(p.hc > 0 && p.dim >= 0 && p.tokens >= 0, "hc_expand: {} streams of {}", p.hc, p.dim);
  if (p.tokens * p.dim == 0) return;
  DI_CHECK(p.y && p.residual && p.post && p.comb && p.out, "hc_expand: missing operand");
  auto aligned = [](const float* q) { return reinterpret_cast<std::uintptr_t>(q) % 16 == 0; };
  if (g_expand_vec && p.hc <= kExpandMaxHc && p.dim % 4 == 0 && aligned(p.y) &&
      aligned(p.residual) && aligned(p.out)) {
    const std::int64_t threads = p.tokens * (p.dim / 4);
    detail::launch("hc_expand", hc_expand_vec_kernel, unsigned((threads + 255) / 256), 256, 0,
                   stream, p);
    return;
  }
  const std::int64_t rows = p.tokens * p.hc, chunks = (p.dim + 255) / 256;
  DI_CHECK(rows < (std::int64_t(1) << 31) && chunks < 65536,
           "hc_expand: {} tokens of {} streams x {} exceed one launch", p.tokens, p.hc, p.dim);
  detail::launch("hc_expand", hc_expand_kernel, dim3(unsigned(rows), unsigned(chunks)), 256, 0,
                 stream, p);
}

}  // namespace di::cuda
