// MoE on the GPU apart from the expert GEMMs and the row gathers: sqrt-softplus routing with
// bias-corrected top-k (or V4's fixed hash-routed experts) and the clamped SwiGLU.
#include "kernels/cuda/model_common.cuh"

namespace di::cuda {

namespace {

constexpr int kRouteThreads = 128;
constexpr int kMaxExperts = 1024;
constexpr int kMaxTopK = 16;

/// One block per token: scores in shared memory, k rounds of a block argmax (ties: lower id).
__global__ void route_kernel(const route_params p) {
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
    sBiased[e] = p.bias ? s + p.bias[e] : s;
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
        sBiased[i] = -INFINITY;  // taken
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

__global__ void swiglu_kernel(const swiglu_params p) {
  const std::int64_t n = p.rows * p.inter;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    float gv = p.gate[i], uv = p.up[i];
    if (p.limit > 0.0f) {
      uv = fminf(fmaxf(uv, -p.limit), p.limit);
      gv = fminf(gv, p.limit);
    }
    const float silu = gv / (1.0f + expf(-gv));
    const float v = silu * uv;
    p.out[i] = p.row_scale ? p.row_scale[i / p.inter] * v : v;
  }
}

}  // namespace

void launch_route(const route_params& p, cudaStream_t stream) {
  DI_CHECK(p.experts > 0 && p.experts <= kMaxExperts && p.top_k > 0 && p.top_k <= kMaxTopK &&
               p.top_k <= p.experts,
           "route: top {} of {} experts (at most {} of {})", p.top_k, p.experts, kMaxTopK,
           kMaxExperts);
  if (p.tokens == 0) return;
  DI_CHECK(p.logits && p.weights && p.experts_out, "route: missing operand");
  route_kernel<<<unsigned(p.tokens), kRouteThreads, 0, stream>>>(p);
  detail::check_launch("route");
}

void launch_swiglu(const swiglu_params& p, cudaStream_t stream) {
  DI_CHECK(p.rows >= 0 && p.inter >= 0, "swiglu: [{}, {}]", p.rows, p.inter);
  if (p.rows * p.inter == 0) return;
  DI_CHECK(p.gate && p.up && p.out, "swiglu: missing operand");
  const unsigned grid = std::min<unsigned>(detail::grid_for(p.rows * p.inter, 256), 132u * 16u);
  swiglu_kernel<<<grid, 256, 0, stream>>>(p);
  detail::check_launch("swiglu");
}

}  // namespace di::cuda
