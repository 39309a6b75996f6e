// Packed cache rows on the GPU (the CUDA twin of kernels/cpu/cache_codec.cpp): encode picks
// each block's scale and codes with the same scalar functions as the CPU codec, so the bytes
// are identical; decode multiplies code by scale exactly as decode_row does. Rows can be
// written to / read from arbitrary pool rows (a ring slot, a paged stream row).
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/model_common.cuh"
#include "kernels/quant_math.hpp"

namespace di::cuda {

namespace {

using detail::dev_format;

constexpr int kEncodeThreads = 256;

/// One block per row, one warp per quantization block (lanes over its values: the block's
/// amax is a max, exact in any order, so the bytes are those of the CPU codec), then every
/// thread over the raw values. (One thread per quantization block, the first version, left a
/// decode step's KV row to 7 threads walking 64 values twice: 7 us per call under ncu.)
__global__ void encode_kernel(const float* x, std::uint8_t* out, const std::int64_t* dst_rows,
                              std::int64_t rows, std::int64_t pool_rows, dev_format f) {
  detail::grid_dependency_sync();
  const std::int64_t r = blockIdx.x;
  if (r >= rows) return;
  if (dst_rows && pool_rows >= 0 && (dst_rows[r] < 0 || dst_rows[r] >= pool_rows)) return;
  const int dim = f.quant_dims + f.raw_dims;
  const float* xr = x + r * dim;
  std::uint8_t* o = out + std::size_t(dst_rows ? dst_rows[r] : r) * std::size_t(f.row_bytes);
  const int blocks = f.quant_dims / f.block;
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  for (int b = warp; b < blocks; b += int(blockDim.x) / 32) {  // uniform over the warp
    const float* xb = xr + b * f.block;
    float amax = 0.0f;
    for (int i = lane; i < f.block; i += 32) amax = fmaxf(amax, fabsf(xb[i]));
    amax = detail::warp_max(amax);
    float s;
    std::uint8_t code;
    if (f.quant == int(cache_quant::fp8_ue8m0)) {
      s = fp8_block_scale(amax);
      code = std::uint8_t(f32_to_bits(s) >> 23);
    } else if (f.quant == int(cache_quant::fp4_ue8m0)) {
      s = fp4_ue8m0_block_scale(amax);
      code = std::uint8_t(f32_to_bits(s) >> 23);
    } else {
      code = f32_to_e4m3((amax > fp4_e4m3_amax_floor ? amax : fp4_e4m3_amax_floor) / fp4_e2m1_max);
      s = e4m3_to_f32(code);
    }
    if (lane == 0) o[f.code_bytes + b] = code;
    if (!f.fp4) {
      for (int i = lane; i < f.block; i += 32) {
        const float q = fminf(fmaxf(xb[i] / s, -fp8_e4m3_max), fp8_e4m3_max);
        o[b * f.block + i] = f32_to_e4m3(q);
      }
    } else {
      for (int i = 2 * lane; i < f.block; i += 64) {
        const float q0 = fminf(fmaxf(xb[i] / s, -fp4_e2m1_max), fp4_e2m1_max);
        const float q1 = fminf(fmaxf(xb[i + 1] / s, -fp4_e2m1_max), fp4_e2m1_max);
        o[(b * f.block + i) / 2] = std::uint8_t(f32_to_e2m1(q0) | (f32_to_e2m1(q1) << 4));
      }
    }
  }
  std::uint8_t* raw = o + f.code_bytes + f.scale_bytes;
  for (int i = int(threadIdx.x); i < f.raw_dims * 4; i += int(blockDim.x))
    raw[i] = reinterpret_cast<const std::uint8_t*>(xr + f.quant_dims)[i];
  for (int i = f.payload_bytes + int(threadIdx.x); i < f.row_bytes; i += int(blockDim.x))
    o[i] = 0;  // the pad: the CPU codec's bytes
}

__global__ void decode_kernel(const std::uint8_t* rows, const std::int64_t* src_rows, float* out,
                              std::int64_t n, dev_format f) {
  detail::grid_dependency_sync();
  const std::int64_t r = blockIdx.x;
  if (r >= n) return;
  const int dim = f.quant_dims + f.raw_dims;
  const std::uint8_t* row = rows + std::size_t(src_rows ? src_rows[r] : r) * std::size_t(f.row_bytes);
  for (int d = int(threadIdx.x); d < dim; d += int(blockDim.x))
    out[r * dim + d] = detail::row_value(row, f, d);
}

__global__ void entry_rows_kernel(const entry_rows_params p) {
  detail::grid_dependency_sync();
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.batch * p.entries) return;
  const std::int64_t b = i / p.entries, e = i % p.entries;
  std::int32_t row = -1;
  if (e < p.counts[b]) {
    const std::int64_t blk = e / p.per_block;
    row = blk < p.max_blocks ? p.tables[b * p.max_blocks + blk] * p.per_block +
                                   std::int32_t(e % p.per_block)
                             : -1;
  }
  p.out[i] = row;
}

__global__ void map_rows_kernel(const map_rows_params p) {
  detail::grid_dependency_sync();
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.batch * p.k) return;
  const std::int64_t b = i / p.k;
  const std::int32_t j = p.idx[i];
  p.out[i] = j < 0 || j >= p.n ? -1 : p.map[b * p.n + j];
}

}  // namespace

void launch_encode_cache_rows(const encode_rows_params& p, cudaStream_t stream) {
  detail::check_row_format(p.format, "encode_cache_rows");
  DI_CHECK(p.rows >= 0, "encode_cache_rows: {} rows", p.rows);
  if (p.rows == 0) return;
  DI_CHECK(p.x && p.out, "encode_cache_rows: input and output are required");
  detail::launch("encode", encode_kernel, unsigned(p.rows), kEncodeThreads, 0, stream, p.x, p.out,
                 p.dst_rows, p.rows, p.pool_rows, detail::make_dev_format(p.format));
}

void launch_decode_cache_rows(const decode_rows_params& p, cudaStream_t stream) {
  detail::check_row_format(p.format, "decode_cache_rows");
  DI_CHECK(p.n >= 0, "decode_cache_rows: {} rows", p.n);
  if (p.n == 0) return;
  DI_CHECK(p.rows && p.out, "decode_cache_rows: input and output are required");
  detail::launch("decode", decode_kernel, unsigned(p.n), 128, 0, stream, p.rows, p.src_rows, p.out,
                 p.n, detail::make_dev_format(p.format));
}

void launch_entry_rows(const entry_rows_params& p, cudaStream_t stream) {
  DI_CHECK(p.batch >= 0 && p.entries >= 0 && p.max_blocks >= 0 && p.per_block > 0,
           "entry_rows: {} x {} entries, {} blocks of {}", p.batch, p.entries, p.max_blocks,
           p.per_block);
  if (p.batch * p.entries == 0) return;
  DI_CHECK(p.counts && p.out && (p.max_blocks == 0 || p.tables), "entry_rows: missing operand");
  detail::launch("entry_rows", entry_rows_kernel, detail::grid_for(p.batch * p.entries, 256), 256,
                 0, stream, p);
}

void launch_map_rows(const map_rows_params& p, cudaStream_t stream) {
  DI_CHECK(p.batch >= 0 && p.k >= 0 && p.n >= 0, "map_rows: {} x {} indices over {}", p.batch, p.k,
           p.n);
  if (p.batch * p.k == 0) return;
  DI_CHECK(p.idx && p.out && (p.n == 0 || p.map), "map_rows: missing operand");
  detail::launch("map_rows", map_rows_kernel, detail::grid_for(p.batch * p.k, 256), 256, 0, stream,
                 p);
}

}  // namespace di::cuda
