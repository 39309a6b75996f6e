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

/// How read_pattern's warps lay their loads over an [n, k] byte matrix.
enum class read_layout {
  rows8,   ///< row-major; lane (g, t) reads bytes 8t..8t+7 of each 32-byte step of rows g and
           ///< g + 8 (stream_gemm's FP8 fragments: a warp instruction touches 8 rows x 32 bytes)
  rows16,  ///< row-major; lane (g, t) reads 16 bytes at 16t and 64 + 16t of each 128-byte run
           ///< of rows g and g + 8 (the same bytes per warp, half the instructions)
  tiles,   ///< each 16-row tile's runs of 4 steps stored as contiguous 2 KB pieces: a warp
           ///< instruction reads 512 contiguous bytes (an interleaved FP8 layout)
};

/// Reads an [n, k] byte matrix (n a multiple of 128 / wk, k of 128 * wk) as stream_gemm's FP8
/// warps do on a weight of that shape: blocks of 8 warps, each warp 16 rows and 1 / wk of K
/// in batches of 4 steps of 32 bytes (one batch loading while the one before is folded), at
/// most `per_sm` blocks per SM (0: no cap). Only for measuring what the layout costs.
void launch_read_pattern(const void* p, int n, int k, read_layout layout, int wk, int per_sm,
                         unsigned* sink, cudaStream_t stream);

}  // namespace di::bench
