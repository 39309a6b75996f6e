// A plain read of a buffer at the best rate this GPU gives one kernel (bench_kernels_cuda's
// calibration of the weight-streaming rows): what a decode GEMM that only had to read its
// weight bytes once could reach at that size, launch ramp and tail included. C++17.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace di::bench {

/// Reads [p, p + bytes) (16-byte aligned, bytes a multiple of 16) with `blocks` blocks of 256
/// threads, 8 independent 16-byte loads per thread in flight, and folds the words into
/// sink[0] only when they match a pattern no random buffer has (so the loads stay).
void launch_read_stream(const void* p, std::size_t bytes, int blocks, unsigned* sink,
                        cudaStream_t stream);

/// The same read with `loads` (1, 2, 4 or 8) independent 16-byte loads per thread in flight:
/// launch_read_stream is loads = 8. For the sweep of bytes in flight per SM (run_read_depth).
void launch_read_stream_depth(const void* p, std::size_t bytes, int blocks, int loads,
                              unsigned* sink, cudaStream_t stream);

}  // namespace di::bench
