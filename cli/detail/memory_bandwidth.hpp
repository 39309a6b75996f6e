// Measured host memory bandwidth: the physical limit `deepinfer bench` compares CPU decode
// steps against, taken in the same run.
#pragma once

#include <cstddef>

namespace di::cli {

/// Best-of-`repeats` copy bandwidth over a `bytes` buffer with all OpenMP threads, in GB/s
/// counting bytes read plus bytes written (STREAM's "copy" convention).
double measure_copy_bandwidth(std::size_t bytes = std::size_t(512) << 20, int repeats = 5);

}  // namespace di::cli
