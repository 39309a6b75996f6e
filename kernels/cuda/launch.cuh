// Kernel launches with programmatic dependent launch (PDL, sm_90): every kernel of the backend
// is launched by detail::launch and opens with detail::grid_dependency_sync(). A launch so marked
// may have its blocks scheduled while the kernel before it in the stream is still running (that
// kernel lets them in from its own first instruction); they then wait, at their first
// instruction, until it has finished and its writes are visible. A decode step is ~240 short
// launches at batch 1: the scheduling and prologue of each overlaps the tail of the one before
// instead of following it. Ordering is unchanged -- no kernel reads or writes anything before
// its predecessor has completed, and since every kernel waits, completion stays transitive down
// the stream -- so results are the same bits with PDL on or off (set_programmatic_launch).
// Works inside CUDA graph capture (programmatic edges). C++17 (included by .cu files).
#pragma once

#include "common/error.hpp"
#include "kernels/cuda/stream.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace di::cuda::detail {

/// The first statement of every kernel launched by launch(), executed by every thread before
/// anything else (also before an early return): waits for the previous kernel in the stream to
/// complete (a no-op when launched without PDL), then allows the next one to be scheduled.
__device__ __forceinline__ void grid_dependency_sync() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/// `kernel<<<grid, block, smem, stream>>>(args...)` with the PDL attribute when
/// programmatic_launch() is on; a failed launch (a bad configuration, or an earlier
/// asynchronous fault it reports) is a di::error naming `name` -- no separate check after it.
/// The kernel must begin with grid_dependency_sync().
/// With `cluster` other than (1, 1, 1) the blocks are launched in thread-block clusters of
/// those dimensions (launch_clustered).
template <typename... Params, typename... Args>
void launch_in(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, dim3 cluster,
               std::size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute[2] = {};
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = programmatic_launch() ? 1 : 0;
  attribute[1].id = cudaLaunchAttributeClusterDimension;
  attribute[1].val.clusterDim.x = cluster.x;
  attribute[1].val.clusterDim.y = cluster.y;
  attribute[1].val.clusterDim.z = cluster.z;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = cluster.x * cluster.y * cluster.z > 1 ? 2 : 1;
  const cudaError_t status = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (status != cudaSuccess) [[unlikely]]
    DI_FAIL("CUDA error {} ({}) launching {}", cudaGetErrorName(status), cudaGetErrorString(status),
            name);
}

template <typename... Params, typename... Args>
void launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem,
            cudaStream_t stream, Args&&... args) {
  launch_in(name, kernel, grid, block, dim3(1, 1, 1), smem, stream, std::forward<Args>(args)...);
}

/// Calls f(std::integral_constant<int, N>{}) for the smallest N of 1, 2, 4 and 8 with rows <=
/// N * Unit (8 past that): a kernel template instantiated per tile of rows.
template <int Unit, typename F>
void by_row_tiles(std::int64_t rows, F&& f) {
  if (rows <= Unit)
    f(std::integral_constant<int, 1>{});
  else if (rows <= 2 * Unit)
    f(std::integral_constant<int, 2>{});
  else if (rows <= 4 * Unit)
    f(std::integral_constant<int, 4>{});
  else
    f(std::integral_constant<int, 8>{});
}

}  // namespace di::cuda::detail
