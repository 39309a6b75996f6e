// f32_gemv: y = x W^T for 1..8 fp32 rows (decode) and an fp32 or bf16 weight -- the projections
// the model keeps in fp32 (the MoE router, the compressors' and the indexer's small linears),
// which went to cuBLAS's SGEMV / dot kernels at 4-8 us per call on the H200 (ncu, batch 1), and
// the checkpoint's bf16 matrices (the output head: 1.32 GB in V4.1, 1.06 in V4) at one row,
// which went to cuBLAS's bf16 GEMM with the activations rounded to bf16 (gemm.cpp). Where the
// checkpoint stores the weight in bf16 (the matrix itself, or weight_matrix::bf16_values beside
// the fp32 copy) the kernel reads those bytes and widens them in registers: the same values and
// sums as the fp32 copy, and the CPU's products (fp32 activations times the bf16 values). Each
// output row is owned by `wk` warps of a block, which split K into contiguous ranges; a warp's
// lanes read 16 bytes of the row each (8 of a bf16 row; the loop unrolled so that several loads
// are in flight) and multiply them with every activation row by explicit fmaf in input order; a
// butterfly adds the lanes, and the row's warps add in warp order through shared memory. The
// split depends on the weight's shape only and a token's sums never on the other tokens, so a
// row's result is the same bits in any batch of 1..8 rows. The V4.1 head (session 49, graph
// replays, us at 1 / 2 / 4 / 8 rows, against cuBLAS's bf16 GEMM): H100 418 / 442 / 533 / 814
// against 456 / 457 / 449 / 451, H200 294 / 359 / 502 / 817 against 299 / 301 / 303 / 307 -- at
// one row the rate of a kernel that only reads the bytes; with more rows the fp32 activations,
// re-read from L1 per 8 weight bytes, bind it. A variant reading 16 weight bytes per lane a step
// was no faster at 1-2 rows on the H100 (422 / 436) and slower beyond (695 / 1350): not kept.
#include "kernels/cuda/fresh_loads.cuh"
#include "kernels/cuda/gemm_kernels.hpp"
#include "kernels/cuda/launch.cuh"

#include "kernels/cuda/cuda_check.hpp"

#include <cstdint>
#include <type_traits>

namespace di::cuda {

namespace {

constexpr int warps = 8;

__device__ __forceinline__ float4 load_weight4(const float* p) {
  float4 v;
  asm("ld.global.nc.L1::no_allocate.v4.f32 {%0, %1, %2, %3}, [%4];\n"
      : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
      : "l"(p));
  return v;
}

/// 4 bf16 weights (8 bytes) widened to fp32: the same values as the fp32 copy holds.
__device__ __forceinline__ float4 load_weight4(const std::uint16_t* p) {
  uint2 v;
  asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u),
                     __uint_as_float(v.y << 16), __uint_as_float(v.y & 0xffff0000u));
}

__device__ __forceinline__ float load_weight1(const float* p) {
  return __ldg(p);
}

__device__ __forceinline__ float load_weight1(const std::uint16_t* p) {
  return __uint_as_float(std::uint32_t(__ldg(p)) << 16);
}

__device__ __forceinline__ float lane_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// W: float (the fp32 weight) or std::uint16_t (its bf16 bytes, p.w_bf16): the same values,
/// the same products in the same order -- the same bits -- from half the bytes.
template <int R, typename W>
__global__ void __launch_bounds__(warps * 32) f32_gemv_kernel(f32_gemv_params p, int wk) {
  detail::grid_dependency_sync();
  __shared__ float part[warps][R];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const std::int64_t o = std::int64_t(blockIdx.x) * (warps / wk) + warp / wk;  // output row
  const int kq = warp % wk;
  const int rows = int(p.rows);
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  if (o < p.out) {
    const W* w = (std::is_same_v<W, float> ? reinterpret_cast<const W*>(p.w)
                                           : reinterpret_cast<const W*>(p.w_bf16)) +
                 o * p.in;
    if (p.vec) {  // 16-byte rows: float4 steps
      const std::int64_t n4 = p.in / 4, per = (n4 + wk - 1) / wk;
      const std::int64_t begin = kq * per, end = min(n4, begin + per);
#pragma unroll 4
      for (std::int64_t i = begin + lane; i < end; i += 32) {
        const float4 wv = load_weight4(w + 4 * i);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (r >= rows) break;
          const float4 xv =
              di::cuda::detail::load_fresh(reinterpret_cast<const float4*>(p.x + r * p.in) + i);
          acc[r] = fmaf(wv.x, xv.x, acc[r]);
          acc[r] = fmaf(wv.y, xv.y, acc[r]);
          acc[r] = fmaf(wv.z, xv.z, acc[r]);
          acc[r] = fmaf(wv.w, xv.w, acc[r]);
        }
      }
    } else {
      const std::int64_t per = (p.in + wk - 1) / wk;
      const std::int64_t begin = kq * per, end = min(p.in, begin + per);
      for (std::int64_t i = begin + lane; i < end; i += 32) {
        const float wv = load_weight1(w + i);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (r >= rows) break;
          acc[r] = fmaf(wv, di::cuda::detail::load_fresh(p.x + r * p.in + i), acc[r]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = lane_sum(acc[r]);
  if (wk > 1) {  // the row's warps in warp order
    if (lane == 0)
#pragma unroll
      for (int r = 0; r < R; ++r) part[warp][r] = acc[r];
    __syncthreads();
    if (kq != 0) return;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float s = 0.0f;
      for (int q = 0; q < wk; ++q) s += part[warp + q][r];
      acc[r] = s;
    }
  }
  if (lane != 0 || o >= p.out) return;
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (r < rows) p.y[r * p.out + o] = acc[r];
}

/// Warps per output row along K: about 16 warps per SM over the GPU, each at least 64 inputs
/// (a function of the shape only: the fp32 and bf16 reads split alike).
int warps_along_k(const f32_gemv_params& p) {
  int wk = 1;
  while (wk < warps && p.out * wk < 132 * 16 && p.in / (2 * wk) >= 64) wk *= 2;
  return wk;
}

}  // namespace

bool f32_gemv_fits(std::int64_t rows, std::int64_t in, std::int64_t out) {
  return rows >= 1 && rows <= f32_gemv_max_rows && in >= 1 && out >= 1 &&
         out <= std::int64_t(65535) * warps;
}

void launch_f32_gemv(const f32_gemv_params& p, cudaStream_t stream) {
  DI_CHECK(f32_gemv_fits(p.rows, p.in, p.out), "f32_gemv: {} rows of {} inputs, {} outputs", p.rows,
           p.in, p.out);
  const int wk = warps_along_k(p);
  const unsigned grid = unsigned((p.out + warps / wk - 1) / (warps / wk));
  DI_CHECK(p.w != nullptr || p.w_bf16 != nullptr, "f32_gemv: no weight");
  detail::by_row_tiles<1>(p.rows, [&](auto r) {
    if (p.w_bf16 != nullptr)
      detail::launch("f32_gemv", f32_gemv_kernel<decltype(r)::value, std::uint16_t>, grid,
                     warps * 32, 0, stream, p, wk);
    else
      detail::launch("f32_gemv", f32_gemv_kernel<decltype(r)::value, float>, grid, warps * 32, 0,
                     stream, p, wk);
  });
}

}  // namespace di::cuda
