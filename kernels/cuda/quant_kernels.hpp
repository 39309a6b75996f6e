// Launchers of the CUDA backend's block fake-quantizers, Walsh-Hadamard transform and rotary
// embedding (in place on fp32 rows). They use the scalar definitions of kernels/quant_math.hpp,
// so results equal the CPU twin bit for bit (rotary: up to the last bit of sin/cos).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace di::cuda {

struct fake_quant_params {
  float* x;  ///< [rows, dim], in place
  std::int64_t rows;
  std::int64_t dim;
  std::int64_t num_dims;  ///< quantize the first num_dims values of each row
  int block;              ///< values per scale
  int kind;               ///< 0: FP8 e4m3/ue8m0, 1: FP4 e2m1/ue8m0, 2: FP4 e2m1/e4m3
};
void launch_fake_quant(const fake_quant_params& p, cudaStream_t stream);

/// Normalised Walsh-Hadamard transform of each row of x [rows, dim] (dim a power of two).
void launch_hadamard(float* x, std::int64_t rows, std::int64_t dim, cudaStream_t stream);

struct rotary_params {
  float* x;                       ///< [tokens, heads, dim], in place
  const std::int64_t* positions;  ///< [tokens]
  const float* inv_freq;          ///< [pairs]
  std::int64_t tokens;
  std::int64_t heads;
  std::int64_t dim;
  std::int64_t pairs;  ///< the last 2 * pairs values of a row rotate
  bool inverse;
};
void launch_rotary(const rotary_params& p, cudaStream_t stream);

/// rms_norm, rotary (forward) and FP8 fake quantization of each row in one kernel (a block per
/// row, the row in shared memory): norm_rope_quant.
struct norm_rope_quant_params {
  const float* x;                 ///< [tokens, dim]
  const float* weight;            ///< [dim] or nullptr
  float* out;                     ///< [tokens, dim]
  const std::int64_t* positions;  ///< [tokens]
  const float* inv_freq;          ///< [pairs]
  std::int64_t tokens, dim, pairs;
  float eps;
  int quant_block;
  std::int64_t quant_dims;
};
constexpr std::int64_t norm_rope_quant_max_dim = 8192;
void launch_norm_rope_quant(const norm_rope_quant_params& p, cudaStream_t stream);

}  // namespace di::cuda
