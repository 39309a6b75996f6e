// launch_read_stream and launch_read_stream_depth: see read_stream.hpp.
#include "bench/kernels/read_stream.hpp"

#include "common/error.hpp"
#include "kernels/cuda/cuda_check.hpp"

#include <cstdint>

namespace di::bench {

namespace {

constexpr int threads = 256;

__device__ __forceinline__ uint4 load_once(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

template <int unroll>
__global__ void __launch_bounds__(threads)
    read_stream_kernel(const uint4* p, std::size_t n, unsigned* sink) {
  const std::size_t stride = std::size_t(gridDim.x) * threads;
  std::size_t i = std::size_t(blockIdx.x) * threads + threadIdx.x;
  unsigned acc = 0;
  for (; i + (unroll - 1) * stride < n; i += unroll * stride) {
    uint4 v[unroll];
#pragma unroll
    for (int u = 0; u < unroll; ++u) v[u] = load_once(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < unroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = load_once(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

/// read_pattern's kernel: see launch_read_pattern.
template <read_layout L>
__global__ void __launch_bounds__(threads)
    read_pattern_kernel(const std::uint8_t* p, int n, int k, int wk, unsigned* sink) {
  extern __shared__ std::uint8_t cap_smem[];  // only caps the blocks per SM
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const int wk_i = warp % wk, wr_i = warp / wk;
  const std::int64_t n0 = (std::int64_t(blockIdx.x) * (8 / wk) + wr_i) * 16;
  const int runs = k / 128 / wk;  // 4-step runs per warp
  const int r0 = wk_i * runs;
  // Pointers at the warp's first run; run r adds r * stride.
  const std::uint8_t* base[4];
  std::int64_t stride = 128;
  if (L == read_layout::tiles) {
    stride = 2048;
    for (int j = 0; j < 4; ++j)
      base[j] = p + n0 * k + std::int64_t(r0) * 2048 + j * 512 + lane * 16;
  } else {
    for (int j = 0; j < 4; ++j) {
      const int h = j & 1;  // rows g and g + 8
      const std::int64_t row = n0 + g + 8 * h;
      base[j] = p + row * k + std::int64_t(r0) * 128 +
                (L == read_layout::rows16 ? (j >> 1) * 64 + 16 * t : (j >> 1) * 64 + 8 * t);
    }
  }
  auto load = [&](int r, uint4(&v)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const std::uint8_t* a = base[j] + r * stride;
      if (L == read_layout::rows8) {  // two 8-byte loads: steps 2 (j >> 1) and 2 (j >> 1) + 1
        uint2 x, y;
        asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];\n"
                     : "=r"(x.x), "=r"(x.y)
                     : "l"(a));
        asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];\n"
                     : "=r"(y.x), "=r"(y.y)
                     : "l"(a + 32));
        v[j] = make_uint4(x.x, x.y, y.x, y.y);
      } else {
        asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(v[j].x), "=r"(v[j].y), "=r"(v[j].z), "=r"(v[j].w)
                     : "l"(a));
      }
    }
  };
  unsigned acc = 0;
  if (n0 < n) {
    uint4 cur[4], next[4];
    load(0, cur);
    for (int r = 1; r <= runs; ++r) {
      if (r < runs) load(r, next);
#pragma unroll
      for (int j = 0; j < 4; ++j) acc ^= cur[j].x ^ cur[j].y ^ cur[j].z ^ cur[j].w;
#pragma unroll
      for (int j = 0; j < 4; ++j) cur[j] = next[j];
    }
  }
  if (acc == 0x9e3779b9u) sink[0] = acc + cap_smem[0];
}

}  // namespace

void launch_read_stream(const void* p, std::size_t bytes, int blocks, unsigned* sink,
                        cudaStream_t stream) {
  launch_read_stream_depth(p, bytes, blocks, 8, sink, stream);
}

void launch_read_stream_depth(const void* p, std::size_t bytes, int blocks, int loads,
                              unsigned* sink, cudaStream_t stream) {
  DI_CHECK(loads == 1 || loads == 2 || loads == 4 || loads == 8,
           "read_stream: {} loads per thread (1, 2, 4 or 8)", loads);
  auto kernel = loads == 1   ? read_stream_kernel<1>
                : loads == 2 ? read_stream_kernel<2>
                : loads == 4 ? read_stream_kernel<4>
                             : read_stream_kernel<8>;
  kernel<<<unsigned(blocks), threads, 0, stream>>>(static_cast<const uint4*>(p), bytes / 16, sink);
  CUDA_CHECK(cudaGetLastError());
}

void launch_read_pattern(const void* p, int n, int k, read_layout layout, int wk, int per_sm,
                         unsigned* sink, cudaStream_t stream) {
  DI_CHECK((wk == 1 || wk == 2 || wk == 4 || wk == 8) && n % (128 / wk) == 0 &&
               k % (128 * wk) == 0 && per_sm >= 0,
           "read_pattern: n {} k {} with {} warps along K", n, k, wk);
  auto kernel = layout == read_layout::rows8    ? read_pattern_kernel<read_layout::rows8>
                : layout == read_layout::rows16 ? read_pattern_kernel<read_layout::rows16>
                                                : read_pattern_kernel<read_layout::tiles>;
  // Shared memory that lets at most per_sm blocks share an SM's 228 KB (1 KB each reserved).
  const int smem = per_sm > 0 ? (228 * 1024 / (per_sm + 1) + 1024) / 16 * 16 : 0;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<unsigned(n / (16 * (8 / wk))), threads, std::size_t(smem), stream>>>(
      static_cast<const std::uint8_t*>(p), n, k, wk, sink);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace di::bench
