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

}  // namespace di::bench
