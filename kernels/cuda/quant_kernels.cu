// CUDA kernels of the block fake-quantizers (one warp per block of a row), the normalised
// Walsh-Hadamard transform (one thread block per row, butterflies in shared memory in the
// CPU's stage order, so results are bitwise equal) and the rotary embedding.
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/quant_kernels.hpp"

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/kernel_attributes.hpp"
#include "kernels/quant_math.hpp"

#include <algorithm>

namespace di::cuda {

namespace {

constexpr int warps_per_block = 8;

__global__ void fake_quant_kernel(fake_quant_params p) {
  detail::grid_dependency_sync();
  const std::int64_t blocks_per_row = (p.num_dims + p.block - 1) / p.block;
  const std::int64_t item = std::int64_t(blockIdx.x) * warps_per_block + threadIdx.x / 32;
  if (item >= p.rows * blocks_per_row) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t row = item / blocks_per_row, b = item % blocks_per_row;
  float* v = p.x + row * p.dim + b * p.block;
  const std::int64_t n = min(std::int64_t(p.block), p.num_dims - b * p.block);
  float amax = 0.0f;
  for (std::int64_t i = lane; i < n; i += 32) amax = fmaxf(amax, fabsf(v[i]));
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if (p.kind == 0) {
    const float scale = fp8_block_scale(amax);
    for (std::int64_t i = lane; i < n; i += 32) v[i] = fp8_fake_quant_value(v[i], scale);
  } else {
    const float scale = p.kind == 1 ? fp4_ue8m0_block_scale(amax) : fp4_e4m3_block_scale(amax);
    for (std::int64_t i = lane; i < n; i += 32) v[i] = fp4_fake_quant_value(v[i], scale);
  }
}

__global__ void hadamard_kernel(float* x, std::int64_t dim, float norm) {
  detail::grid_dependency_sync();
  extern __shared__ float row[];
  float* v = x + std::int64_t(blockIdx.x) * dim;
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) row[i] = v[i];
  __syncthreads();
  for (std::int64_t h = 1; h < dim; h *= 2) {
    // Pair k: j = (k / h) * 2h + k % h, partner j + h (the CPU's butterflies of this stage).
    for (std::int64_t k = threadIdx.x; k < dim / 2; k += blockDim.x) {
      const std::int64_t j = (k / h) * 2 * h + k % h;
      const float a = row[j], b = row[j + h];
      row[j] = a + b;
      row[j + h] = a - b;
    }
    __syncthreads();
  }
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) v[i] = row[i] * norm;
}

constexpr int kRotaryMaxPairs = 256;

constexpr int kRotaryThreads = 256;

/// One block per token and run of heads_per_block heads (a thread per rotated pair: one
/// token's 64 query heads were 8 dependent passes of a single block, 5.7 us per call under
/// ncu). The angles depend on the pair only, so each block evaluates them once (in double
/// precision, as the CPU does) into shared memory and applies them to its heads: the first
/// version evaluated them per head, 64x the double sin/cos on V4 widths (7 us per call).
__global__ void rotary_kernel(rotary_params p, int heads_per_block) {
  detail::grid_dependency_sync();
  __shared__ float sc[2][kRotaryMaxPairs];
  const std::int64_t t = blockIdx.x;
  const float pos = float(p.positions[t]);
  for (std::int64_t i = threadIdx.x; i < p.pairs; i += blockDim.x) {
    const float angle = __fmul_rn(pos, p.inv_freq[i]);
    sc[0][i] = float(cos(double(angle)));
    const float s = float(sin(double(angle)));
    sc[1][i] = p.inverse ? -s : s;
  }
  __syncthreads();
  // 32-bit index arithmetic (heads * pairs is small; 64-bit divisions cost ~60 ops each).
  const int pairs = int(p.pairs), h0 = int(blockIdx.y) * heads_per_block;
  const int h1 = min(int(p.heads), h0 + heads_per_block), items = (h1 - h0) * pairs;
  for (int k = int(threadIdx.x); k < items; k += int(blockDim.x)) {
    const int h = h0 + k / pairs, i = k % pairs;
    const float c = sc[0][i], s = sc[1][i];
    float* rope = p.x + (t * p.heads + h) * p.dim + (p.dim - 2 * pairs);
    const float re = rope[2 * i], im = rope[2 * i + 1];
    // Separate roundings (no FMA contraction), as the CPU computes them.
    rope[2 * i] = __fsub_rn(__fmul_rn(re, c), __fmul_rn(im, s));
    rope[2 * i + 1] = __fadd_rn(__fmul_rn(re, s), __fmul_rn(im, c));
  }
}

}  // namespace

void launch_fake_quant(const fake_quant_params& p, cudaStream_t stream) {
  const std::int64_t blocks_per_row = (p.num_dims + p.block - 1) / p.block;
  const std::int64_t items = p.rows * blocks_per_row;
  if (items == 0) return;
  const std::int64_t grid = (items + warps_per_block - 1) / warps_per_block;
  detail::launch("fake_quant", fake_quant_kernel, unsigned(grid), warps_per_block * 32, 0, stream,
                 p);
}

void launch_hadamard(float* x, std::int64_t rows, std::int64_t dim, cudaStream_t stream) {
  if (rows == 0) return;
  const std::size_t smem = std::size_t(dim) * sizeof(float);
  static std::atomic<std::size_t> limits[detail::max_tracked_devices];
  detail::ensure_smem(reinterpret_cast<const void*>(&hadamard_kernel), smem, limits);
  const float norm = 1.0f / sqrtf(float(dim));
  detail::launch("hadamard", hadamard_kernel, unsigned(rows), 256, smem, stream, x, dim, norm);
}

void launch_rotary(const rotary_params& p, cudaStream_t stream) {
  if (p.tokens == 0 || p.pairs == 0 || p.heads == 0) return;
  DI_CHECK(p.pairs <= kRotaryMaxPairs, "rotary: {} rotated pairs (at most {})", p.pairs,
           kRotaryMaxPairs);
  DI_CHECK(p.heads <= (std::int64_t(1) << 20), "rotary: {} heads per token", p.heads);
  // A thread per pair (at most 65535 blocks along the heads).
  const int heads_per_block = int(std::max<std::int64_t>(
      std::max(1, kRotaryThreads / int(p.pairs)), (p.heads + 65534) / 65535));
  const std::int64_t head_blocks = (p.heads + heads_per_block - 1) / heads_per_block;
  detail::launch("rotary", rotary_kernel, dim3(unsigned(p.tokens), unsigned(head_blocks)),
                 kRotaryThreads, 0, stream, p, heads_per_block);
}

}  // namespace di::cuda
