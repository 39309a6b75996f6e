// fp8_split_gemm: grouped_linear's decode kernel for 1..64 fp32 rows and an FP8 e4m3 weight
// with e8m0 block scales, on the bf16 tensor cores without losing the activations' precision:
// each activation x is split into hi = bf16(x) and lo = bf16(x - hi) (16 of fp32's 24
// significant bits; what is left is below 2^-17 |x|) and y = W hi + W lo, the weight decoded
// exactly (e4m3 times a power of two is a bf16 value) and the products exact in the MMA's
// fp32 accumulation (mma.sync m16n8k16 bf16). fp8_gemv (CUDA cores) read every activation row
// from L2 once per weight row -- 32 bytes of activations per weight byte at 8 rows, so it ran
// at the L2's pace, not the HBM's; here a warp's 16 weight rows share each activation load and
// the 4 row slices of a block share them again through L1.
//
// Each warp owns 16 weight rows and a range of K; a lane loads 16 contiguous codes of row g
// and of row g + 8 per 64 inputs (bytes 16t..16t+15), two such 64-input halves per batch, one
// batch loading while the previous one multiplies. The MMA's k slots are a permutation of
// those inputs -- in step s of a half, slots 2t, 2t+1 hold inputs 16t + 4s + {0, 1} and slots
// 2t+8, 2t+9 inputs 16t + 4s + {2, 3} -- and the activations (token g of each 8-token tile,
// the same 16 inputs: four float4 loads) take the same permutation, so that the sum is over
// the same products. Two warps of a block split K and add in warp order through shared
// memory; a second block along K (decided by the weight's shape only) runs in a cluster with
// the first and hands it its sums through distributed shared memory (a + b, as the fp32 atomic
// adds onto a zeroed output this replaced gave, without their memset). A row's result does
// not depend on the other rows or on the token tiles, so a token's output does not change
// with the batch.
#include "kernels/cuda/gemm_kernels.hpp"
#include "kernels/cuda/launch.cuh"

#include "kernels/cuda/block_gemm_common.cuh"
#include "kernels/dtype.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace di::cuda {

namespace {

constexpr int slices = 4;   // 16-row slices of a block
constexpr int wk = 2;       // warps of a slice along K
constexpr int warps = slices * wk;
constexpr int half_k = 64;  // inputs of one 16-byte load per row and lane
constexpr int batch_k = 2 * half_k;

__device__ __forceinline__ std::uint32_t bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

/// Two e4m3 codes (low byte first) times the power of two s as bf16x2 (exact).
__device__ __forceinline__ std::uint32_t decode2(std::uint32_t two, float s) {
  const float2 f = gemm_detail::e4m3x2_to_float2(two);
  return bf16x2(f.x * s, f.y * s);
}

/// x0, x1 -> (hi, lo) bf16x2 words with x = hi + lo + (below 2^-17 |x|).
__device__ __forceinline__ void split2(float x0, float x1, std::uint32_t& hi, std::uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
  const float2 back = __bfloat1622float2(h);
  hi = *reinterpret_cast<const std::uint32_t*>(&h);
  lo = bf16x2(x0 - back.x, x1 - back.y);
}

/// d += a b on the bf16 tensor cores: m16n8k16, fp32 accumulate.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const std::uint32_t (&a)[4],
                                         std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// One batch of a lane's weights: 16 codes of rows g (lo) and g + 8 (hi) in each 64-input
/// half, and their block scales.
struct weight_batch {
  uint4 lo[2], hi[2];
  float s_lo[2], s_hi[2];
};

template <int NT>
__global__ void __launch_bounds__(warps * 32, NT >= 8 ? 1 : 2)
    fp8_split_gemm_kernel(fp8_gemv_params p, int per_split) {
  detail::grid_dependency_sync();
  __shared__ float partial[slices][32][NT * 4];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const int slice = warp % slices, wk_i = warp / slices;
  const std::int64_t group = blockIdx.y;
  const std::int64_t n0 = std::int64_t(blockIdx.x) * slices * 16 + slice * 16;  // within group
  // This warp's K range: the split's, halved between the slice's two warps in whole batches.
  const std::int64_t split_begin = std::int64_t(blockIdx.z) * per_split;
  const std::int64_t split_end = min(p.in, split_begin + per_split);
  const std::int64_t half_range =
      ((split_end - split_begin + wk - 1) / wk + batch_k - 1) / batch_k * batch_k;
  const std::int64_t kb = split_begin + wk_i * half_range;
  const std::int64_t ke = min(split_end, kb + half_range);
  const bool active = n0 < p.out && kb < ke;

  const std::int64_t r_lo = group * p.out + min(n0 + g, p.out - 1);
  const std::int64_t r_hi = group * p.out + min(n0 + g + 8, p.out - 1);
  const std::uint8_t* w_lo = p.w + r_lo * p.in + 16 * t;
  const std::uint8_t* w_hi = p.w + r_hi * p.in + 16 * t;
  const std::uint8_t* sc_lo = p.scale_e8m0 + (r_lo / p.block_rows) * p.scale_cols;
  const std::uint8_t* sc_hi = p.scale_e8m0 + (r_hi / p.block_rows) * p.scale_cols;
  const int col_shift = 31 - __clz(p.block_cols);
  const std::int64_t ld = p.groups * p.in;  // x's row stride
  const float* xrow[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j)
    xrow[j] = p.x + min(std::int64_t(8 * j + g), p.rows - 1) * ld + group * p.in + 16 * t;

  auto load = [&](weight_batch& b, std::int64_t k0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::int64_t k = k0 + h * half_k + 16 * t;
      if (k < ke) {
        b.lo[h] = gemm_detail::load_stream16(w_lo + k0 + h * half_k);
        b.hi[h] = gemm_detail::load_stream16(w_hi + k0 + h * half_k);
        b.s_lo[h] = e8m0_to_f32(sc_lo[k >> col_shift]);
        b.s_hi[h] = e8m0_to_f32(sc_hi[k >> col_shift]);
      } else {  // past the range: zero weights (and zero activations below)
        b.lo[h] = b.hi[h] = make_uint4(0, 0, 0, 0);
        b.s_lo[h] = b.s_hi[h] = 0.0f;
      }
    }
  };

  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[j][c] = 0.0f;

  auto multiply = [&](const weight_batch& b, std::int64_t k0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::int64_t k = k0 + h * half_k;
      const bool valid = k + 16 * t < ke;
      const std::uint32_t wl[4] = {b.lo[h].x, b.lo[h].y, b.lo[h].z, b.lo[h].w};
      const std::uint32_t wh[4] = {b.hi[h].x, b.hi[h].y, b.hi[h].z, b.hi[h].w};
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const std::uint32_t a[4] = {decode2(wl[s], b.s_lo[h]), decode2(wh[s], b.s_hi[h]),
                                    decode2(wl[s] >> 16, b.s_lo[h]),
                                    decode2(wh[s] >> 16, b.s_hi[h])};
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          if (valid) v = __ldg(reinterpret_cast<const float4*>(xrow[j] + k) + s);
          std::uint32_t hi0, lo0, hi1, lo1;
          split2(v.x, v.y, hi0, lo0);
          split2(v.z, v.w, hi1, lo1);
          mma_bf16(acc[j], a, hi0, hi1);
          mma_bf16(acc[j], a, lo0, lo1);
        }
      }
    }
  };

  if (active) {
    weight_batch r[2];
    load(r[0], kb);
    std::int64_t k0 = kb;
    while (k0 < ke) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {  // unrolled: r[] indices known at compile time
        if (k0 >= ke) break;
        if (k0 + batch_k < ke) load(r[(i + 1) % 2], k0 + batch_k);
        multiply(r[i], k0);
        k0 += batch_k;
      }
    }
  }

  // The slice's second warp hands its sums to the first, which adds them in that order.
  if (wk_i == 1) {
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) partial[slice][lane][j * 4 + c] = acc[j][c];
  }
  __syncthreads();
  const bool sums = wk_i == 0;  // (no early return: K splits meet the cluster barriers below)
  if (sums) {
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[j][c] += partial[slice][lane][j * 4 + c];
  }
  // Two K splits run as one cluster: split 1 hands its sums to split 0 through distributed
  // shared memory (a + b: the bits of the atomic adds onto a zeroed y this replaced).
  if (gridDim.z > 1)
    gemm_detail::add_split_pair(acc, &partial[slice][lane][0], int(blockIdx.z), sums);
  if (!sums || blockIdx.z != 0 || n0 >= p.out) return;
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const std::int64_t r = n0 + g + (c < 2 ? 0 : 8);
      const std::int64_t tk = 8 * j + 2 * t + (c & 1);
      if (r >= p.out || tk >= p.rows) continue;
      p.y[tk * p.groups * p.out + group * p.out + r] = acc[j][c];
    }
}

/// Blocks along K: two when the row blocks alone leave the GPU short of streaming warps
/// (the weight's shape only, never the rows).
int k_splits_for(const fp8_gemv_params& p) {
  const std::int64_t blocks = p.groups * ((p.out + slices * 16 - 1) / (slices * 16));
  return blocks < 2 * 132 && p.in >= 8 * batch_k ? 2 : 1;
}

}  // namespace

bool fp8_split_gemm_fits(std::int64_t rows, std::int64_t in, int block_cols, bool e8m0) {
  return e8m0 && rows >= 1 && rows <= fp8_split_gemm_max_rows && in % 16 == 0 &&
         block_cols >= 16 && (block_cols & (block_cols - 1)) == 0;
}

void launch_fp8_split_gemm(const fp8_gemv_params& p, cudaStream_t stream) {
  DI_CHECK(fp8_split_gemm_fits(p.rows, p.in, p.block_cols, p.scale_e8m0 != nullptr),
           "fp8_split_gemm: {} rows of {} inputs with {}-input scale blocks ({} scales) are not "
           "supported",
           p.rows, p.in, p.block_cols, p.scale_e8m0 ? "e8m0" : "f32");
  if (p.groups * p.out == 0) return;
  const int splits = k_splits_for(p);
  const std::int64_t per_split = (p.in + splits - 1) / splits;
  const dim3 grid(unsigned((p.out + slices * 16 - 1) / (slices * 16)), unsigned(p.groups),
                  unsigned(splits));
  const int per = int((per_split + batch_k - 1) / batch_k * batch_k);
  detail::by_row_tiles<8>(p.rows, [&](auto nt) {  // 8-row tiles
    detail::launch_in("fp8_split_gemm", fp8_split_gemm_kernel<decltype(nt)::value>, grid,
                      warps * 32, dim3(1, 1, unsigned(splits)), 0, stream, p, per);
  });
}

}  // namespace di::cuda
