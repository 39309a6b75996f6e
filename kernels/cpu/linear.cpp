// CPU reference GEMMs: y = x W^T with fp32 weights (FP8/FP4 checkpoints are dequantized on
// load) and optional FP8 activation quantization, plus the block-diagonal grouped projection
// of the attention output. OpenMP over output columns; fp32 accumulation.
#include "kernels/cpu/cpu_ops.hpp"

namespace di::cpu {

namespace {

/// Dot product with eight independent partial sums (lets the compiler vectorize without
/// reassociating a single accumulator).
float dot(const float* a, const float* b, std::int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace

tensor linear(const tensor& x, const tensor& weight, const linear_params& params) {
  check_cpu_tensor(x, dtype::f32, 2, "linear input");
  check_cpu_tensor(weight, dtype::f32, 2, "linear weight");
  const std::int64_t rows = x.size(0), in = x.size(1), out_dim = weight.size(0);
  DI_CHECK(weight.size(1) == in, "linear: input has {} features, weight {} expects {}", in,
           weight.shape().str(), weight.size(1));
  tensor input = x;  // [rows, in]
  if (params.act_quant_block > 0) {
    input = x.clone();
    fp8_fake_quant(input, params.act_quant_block, in);
  }
  tensor out = tensor::empty({rows, out_dim}, dtype::f32);  // [rows, out]
  const float* a = input.data<float>();
  const float* w = weight.data<float>();
  float* y = out.data<float>();
#pragma omp parallel for schedule(static) if (rows * out_dim * in > parallel_work)
  for (std::int64_t n = 0; n < out_dim; ++n)
    for (std::int64_t r = 0; r < rows; ++r) y[r * out_dim + n] = dot(a + r * in, w + n * in, in);
  return out;
}

tensor grouped_linear(const tensor& x, const tensor& weight) {
  check_cpu_tensor(x, dtype::f32, 3, "grouped_linear input");
  check_cpu_tensor(weight, dtype::f32, 2, "grouped_linear weight");
  const std::int64_t rows = x.size(0), groups = x.size(1), in = x.size(2);
  DI_CHECK(weight.size(1) == in && weight.size(0) % groups == 0,
           "grouped_linear: weight {} does not fit {} groups of {} inputs", weight.shape().str(),
           groups, in);
  const std::int64_t out_dim = weight.size(0) / groups;
  tensor out = tensor::empty({rows, groups, out_dim}, dtype::f32);  // [rows, groups, out]
  const float* a = x.data<float>();
  const float* w = weight.data<float>();
  float* y = out.data<float>();
#pragma omp parallel for collapse(2) if (rows * groups * out_dim * in > parallel_work)
  for (std::int64_t g = 0; g < groups; ++g)
    for (std::int64_t n = 0; n < out_dim; ++n)
      for (std::int64_t r = 0; r < rows; ++r)
        y[(r * groups + g) * out_dim + n] =
            dot(a + (r * groups + g) * in, w + (g * out_dim + n) * in, in);
  return out;
}

}  // namespace di::cpu
