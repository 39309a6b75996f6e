// CPU reference of the block fake-quantizers (kernels/quant_math.hpp applied per block of
// each row): FP8 e4m3 with ue8m0 scales (activations, window KV) and FP4 e2m1 with ue8m0
// (indexer) or e4m3 (V4.1 compressed KV) scales.
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/quant_math.hpp"

#include <algorithm>
#include <cmath>

namespace di::cpu {

namespace {

float block_amax(const float* v, std::int64_t n) {
  float amax = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(v[i]));
  return amax;
}

}  // namespace

void fp8_fake_quant(tensor& x, int block, std::int64_t num_dims) {
  check_cpu_tensor(x, dtype::f32, 2, "fp8_fake_quant input");
  const std::int64_t rows = x.size(0), dim = x.size(1);
  DI_CHECK(block > 0 && num_dims >= 0 && num_dims <= dim,
           "fp8_fake_quant: block {} / {} dims of rows of {}", block, num_dims, dim);
  float* p = x.data<float>();
#pragma omp parallel for if (rows * dim > parallel_work)
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = p + r * dim;
    for (std::int64_t b = 0; b < num_dims; b += block) {
      const std::int64_t n = std::min<std::int64_t>(block, num_dims - b);
      const float scale = fp8_block_scale(block_amax(row + b, n));
      for (std::int64_t i = 0; i < n; ++i) row[b + i] = fp8_fake_quant_value(row[b + i], scale);
    }
  }
}

void fp4_fake_quant(tensor& x, int block, fp4_scale scale_kind) {
  check_cpu_tensor(x, dtype::f32, 2, "fp4_fake_quant input");
  const std::int64_t rows = x.size(0), dim = x.size(1);
  DI_CHECK(block > 0 && dim % block == 0, "fp4_fake_quant: rows of {} in blocks of {}", dim, block);
  float* p = x.data<float>();
#pragma omp parallel for if (rows * dim > parallel_work)
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = p + r * dim;
    for (std::int64_t b = 0; b < dim; b += block) {
      const float amax = block_amax(row + b, block);
      const float scale =
          scale_kind == fp4_scale::ue8m0 ? fp4_ue8m0_block_scale(amax) : fp4_e4m3_block_scale(amax);
      for (std::int64_t i = 0; i < block; ++i) row[b + i] = fp4_fake_quant_value(row[b + i], scale);
    }
  }
}

}  // namespace di::cpu
