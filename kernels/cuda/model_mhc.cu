// Manifold hyper-connections on the GPU (twin of kernels/cpu/mhc.cpp): the mixing
// coefficients of a site (RMS-scaled projections of the flattened streams, sigmoids and the
// Sinkhorn-normalised comb), V4's head mix, and the collapse / expand of the streams.
#include "kernels/cuda/model_common.cuh"

namespace di::cuda {

namespace {

constexpr int kMixThreads = 256;
constexpr int kMaxMixes = 32;  // (2 + hc) * hc for hc <= 4

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/// Row softmax (+eps), then alternating column / row normalisation (the CPU's order).
__device__ void sinkhorn(float* comb, int hc, int iters, float eps) {
  for (int j = 0; j < hc; ++j) {
    float* row = comb + j * hc;
    float mx = row[0];
    for (int k = 1; k < hc; ++k) mx = fmaxf(mx, row[k]);
    float sum = 0.0f;
    for (int k = 0; k < hc; ++k) sum += (row[k] = expf(row[k] - mx));
    for (int k = 0; k < hc; ++k) row[k] = row[k] / sum + eps;
  }
  for (int it = 0; it < iters; ++it) {
    if (it > 0)
      for (int j = 0; j < hc; ++j) {
        float sum = 0.0f;
        for (int k = 0; k < hc; ++k) sum += comb[j * hc + k];
        for (int k = 0; k < hc; ++k) comb[j * hc + k] /= sum + eps;
      }
    for (int k = 0; k < hc; ++k) {
      float sum = 0.0f;
      for (int j = 0; j < hc; ++j) sum += comb[j * hc + k];
      for (int j = 0; j < hc; ++j) comb[j * hc + k] /= sum + eps;
    }
  }
}

/// One block per token: every thread accumulates all mixes over a strided slice.
__global__ void hc_mixes_kernel(const hc_mixes_params p, int num_mixes) {
  __shared__ float sRed[kMaxMixes + 1][kMixThreads / 32];
  __shared__ float sMix[kMaxMixes];
  const std::int64_t t = blockIdx.x;
  const std::int64_t width = p.hc * p.dim;
  const float* x = p.x + t * width;
  float acc[kMaxMixes + 1];
#pragma unroll
  for (int m = 0; m <= kMaxMixes; ++m) acc[m] = 0.0f;
  for (std::int64_t i = threadIdx.x; i < width; i += kMixThreads) {
    const float v = x[i];
    acc[kMaxMixes] = fmaf(v, v, acc[kMaxMixes]);
#pragma unroll
    for (int m = 0; m < kMaxMixes; ++m)
      if (m < num_mixes) acc[m] = fmaf(v, p.fn[m * width + i], acc[m]);
  }
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
#pragma unroll
  for (int m = 0; m <= kMaxMixes; ++m) {
    const float s = detail::warp_sum(acc[m]);
    if (lane == 0) sRed[m][warp] = s;
  }
  __syncthreads();
  if (threadIdx.x <= kMaxMixes) {
    float s = 0.0f;
    for (int w = 0; w < kMixThreads / 32; ++w) s += sRed[threadIdx.x][w];
    sRed[threadIdx.x][0] = s;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  const float rs = 1.0f / sqrtf(sRed[kMaxMixes][0] / float(width) + p.norm_eps);
  for (int m = 0; m < num_mixes; ++m) sMix[m] = sRed[m][0] * rs;
  const int hc = p.hc;
  const float* s = p.scale;
  const float* b = p.base;
  for (int j = 0; j < hc; ++j) p.pre[t * hc + j] = sigmoid(sMix[j] * s[0] + b[j]) + p.hc_eps;
  if (p.head_pre) return;
  for (int j = 0; j < hc; ++j) p.post[t * hc + j] = 2.0f * sigmoid(sMix[hc + j] * s[1] + b[hc + j]);
  float comb[16];
  for (int j = 0; j < hc * hc; ++j) comb[j] = sMix[2 * hc + j] * s[2] + b[2 * hc + j];
  sinkhorn(comb, hc, p.sinkhorn_iters, p.hc_eps);
  for (int j = 0; j < hc * hc; ++j) p.comb[t * hc * hc + j] = comb[j];
}

__global__ void hc_collapse_kernel(const hc_collapse_params p) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.tokens * p.dim) return;
  const std::int64_t t = i / p.dim, d = i % p.dim;
  float acc = 0.0f;
  for (int k = 0; k < p.hc; ++k) acc += p.pre[t * p.hc + k] * p.x[(t * p.hc + k) * p.dim + d];
  p.out[i] = acc;
}

__global__ void hc_expand_kernel(const hc_expand_params p) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.tokens * p.hc * p.dim) return;
  const std::int64_t d = i % p.dim, k = (i / p.dim) % p.hc, t = i / (p.dim * p.hc);
  float mixed = 0.0f;
  for (int j = 0; j < p.hc; ++j)
    mixed += p.comb[(t * p.hc + j) * p.hc + k] * p.residual[(t * p.hc + j) * p.dim + d];
  p.out[i] = p.post[t * p.hc + k] * p.y[t * p.dim + d] + mixed;
}

}  // namespace

void launch_hc_mixes(const hc_mixes_params& p, cudaStream_t stream) {
  const int num_mixes = p.head_pre ? p.hc : (2 + p.hc) * p.hc;
  DI_CHECK(p.hc > 0 && p.hc <= 4 && p.dim > 0 && p.tokens >= 0 && p.sinkhorn_iters >= 1,
           "hc_mixes: {} streams of {} (at most 4 streams)", p.hc, p.dim);
  if (p.tokens == 0) return;
  DI_CHECK(p.x && p.fn && p.scale && p.base && p.pre && (p.head_pre || (p.post && p.comb)),
           "hc_mixes: missing operand");
  hc_mixes_kernel<<<unsigned(p.tokens), kMixThreads, 0, stream>>>(p, num_mixes);
  detail::check_launch("hc_mixes");
}

void launch_hc_collapse(const hc_collapse_params& p, cudaStream_t stream) {
  DI_CHECK(p.hc > 0 && p.dim >= 0 && p.tokens >= 0, "hc_collapse: {} streams of {}", p.hc, p.dim);
  if (p.tokens * p.dim == 0) return;
  DI_CHECK(p.x && p.pre && p.out, "hc_collapse: missing operand");
  hc_collapse_kernel<<<detail::grid_for(p.tokens * p.dim, 256), 256, 0, stream>>>(p);
  detail::check_launch("hc_collapse");
}

void launch_hc_expand(const hc_expand_params& p, cudaStream_t stream) {
  DI_CHECK(p.hc > 0 && p.dim >= 0 && p.tokens >= 0, "hc_expand: {} streams of {}", p.hc, p.dim);
  if (p.tokens * p.dim == 0) return;
  DI_CHECK(p.y && p.residual && p.post && p.comb && p.out, "hc_expand: missing operand");
  hc_expand_kernel<<<detail::grid_for(p.tokens * p.hc * p.dim, 256), 256, 0, stream>>>(p);
  detail::check_launch("hc_expand");
}

}  // namespace di::cuda
