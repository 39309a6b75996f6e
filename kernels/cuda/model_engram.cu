// Engram's per-stream gate on the GPU (twin of ops::engram_gate); the FP8 table rows are
// embedding_fp8 in basic_kernels.
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/model_common.cuh"

namespace di::cuda {

namespace {

constexpr int kGateThreads = 1024;

/// One block per (token, stream): the three reductions, then the gated add. A decode step
/// gates one token's 4 streams, so each block is the whole step: 1024 threads with 16-byte
/// loads issued together (the first version, 256 threads with one float each and a dependent
/// loop, took 19 us per call on V4.1's 5120 wide rows under ncu).
__global__ void __launch_bounds__(kGateThreads) engram_gate_kernel(const engram_gate_params p) {
  detail::grid_dependency_sync();
  __shared__ float scratch[3][32];
  const std::int64_t tk = blockIdx.x;  // t * hc + k
  const std::int64_t t = tk / p.hc, k = tk % p.hc;
  const std::int64_t key_stride = p.key_stride > 0 ? p.key_stride : p.hc * p.dim;
  const std::int64_t value_stride = p.value_stride > 0 ? p.value_stride : p.dim;
  const float* hp = p.h + tk * p.dim;
  const float* kp = p.key + t * key_stride + k * p.dim;
  const float* wp = p.weight + k * p.dim;
  const float* v = p.value + t * value_stride;
  float* out = p.out + tk * p.dim;
  auto aligned = [](const void* q) { return (reinterpret_cast<std::uintptr_t>(q) & 15u) == 0; };
  const bool vec = p.dim % 4 == 0 && aligned(hp) && aligned(kp) && aligned(wp) && aligned(v) &&
                   aligned(out);  // uniform over the block
  float hh = 0.0f, kk = 0.0f, dot = 0.0f;
  if (vec) {
    const int n4 = int(p.dim / 4);
#pragma unroll 2
    for (int i = int(threadIdx.x); i < n4; i += kGateThreads) {
      const float4 h = reinterpret_cast<const float4*>(hp)[i];
      const float4 kv = reinterpret_cast<const float4*>(kp)[i];
      const float4 w = reinterpret_cast<const float4*>(wp)[i];
      hh += h.x * h.x + h.y * h.y + h.z * h.z + h.w * h.w;
      kk += kv.x * kv.x + kv.y * kv.y + kv.z * kv.z + kv.w * kv.w;
      dot += h.x * w.x * kv.x + h.y * w.y * kv.y + h.z * w.z * kv.z + h.w * w.w * kv.w;
    }
  } else {
    for (std::int64_t d = threadIdx.x; d < p.dim; d += kGateThreads) {
      hh += hp[d] * hp[d];
      kk += kp[d] * kp[d];
      dot += hp[d] * wp[d] * kp[d];
    }
  }
  // The three block sums with one pair of barriers.
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  hh = detail::warp_sum(hh);
  kk = detail::warp_sum(kk);
  dot = detail::warp_sum(dot);
  if (lane == 0) {
    scratch[0][warp] = hh;
    scratch[1][warp] = kk;
    scratch[2][warp] = dot;
  }
  __syncthreads();
  const int warps = kGateThreads / 32;
  hh = detail::warp_sum(lane < warps ? scratch[0][lane] : 0.0f);
  kk = detail::warp_sum(lane < warps ? scratch[1][lane] : 0.0f);
  dot = detail::warp_sum(lane < warps ? scratch[2][lane] : 0.0f);
  const float dim = float(p.dim);
  const float rstd = (1.0f / sqrtf(hh / dim + p.eps)) * (1.0f / sqrtf(kk / dim + p.eps));
  const float g = dot * rstd * (1.0f / sqrtf(dim));
  const float root = copysignf(sqrtf(fmaxf(fabsf(g), p.clamp)), g);
  const float gate = 1.0f / (1.0f + expf(-root));
  if (vec) {
    const int n4 = int(p.dim / 4);
#pragma unroll 2
    for (int i = int(threadIdx.x); i < n4; i += kGateThreads) {
      const float4 h = reinterpret_cast<const float4*>(hp)[i];
      const float4 x = reinterpret_cast<const float4*>(v)[i];
      reinterpret_cast<float4*>(out)[i] =
          make_float4(h.x + gate * x.x, h.y + gate * x.y, h.z + gate * x.z, h.w + gate * x.w);
    }
  } else {
    for (std::int64_t d = threadIdx.x; d < p.dim; d += kGateThreads) out[d] = hp[d] + gate * v[d];
  }
}

}  // namespace

void launch_engram_gate(const engram_gate_params& p, cudaStream_t stream) {
  DI_CHECK(p.hc > 0 && p.dim > 0 && p.tokens >= 0 && p.key_stride >= 0 && p.value_stride >= 0,
           "engram_gate: {} streams of {} (token strides {} / {})", p.hc, p.dim, p.key_stride,
           p.value_stride);
  if (p.tokens == 0) return;
  DI_CHECK(p.h && p.key && p.value && p.weight && p.out, "engram_gate: missing operand");
  detail::launch("engram_gate", engram_gate_kernel, unsigned(p.tokens * p.hc), kGateThreads, 0,
                 stream, p);
}

}  // namespace di::cuda
