// Launchers of the CUDA backend's gathers, scatters, elementwise ops and norms: one params
// struct per kernel (raw device pointers and extents), enqueued on the given stream. The
// tensor-level entry points with their shape checks are in basic_ops.cpp. C++17 (nvcc).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace di::cuda {

/// Set by a kernel to 1 + the position of an index outside its range (0 = all valid).
using bad_index_slot = unsigned long long;

struct embedding_params {
  const void* table;  ///< [vocab, dim] f32, or bf16 when table_bf16
  bool table_bf16;
  const std::int64_t* ids;  ///< [n]
  std::int64_t n;
  std::int64_t dim;
  std::int64_t vocab;
  float* out;  ///< [n, dim]; the row of a bad id is NaN
  bad_index_slot* bad_index;
};
void launch_embedding(const embedding_params& p, cudaStream_t stream);

struct embedding_fp8_params {
  const std::uint8_t* codes;   ///< [rows, dim] e4m3
  const std::uint8_t* scales;  ///< [rows, scale_cols] e8m0
  const std::int64_t* ids;     ///< [n]
  std::int64_t n;
  std::int64_t dim;
  std::int64_t rows;
  std::int64_t scale_cols;  ///< dim / block
  float* out;               ///< [n, dim]
  bad_index_slot* bad_index;
};
void launch_embedding_fp8(const embedding_fp8_params& p, cudaStream_t stream);

struct gather_rows_params {
  const std::uint8_t* src;   ///< [m, row_bytes]
  const std::int64_t* rows;  ///< [n]
  std::int64_t n;
  std::int64_t m;
  std::int64_t row_bytes;
  std::uint8_t* out;  ///< [n, row_bytes]
  bad_index_slot* bad_index;
};
void launch_gather_rows(const gather_rows_params& p, cudaStream_t stream);

struct scatter_add_params {
  float* y;                  ///< [m, width]
  const std::int64_t* rows;  ///< [n]
  const float* src;          ///< [n, width]
  std::int64_t n;
  std::int64_t m;
  std::int64_t width;
  bad_index_slot* bad_index;
};
void launch_scatter_add_rows(const scatter_add_params& p, cudaStream_t stream);

/// ops::gather_add_rows: y[r] += src[s] over row r's slots s in ascending order (negative
/// skipped, >= n flagged in bad_index and skipped).
inline constexpr int gather_add_max_k = 16;
struct gather_add_params {
  float* y;                   ///< [m, width]
  const std::int32_t* slots;  ///< [m, k]
  const float* src;           ///< [n, width]
  std::int64_t m;
  std::int64_t n;
  std::int64_t width;
  int k;  ///< <= gather_add_max_k
  bad_index_slot* bad_index;
};
void launch_gather_add_rows(const gather_add_params& p, cudaStream_t stream);

/// y[i] += x[i] for i < n.
void launch_add_inplace(float* y, const float* x, std::int64_t n, cudaStream_t stream);

/// y[i, :] += table[positions[i] mod period, :] (the non-negative remainder).
struct add_position_rows_params {
  float* y;                       ///< [n, width]
  const float* table;             ///< [period, width]
  const std::int64_t* positions;  ///< [n]
  std::int64_t n, width, period;
};
void launch_add_position_rows(const add_position_rows_params& p, cudaStream_t stream);

/// dst[0, bytes) = src[0, bytes) by a kernel (16-byte accesses where both are aligned), and
/// dst[0, bytes) = 0: the tensor type's device copies and zero fills inside a forward, where a
/// copy-engine node would stop the programmatic launch of the kernel after it (a decode step
/// had ~30 such nodes). src may be any memory the device reads (device, mapped pinned host).
void launch_copy_bytes(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);
void launch_fill_zero(void* dst, std::size_t bytes, cudaStream_t stream);

/// Up to prefetch_l2_max_ranges byte ranges of device memory asked into the L2 cache
/// (cp.async.bulk.prefetch.L2: the copy engine of each SM fetches them; nothing waits for them
/// and nothing is written). The kernel issues its requests before it waits for the kernel
/// before it (they read nothing that kernel writes), so the bytes stream in while that one
/// and the ones after run. A hint: no result depends on it.
inline constexpr int prefetch_l2_max_ranges = 8;
struct prefetch_l2_params {
  const void* base[prefetch_l2_max_ranges] = {};
  std::size_t bytes[prefetch_l2_max_ranges] = {};
  int ranges = 0;
};
void launch_prefetch_l2(const prefetch_l2_params& p, cudaStream_t stream);

struct rms_norm_params {
  const float* x;       ///< [rows, dim]
  const float* weight;  ///< [dim] or nullptr
  float* out;           ///< [rows, dim]
  std::int64_t rows;
  std::int64_t dim;
  float eps;
  /// Also the output's FP8 activation quantization (as gemm's quantize_act: codes [rows, dim]
  /// e4m3, scales [rows, dim / quant_block] f32) when quant_block > 0; only where
  /// rms_norm_quantizes(dim, quant_block) and the rows are 16-byte aligned.
  std::uint8_t* codes = nullptr;
  float* scales = nullptr;
  int quant_block = 0;
  float* scales_mn = nullptr;  ///< the scales again as [dim / quant_block, rows], or nullptr
};
void launch_rms_norm(const rms_norm_params& p, cudaStream_t stream);
/// Whether launch_rms_norm can quantize rows of `dim` in blocks of `block` in its kernel.
bool rms_norm_quantizes(std::int64_t dim, int block);

}  // namespace di::cuda
