// Loads of data that an earlier kernel of the stream wrote: activations, their scales, top-k
// and window indices, split partials, gathered rows. C++17 (included by .cu files).
//
// Why not __ldg. Every kernel is launched with programmatic dependent launch (launch.cuh): its
// blocks may start while the kernel before it is still running, and wait for it at
// griddepcontrol.wait. __ldg is ld.global.nc, whose data PTX requires to be read-only for the
// whole lifetime of the kernel -- which, under PDL, overlaps the writer's. Such loads sit
// outside the memory model, so nothing guarantees that they follow the wait: in session 44
// tile_gemv read stale activations through __ldg (GPU tests failed with PDL on, passed with it off)
// although its PTX put every such load after the wait. load_fresh is an ordinary (weak)
// ld.global, which griddepcontrol.wait makes see the writer's stores, in asm volatile so that
// the compiler keeps it after the wait's asm too. (A plain C++ load is as correct, but it
// changed ptxas's register allocation of stream_gemm, f32_gemv and wg_bf16 -- new or larger
// spills -- while the asm gives the same spill report as the __ldg build, kernel for kernel.)
// Weights, their scales and other data written only before the first launch keep the
// non-coherent path.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace di::cuda::detail {

/// Through L1 (the default caching): for data several warps of a block read again.
__device__ __forceinline__ float load_fresh(const float* p) {
  float v;
  asm volatile("ld.global.f32 %0, [%1];\n" : "=f"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ float4 load_fresh(const float4* p) {
  float4 v;
  asm volatile("ld.global.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ std::int32_t load_fresh(const std::int32_t* p) {
  std::int32_t v;
  asm volatile("ld.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 load_fresh(const uint2* p) {
  uint2 v;
  asm volatile("ld.global.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 load_fresh(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

/// At L2 only (ld.global.cg): for data each warp reads once.
__device__ __forceinline__ uint2 load_fresh_l2(const uint2* p) {
  uint2 v;
  asm volatile("ld.global.cg.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
__device__ __forceinline__ float4 load_fresh_l2(const float4* p) {
  float4 v;
  asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p));
  return v;
}

}  // namespace di::cuda::detail
