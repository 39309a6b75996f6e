// Asynchronous copies into shared memory on sm_90: mbarriers, the bulk-copy engine and the
// tensor memory accelerator (TMA) with 2D tensor maps. Device helpers for the GEMM kernels
// (pipe_gemm, stream_gemm's TMA path) and the host-side tensor-map encoder. C++17 (nvcc).
#pragma once

#include "common/error.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace di::cuda::gemm_detail {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return unsigned(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(std::uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(std::uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
/// Waits until the barrier's phase of this parity has completed.
__device__ __forceinline__ void mbar_wait(std::uint64_t* bar, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
/// `bytes` (a multiple of 16, both addresses 16-byte aligned) global -> shared by the bulk-copy
/// engine; the barrier's transaction count drops by `bytes` when they have landed.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes,
                                          std::uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

/// The barrier counts one arrival of this thread once its earlier cp.async copies (e.g.
/// cp_async4_zfill: no registers per byte) have landed
/// (noinc: the barrier's expected count includes it).
__device__ __forceinline__ void cp_async_arrive(std::uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar))
               : "memory");
}

/// Orders this thread's earlier generic-proxy accesses to shared memory before its later
/// async-proxy ones (a TMA load into a buffer the warp has just read).
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/// Makes mbarrier initialisations visible to the async proxy (before the first TMA on them).
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/// One TMA load of the box at (x, y) -- x the innermost coordinate -- of the 2D tensor map
/// `map` (a __grid_constant__ kernel parameter) into `dst`; the barrier's transaction count
/// drops by the box's bytes when they have landed (elements past the map's edges read as zeros).
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int x, int y,
                                            std::uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], "
      "[%1, {%2, %3}], [%4];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(x), "r"(y), "r"(smem_addr(bar))
      : "memory");
}

/// A 2D tensor map over `rows` rows of `row_bytes` bytes (consecutive rows `row_bytes` apart,
/// a multiple of 16; `base` 16-byte aligned), boxes of `box_bytes` x `box_rows` landing in
/// shared memory with the 128-byte swizzle (16-byte chunk c of box row r at r * 128 +
/// (c ^ r % 8) * 16; box_bytes == 128), L2 promotion of 256 bytes, zeros past the edges.
inline CUtensorMap byte_tensor_map_2d(const void* base, std::int64_t row_bytes, std::int64_t rows,
                                      unsigned box_bytes, unsigned box_rows) {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t st = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                            cudaEnableDefault, &found);
    DI_CHECK(st == cudaSuccess && fn != nullptr && found == cudaDriverEntryPointSuccess,
             "the CUDA driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  CUtensorMap map{};
  const cuuint64_t dims[2] = {cuuint64_t(row_bytes), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(row_bytes)};
  const cuuint32_t box[2] = {box_bytes, box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r =
      encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box,
             element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  DI_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed ({}) for {} rows of {} bytes", int(r),
           rows, row_bytes);
  return map;
}

}  // namespace di::cuda::gemm_detail
