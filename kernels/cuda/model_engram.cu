// Engram's per-stream gate on the GPU (twin of ops::engram_gate); the FP8 table rows are
// embedding_fp8 in basic_kernels.
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/model_common.cuh"

namespace di::cuda {

namespace {

/// One block per (token, stream): the three reductions, then the gated add.
__global__ void engram_gate_kernel(const engram_gate_params p) {
  detail::grid_dependency_sync();
  __shared__ float scratch[32];
  const std::int64_t tk = blockIdx.x;  // t * hc + k
  const std::int64_t t = tk / p.hc, k = tk % p.hc;
  const float* hp = p.h + tk * p.dim;
  const float* kp = p.key + tk * p.dim;
  const float* wp = p.weight + k * p.dim;
  float hh = 0.0f, kk = 0.0f, dot = 0.0f;
  for (std::int64_t d = threadIdx.x; d < p.dim; d += blockDim.x) {
    hh += hp[d] * hp[d];
    kk += kp[d] * kp[d];
    dot += hp[d] * wp[d] * kp[d];
  }
  hh = detail::block_sum(hh, scratch);
  kk = detail::block_sum(kk, scratch);
  dot = detail::block_sum(dot, scratch);
  const float dim = float(p.dim);
  const float rstd = (1.0f / sqrtf(hh / dim + p.eps)) * (1.0f / sqrtf(kk / dim + p.eps));
  const float g = dot * rstd * (1.0f / sqrtf(dim));
  const float root = copysignf(sqrtf(fmaxf(fabsf(g), p.clamp)), g);
  const float gate = 1.0f / (1.0f + expf(-root));
  const float* v = p.value + t * p.dim;
  for (std::int64_t d = threadIdx.x; d < p.dim; d += blockDim.x)
    p.out[tk * p.dim + d] = hp[d] + gate * v[d];
}

}  // namespace

void launch_engram_gate(const engram_gate_params& p, cudaStream_t stream) {
  DI_CHECK(p.hc > 0 && p.dim > 0 && p.tokens >= 0, "engram_gate: {} streams of {}", p.hc, p.dim);
  if (p.tokens == 0) return;
  DI_CHECK(p.h && p.key && p.value && p.weight && p.out, "engram_gate: missing operand");
  detail::launch("engram_gate", engram_gate_kernel, unsigned(p.tokens * p.hc), 256, 0, stream, p);
}

}  // namespace di::cuda
