// The sections of the kernel benchmarks: the physical limits of this GPU (measured first,
// every later row is compared with them) and the GEMMs in the stored formats.
#pragma once

#include "bench/kernels/bench_timer.hpp"

#include <string>
#include <vector>

namespace di::bench {

/// Measured in the same run.
struct limits {
  double copy_gbps = 0;    ///< device-to-device copy, bytes read + written per second / 1e9
  double bf16_tflops = 0;  ///< cuBLAS bf16 GEMM 8192^3 on random data
};

/// Copy bandwidth and the cuBLAS bf16 (and cuBLASLt FP8 per-tensor) matmul rates; the time of a
/// plain read (read_stream_us) at the decode weights' sizes.
void run_limits(limits& lim, std::vector<result_row>& rows, bool quick);

/// The best time in microseconds of one kernel that only reads `bytes` (read_stream.hpp; 2, 4
/// or 8 blocks per SM), L2-cold: replays of a graph over copies that together exceed the L2,
/// divided by the copies -- what a weight-streaming GEMM of those bytes could reach. Each size
/// (rounded up to 16 bytes) is measured once per process.
double read_stream_us(std::size_t bytes);

/// The plain read of 11.8 and 42 MB (a shared-expert projection, wq_b / wo_b) with 1-8 loads
/// of 16 bytes per thread in flight at 1-8 blocks of 256 threads per SM: the bytes in flight
/// per SM a weight-streaming GEMM needs for a given share of the copy rate. Rows "read depth".
void run_read_depth(const limits& lim, std::vector<result_row>& rows);

/// Reads of V4.1's wo_b and shared_w1 bytes in stream_gemm's geometry (read_pattern) with the
/// FP8 fragments row-major (8- or 16-byte loads) or tiled (contiguous 2 KB per warp and batch),
/// at 2, 3 or any blocks per SM: what the weight layout alone costs a decode GEMM. Rows "read
/// pattern" (shown beside a plain read of the same bytes).
void run_read_pattern(const limits& lim, std::vector<result_row>& rows);

/// FP8 block-scaled GEMMs and MXFP4 grouped expert GEMMs on V4.1-Flash / V4-Flash shapes;
/// only the cases whose label contains `filter` (all when empty).
void run_gemms(const limits& lim, std::vector<result_row>& rows, bool quick,
               const std::string& filter);

}  // namespace di::bench
