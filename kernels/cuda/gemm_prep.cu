// The GEMMs' helper kernels: FP8 activation quantization (one warp per block of a row, the
// CPU fake quantizer's codes and scales), exact dequantization of stored-format weights to
// fp32/bf16 (for the cuBLAS paths), and f32 -> bf16 conversion.
#include "kernels/cuda/gemm_kernels.hpp"
#include "kernels/cuda/launch.cuh"

#include "common/error.hpp"
#include "kernels/cuda/block_gemm_common.cuh"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/quant_math.hpp"

namespace di::cuda {

namespace {

constexpr int warps_per_block = 8;

__global__ void act_quant_kernel(act_quant_params p) {
  detail::grid_dependency_sync();
  const std::int64_t blocks_per_row = p.cols / p.block;
  const std::int64_t item = std::int64_t(blockIdx.x) * warps_per_block + threadIdx.x / 32;
  if (item >= p.rows * blocks_per_row) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t row = item / blocks_per_row, b = item % blocks_per_row;
  const float* v = p.x + row * p.cols + b * p.block;
  float amax = 0.0f;
  for (int i = lane; i < p.block; i += 32) amax = fmaxf(amax, fabsf(v[i]));
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float scale = fp8_block_scale(amax);
  std::uint8_t* out = p.codes + row * p.cols + b * p.block;
  for (int i = lane; i < p.block; i += 32) out[i] = fp8_code(v[i], scale);
  if (lane == 0) {
    if (p.mn_major)
      p.scales[b * p.rows + row] = scale;
    else
      p.scales[row * blocks_per_row + b] = scale;
  }
}

/// Word `word` of plain row `r` (rows of row_words 4-byte words) in weight_matrix::interleaved's
/// layout: stripe of 32 rows, run of 16 words per row (4 blocks u x 4 quarters t), then
/// ((2m + h) * 32 + 4g + t) * 4 + u for row 16m + 8h + g of the stripe.
__device__ std::int64_t fp4_interleaved_word(std::int64_t r, std::int64_t word,
                                             std::int64_t row_words) {
  const std::int64_t stripe = r / 32, run = word / 16;
  const int in_stripe = int(r % 32), w = int(word % 16), u = w / 4, t = w % 4;
  const int mh = in_stripe / 8, g = in_stripe % 8;  // (2m + h) = in_stripe / 8
  return stripe * 32 * row_words + run * 512 + ((mh * 32 + 4 * g + t) * 4 + u);
}

__device__ float weight_scale(const dequantize_params& p, std::int64_t r, std::int64_t c) {
  const std::int64_t i = (r / p.block_rows) * p.scale_cols + c / p.block_cols;
  return p.scale_e8m0 ? e8m0_to_f32(p.scale_e8m0[i]) : p.scale_f32[i];
}

__global__ void dequantize_kernel(dequantize_params p) {
  detail::grid_dependency_sync();
  const std::int64_t total = p.rows * p.cols;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / p.cols, c = i % p.cols;
    float v;
    switch (p.kind) {
      case 0:
        v = e4m3_to_f32(p.values[i]) * weight_scale(p, r, c);
        break;
      case 1: {
        const std::int64_t row_bytes = p.cols / 2, j = c / 2;  // byte j of plain row r
        const std::uint8_t byte =
            p.fp4_interleaved
                ? std::uint8_t(gemm_detail::fp4il_to_plain(
                      p.values[4 * fp4_interleaved_word(r, j / 4, row_bytes / 4) + j % 4]))
                : p.values[r * row_bytes + j];
        v = e2m1_to_f32((c & 1) ? byte >> 4 : byte & 0xf) * weight_scale(p, r, c);
        break;
      }
      case 2:
        v = bf16_to_f32(reinterpret_cast<const std::uint16_t*>(p.values)[i]);
        break;
      default:
        v = reinterpret_cast<const float*>(p.values)[i];
        break;
    }
    if (p.out_bf16)
      static_cast<std::uint16_t*>(p.out)[i] = f32_to_bf16(v);
    else
      static_cast<float*>(p.out)[i] = v;
  }
}

__global__ void to_bf16_kernel(const float* x, std::uint16_t* out, std::int64_t n) {
  detail::grid_dependency_sync();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    out[i] = f32_to_bf16(x[i]);
}

__global__ void split_bf16_kernel(const float* x, std::uint16_t* parts, int count, std::int64_t n) {
  detail::grid_dependency_sync();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    float rest = x[i];
    for (int k = 0; k < count; ++k) {  // each part the bf16 of what the ones before left
      const std::uint16_t h = f32_to_bf16(rest);
      parts[k * n + i] = h;
      const float back = bf16_to_f32(h);
      rest = isfinite(back) ? rest - back : 0.0f;  // inf / NaN: the first part alone
    }
  }
}

/// y = (p0 + p1) + p2 (+ ...), element-wise over parts [count, n]: the order in which GEMMs
/// accumulating one part after another into y add them.
__global__ void sum_parts_kernel(const float* parts, float* y, int count, std::int64_t n) {
  detail::grid_dependency_sync();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    float sum = parts[i];
    for (int k = 1; k < count; ++k) sum = parts[k * n + i] + sum;
    y[i] = sum;
  }
}

/// FP8 fake quantization written as bf16 (exact: a code times a power of two), `group` =
/// block / 4 consecutive threads per block of a row, 4 values each: the block's amax by a
/// butterfly over the group, then fake_quant_kernel's scale and values -- to_bf16(fake_quant(x))
/// in one pass, without the fp32 copy.
__global__ void fake_quant_bf16_kernel(const float* x, std::uint16_t* out, std::int64_t rows,
                                       std::int64_t cols, int block) {
  detail::grid_dependency_sync();
  const std::int64_t quads = rows * (cols / 4);
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int group = block / 4;
  // Whole groups stay together: quads is a multiple of group (cols % block == 0) and so is
  // blockDim.x, so a thread past the end belongs to a group wholly past it.
  const bool live = i < quads;
  const float4 v = live ? reinterpret_cast<const float4*>(x)[i] : make_float4(0.f, 0.f, 0.f, 0.f);
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
  for (int o = 1; o < group; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if (!live) return;
  const float scale = fp8_block_scale(amax);
  auto bf = [&](float f) { return std::uint32_t(f32_to_bf16(fp8_fake_quant_value(f, scale))); };
  reinterpret_cast<uint2*>(out)[i] =
      make_uint2(bf(v.x) | (bf(v.y) << 16), bf(v.z) | (bf(v.w) << 16));
}

__global__ void scales_to_f32_kernel(const std::uint8_t* e8m0, const float* f32, std::int64_t rows,
                                     std::int64_t cols, std::int64_t ld, float* out) {
  detail::grid_dependency_sync();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < rows * ld;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / ld, c = i % ld;
    out[i] = c >= cols ? 0.0f : e8m0 ? e8m0_to_f32(e8m0[r * cols + c]) : f32[r * cols + c];
  }
}

/// One thread per 4-byte word of the plain layout (i, in a matrix of rows of row_words):
/// where weight_matrix::interleaved keeps it, its bytes' bits moved as fp4il_from_plain says
/// (block_gemm_common.cuh); to_plain moves it back.
__global__ void fp4_interleave_kernel(const std::uint32_t* src, std::uint32_t* dst,
                                      std::int64_t words, std::int64_t row_words, bool to_plain) {
  detail::grid_dependency_sync();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < words;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t j = fp4_interleaved_word(i / row_words, i % row_words, row_words);
    if (to_plain)
      dst[i] = gemm_detail::fp4il_to_plain(src[j]);
    else
      dst[j] = gemm_detail::fp4il_from_plain(src[i]);
  }
}

unsigned grid_for(std::int64_t n) {
  const std::int64_t b = (n + 255) / 256;
  return unsigned(b < 1 ? 1 : (b > 132 * 64 ? 132 * 64 : b));
}

}  // namespace

void launch_fp4_interleave(const std::uint8_t* src, std::uint8_t* dst, std::int64_t rows,
                           std::int64_t row_bytes, bool to_plain, cudaStream_t stream) {
  DI_CHECK(row_bytes % il_run_bytes == 0 && rows >= 0 && rows % il_stripe_rows == 0,
           "fp4_interleave: {} rows of {} bytes (stripes of {} rows of a multiple of {} bytes)",
           rows, row_bytes, il_stripe_rows, il_run_bytes);
  DI_CHECK(src + rows * row_bytes <= dst || dst + rows * row_bytes <= src,
           "fp4_interleave: source and destination overlap");
  DI_CHECK(reinterpret_cast<std::uintptr_t>(src) % 4 == 0 &&
               reinterpret_cast<std::uintptr_t>(dst) % 4 == 0,
           "fp4_interleave: rows must be 4-byte aligned");
  const std::int64_t words = rows * row_bytes / 4;
  if (words == 0) return;
  detail::launch("fp4_interleave", fp4_interleave_kernel, grid_for(words), 256, 0, stream,
                 reinterpret_cast<const std::uint32_t*>(src), reinterpret_cast<std::uint32_t*>(dst),
                 words, row_bytes / 4, to_plain);
}

void launch_act_quant(const act_quant_params& p, cudaStream_t stream) {
  const std::int64_t items = p.rows * (p.cols / p.block);
  if (items == 0) return;
  detail::launch("act_quant", act_quant_kernel,
                 unsigned((items + warps_per_block - 1) / warps_per_block), warps_per_block * 32, 0,
                 stream, p);
}

void launch_dequantize(const dequantize_params& p, cudaStream_t stream) {
  if (p.rows * p.cols == 0) return;
  detail::launch("dequantize", dequantize_kernel, grid_for(p.rows * p.cols), 256, 0, stream, p);
}

void launch_scales_to_f32(const std::uint8_t* e8m0, const float* f32, std::int64_t rows,
                          std::int64_t cols, std::int64_t ld, float* out, cudaStream_t stream) {
  if (rows * ld == 0) return;
  detail::launch("scales_to_f32", scales_to_f32_kernel, grid_for(rows * ld), 256, 0, stream, e8m0,
                 f32, rows, cols, ld, out);
}

void launch_to_bf16(const float* x, std::uint16_t* out, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  detail::launch("to_bf16", to_bf16_kernel, grid_for(n), 256, 0, stream, x, out, n);
}

void launch_fake_quant_bf16(const float* x, std::uint16_t* out, std::int64_t rows,
                            std::int64_t cols, int block, cudaStream_t stream) {
  DI_CHECK((block == 32 || block == 64 || block == 128) && cols % block == 0,
           "fake_quant_bf16: rows of {} in blocks of {}", cols, block);
  if (rows * cols == 0) return;
  const std::int64_t quads = rows * (cols / 4), blocks = (quads + 255) / 256;  // no stride loop
  DI_CHECK(blocks < (std::int64_t(1) << 31), "fake_quant_bf16: {} rows of {}", rows, cols);
  detail::launch("fake_quant_bf16", fake_quant_bf16_kernel, unsigned(blocks), 256, 0, stream, x,
                 out, rows, cols, block);
}

void launch_split_bf16(const float* x, std::uint16_t* parts, int count, std::int64_t n,
                       cudaStream_t stream) {
  DI_CHECK(count == 2 || count == 3, "split_bf16: {} parts (2 or 3)", count);
  if (n == 0) return;
  detail::launch("split_bf16", split_bf16_kernel, grid_for(n), 256, 0, stream, x, parts, count, n);
}

void launch_sum_parts(const float* parts, float* y, int count, std::int64_t n,
                      cudaStream_t stream) {
  DI_CHECK(count >= 1 && count <= 3, "sum_parts: {} parts (1 to 3)", count);
  if (n == 0) return;
  detail::launch("sum_parts", sum_parts_kernel, grid_for(n), 256, 0, stream, parts, y, count, n);
}

}  // namespace di::cuda
