// CUDA kernels of the block fake-quantizers (one warp per block of a row), the normalised
// Walsh-Hadamard transform (one thread block per row, butterflies in shared memory in the
// CPU's stage order, so results are bitwise equal) and the rotary embedding.
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/quant_kernels.hpp"
#include "kernels/cuda/rope_math.cuh"

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

/// One block per row through shared memory (rows of up to 32768): 32-bit indices, each pair's
/// position by shifts (64-bit divisions per pair before; the same pairs, the same bits).
__global__ void hadamard_kernel(float* x, std::int64_t dim, float norm) {
  detail::grid_dependency_sync();
  extern __shared__ float row[];
  float* v = x + std::int64_t(blockIdx.x) * dim;
  const int n = int(dim);  // <= 32768 (the op's check)
  for (int i = int(threadIdx.x); i < n; i += int(blockDim.x)) row[i] = v[i];
  __syncthreads();
  for (int h = 1, lh = 0; h < n; h *= 2, ++lh) {
    // Pair k: j = (k / h) * 2h + k % h, partner j + h (the CPU's butterflies of this stage).
    for (int k = int(threadIdx.x); k < n / 2; k += int(blockDim.x)) {
      const int j = ((k >> lh) << (lh + 1)) | (k & (h - 1));
      const float a = row[j], b = row[j + h];
      row[j] = a + b;
      row[j + h] = a - b;
    }
    __syncthreads();
  }
  for (int i = int(threadIdx.x); i < n; i += int(blockDim.x)) v[i] = row[i] * norm;
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
    const float2 cs = detail::rope_cos_sin(pos, p.inv_freq[i], p.inverse);
    sc[0][i] = cs.x;
    sc[1][i] = cs.y;
  }
  __syncthreads();
  // 32-bit index arithmetic (heads * pairs is small; 64-bit divisions cost ~60 ops each).
  const int pairs = int(p.pairs), h0 = int(blockIdx.y) * heads_per_block;
  const int h1 = min(int(p.heads), h0 + heads_per_block), items = (h1 - h0) * pairs;
  for (int k = int(threadIdx.x); k < items; k += int(blockDim.x)) {
    const int h = h0 + k / pairs, i = k % pairs;
    const float c = sc[0][i], s = sc[1][i];
    float* rope = p.x + (t * p.heads + h) * p.dim + (p.dim - 2 * pairs);
    const float2 r = detail::rope_rotate(rope[2 * i], rope[2 * i + 1], c, s);
    rope[2 * i] = r.x;
    rope[2 * i + 1] = r.y;
  }
}

/// One block per row: the row into shared memory, its RMS norm (the sum as rms_norm's scalar
/// path forms it), the rotation of its last 2 * pairs values, the FP8 fake quantization of its
/// first quant_dims values (a warp per block of values), then the row out: norm_rope_quant.
__global__ void norm_rope_quant_kernel(norm_rope_quant_params p) {
  detail::grid_dependency_sync();
  extern __shared__ float row[];  // [dim]
  __shared__ float scratch[32];
  const std::int64_t t = blockIdx.x;
  const float* x = p.x + t * p.dim;
  const int dim = int(p.dim), tid = int(threadIdx.x), threads = int(blockDim.x);
  float sum = 0.0f;
  for (int i = tid; i < dim; i += threads) {
    const float v = x[i];
    row[i] = v;
    sum += v * v;
  }
  sum = detail::block_sum_in_order(sum, scratch);  // ends with a barrier
  const float rs = 1.0f / sqrtf(sum / float(p.dim) + p.eps);
  for (int i = tid; i < dim; i += threads) {
    const float v = row[i] * rs;
    row[i] = p.weight ? p.weight[i] * v : v;
  }
  __syncthreads();
  const float pos = float(p.positions[t]);
  const int pairs = int(p.pairs), rope0 = dim - 2 * pairs;
  for (int i = tid; i < pairs; i += threads) {
    const float2 cs = detail::rope_cos_sin(pos, p.inv_freq[i], false);
    const float2 r = detail::rope_rotate(row[rope0 + 2 * i], row[rope0 + 2 * i + 1], cs.x, cs.y);
    row[rope0 + 2 * i] = r.x;
    row[rope0 + 2 * i + 1] = r.y;
  }
  __syncthreads();
  const int lane = tid % 32, blocks = int((p.quant_dims + p.quant_block - 1) / p.quant_block);
  for (int b = tid / 32; b < blocks; b += threads / 32) {  // as fake_quant_kernel, kind 0
    float* v = row + std::int64_t(b) * p.quant_block;
    const int n =
        int(min(std::int64_t(p.quant_block), p.quant_dims - std::int64_t(b) * p.quant_block));
    float amax = 0.0f;
    for (int i = lane; i < n; i += 32) amax = fmaxf(amax, fabsf(v[i]));
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float scale = fp8_block_scale(amax);
    for (int i = lane; i < n; i += 32) v[i] = fp8_fake_quant_value(v[i], scale);
  }
  __syncthreads();
  float* out = p.out + t * p.dim;
  for (int i = tid; i < dim; i += threads) out[i] = row[i];
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
  DI_CHECK(dim > 0 && dim <= 32768 && (dim & (dim - 1)) == 0,
           "hadamard: rows of {} (a power of two up to 32768)", dim);
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
  const int heads_per_block = int(std::max<std::int64_t>(std::max(1, kRotaryThreads / int(p.pairs)),
                                                         (p.heads + 65534) / 65535));
  const std::int64_t head_blocks = (p.heads + heads_per_block - 1) / heads_per_block;
  detail::launch("rotary", rotary_kernel, dim3(unsigned(p.tokens), unsigned(head_blocks)),
                 kRotaryThreads, 0, stream, p, heads_per_block);
}

void launch_norm_rope_quant(const norm_rope_quant_params& p, cudaStream_t stream) {
  DI_CHECK(p.dim >= 1 && p.dim <= norm_rope_quant_max_dim && p.pairs <= kRotaryMaxPairs &&
               2 * p.pairs <= p.dim && p.quant_block > 0 && p.quant_dims <= p.dim,
           "norm_rope_quant: rows of {}, {} pairs, {} dims in blocks of {}", p.dim, p.pairs,
           p.quant_dims, p.quant_block);
  if (p.tokens == 0) return;
  // As rms_norm: the thread count from the width alone.
  const int threads = p.dim >= 4096 ? 1024 : p.dim >= 1024 ? 512 : 256;
  const std::size_t smem = std::size_t(p.dim) * sizeof(float);
  static std::atomic<std::size_t> limits[detail::max_tracked_devices];
  detail::ensure_smem(reinterpret_cast<const void*>(&norm_rope_quant_kernel), smem, limits);
  detail::launch("norm_rope_quant", norm_rope_quant_kernel, unsigned(p.tokens), threads, smem,
                 stream, p);
}

}  // namespace di::cuda
