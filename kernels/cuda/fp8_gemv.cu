// fp8_gemv: y = x W^T for a few fp32 rows (decode) and an FP8 e4m3 weight with block scales,
// without quantizing the activations -- the block-diagonal projections the model keeps exact
// (grouped_linear: attention's wo_a). Each warp owns one weight row: its lanes read 16 codes
// each (512 contiguous bytes per warp and pass; the pass loop is unrolled 4x so that several
// loads are in flight), decode them exactly to
// fp32 (e4m3 -> f16 -> f32, times the power-of-two block scale) and multiply them with every
// activation row of the row's group on the CUDA cores; a butterfly adds the lanes. The weight
// is read in its stored bytes (a quarter of a decoded fp32 copy); the sums are fp32, in another
// order than the dequantize-then-SGEMM path they replace.
#include "kernels/cuda/fresh_loads.cuh"
#include "kernels/cuda/gemm_kernels.hpp"
#include "kernels/cuda/launch.cuh"

#include "kernels/cuda/block_gemm_common.cuh"

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/dtype.hpp"

#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace di::cuda {

namespace {

constexpr int warps = 8;
constexpr int lane_codes = 16;               // codes a lane loads per pass
constexpr int pass_codes = 32 * lane_codes;  // 512 inputs per warp and pass

template <int R>
__global__ void __launch_bounds__(warps * 32) fp8_gemv_kernel(fp8_gemv_params p) {
  detail::grid_dependency_sync();
  const int lane = int(threadIdx.x) % 32;
  const std::int64_t o = std::int64_t(blockIdx.x) * warps + int(threadIdx.x) / 32;  // weight row
  if (o >= p.groups * p.out) return;  // whole warps only: no barrier below
  const std::int64_t g = o / p.out;
  const std::uint8_t* w = p.w + o * p.in;
  const std::int64_t srow = (o / p.block_rows) * p.scale_cols;
  const int col_shift = 31 - __clz(p.block_cols);
  const std::int64_t ld = p.groups * p.in;  // x's row stride
  const float* x = p.x + g * p.in;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
#pragma unroll 4
  for (std::int64_t k0 = std::int64_t(lane) * lane_codes; k0 < p.in; k0 += pass_codes) {
    const uint4 codes = __ldg(reinterpret_cast<const uint4*>(w + k0));
    const std::int64_t sc = srow + (k0 >> col_shift);  // 16 codes sit in one scale block
    const float s = p.scale_e8m0 ? e8m0_to_f32(p.scale_e8m0[sc]) : p.scale_f32[sc];
    float v[lane_codes];
    const std::uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 lo = gemm_detail::e4m3x2_to_float2(words[i]),
                   hi = gemm_detail::e4m3x2_to_float2(words[i] >> 16);
      v[4 * i] = lo.x * s;
      v[4 * i + 1] = lo.y * s;
      v[4 * i + 2] = hi.x * s;
      v[4 * i + 3] = hi.y * s;
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r >= p.rows) break;
      const float4* xr = reinterpret_cast<const float4*>(x + r * ld + k0);
      float sum = acc[r];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float4 a = di::cuda::detail::load_fresh(xr + i);
        sum += v[4 * i] * a.x;
        sum += v[4 * i + 1] * a.y;
        sum += v[4 * i + 2] * a.z;
        sum += v[4 * i + 3] * a.w;
      }
      acc[r] = sum;
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float sum = acc[r];
#pragma unroll
    for (int d = 16; d > 0; d /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, d);
    if (lane == 0 && r < p.rows) p.y[r * p.groups * p.out + o] = sum;
  }
}

}  // namespace

bool fp8_gemv_fits(std::int64_t rows, std::int64_t in, int block_cols) {
  return rows >= 1 && rows <= fp8_gemv_max_rows && in % 16 == 0 && block_cols >= 16 &&
         (block_cols & (block_cols - 1)) == 0;
}

void launch_fp8_gemv(const fp8_gemv_params& p, cudaStream_t stream) {
  DI_CHECK(fp8_gemv_fits(p.rows, p.in, p.block_cols),
           "fp8_gemv: {} rows of {} inputs with {}-input scale blocks are not supported", p.rows,
           p.in, p.block_cols);
  const std::int64_t weight_rows = p.groups * p.out;
  if (weight_rows == 0) return;
  const unsigned grid = unsigned((weight_rows + warps - 1) / warps);
  detail::by_row_tiles<1>(p.rows, [&](auto r) {
    detail::launch("fp8_gemv", fp8_gemv_kernel<decltype(r)::value>, grid, warps * 32, 0, stream, p);
  });
}

}  // namespace di::cuda
