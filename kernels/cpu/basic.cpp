// CPU reference of the small elementwise ops: embedding gather (fp32 or in-place bf16
// tables), RMSNorm, the clamped SwiGLU of the MoE experts and the normalised Walsh-Hadamard
// transform of V4's indexer.
#include "kernels/cpu/cpu_ops.hpp"

#include <cmath>
#include <cstring>

namespace di::cpu {

tensor embedding(const tensor& table, const tensor& ids) {
  check_cpu_tensor(table, table.type() == dtype::bf16 ? dtype::bf16 : dtype::f32, 2,
                   "embedding table");
  check_cpu_tensor(ids, dtype::i64, 1, "embedding ids");
  const std::int64_t vocab = table.size(0), dim = table.size(1), n = ids.size(0);
  const std::int64_t* id = ids.data<std::int64_t>();
  for (std::int64_t t = 0; t < n; ++t)
    DI_CHECK(id[t] >= 0 && id[t] < vocab,
             "token id {} at index {} is outside the vocabulary [0, {})", id[t], t, vocab);
  tensor out = tensor::empty({n, dim}, dtype::f32);  // [tokens, dim]
  // Byte-wise reads: a bf16 table is usually a view into the checkpoint, not 2-byte aligned.
  const auto* src = static_cast<const std::uint8_t*>(table.raw());
  float* dst = out.data<float>();
  for (std::int64_t t = 0; t < n; ++t) {
    if (table.type() == dtype::f32) {
      std::memcpy(dst + t * dim, src + 4 * id[t] * dim, std::size_t(dim) * sizeof(float));
      continue;
    }
    for (std::int64_t i = 0; i < dim; ++i) {
      std::uint16_t h;
      std::memcpy(&h, src + 2 * (id[t] * dim + i), 2);
      dst[t * dim + i] = bf16_to_f32(h);
    }
  }
  return out;
}

tensor rms_norm(const tensor& x, const tensor& weight, float eps) {
  check_cpu_tensor(x, dtype::f32, 2, "rms_norm input");
  const std::int64_t rows = x.size(0), dim = x.size(1);
  const float* w = nullptr;
  if (weight.defined()) {
    check_tensor(weight, dtype::f32, {dim}, "rms_norm weight");
    w = weight.data<float>();
  }
  tensor out = tensor::empty({rows, dim}, dtype::f32);  // [rows, dim]
  const float* in = x.data<float>();
  float* o = out.data<float>();
#pragma omp parallel for if (rows * dim > parallel_work)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = in + r * dim;
    float sum = 0.0f;
    for (std::int64_t i = 0; i < dim; ++i) sum += xr[i] * xr[i];
    const float rs = 1.0f / std::sqrt(sum / float(dim) + eps);
    for (std::int64_t i = 0; i < dim; ++i) {
      const float v = xr[i] * rs;
      o[r * dim + i] = w ? w[i] * v : v;
    }
  }
  return out;
}

tensor swiglu(const tensor& gate, const tensor& up, float limit, const tensor& row_scale) {
  check_cpu_tensor(gate, dtype::f32, 2, "swiglu gate");
  check_tensor(up, dtype::f32, gate.shape(), "swiglu up");
  const std::int64_t rows = gate.size(0), inter = gate.size(1);
  const float* scale = nullptr;
  if (row_scale.defined()) {
    check_tensor(row_scale, dtype::f32, {rows}, "swiglu row scale");
    scale = row_scale.data<float>();
  }
  tensor out = tensor::empty({rows, inter}, dtype::f32);  // [rows, inter]
  const float* g = gate.data<float>();
  const float* u = up.data<float>();
  float* o = out.data<float>();
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t i = 0; i < inter; ++i) {
      float gv = g[r * inter + i], uv = u[r * inter + i];
      if (limit > 0.0f) {
        uv = std::fmin(std::fmax(uv, -limit), limit);
        gv = std::fmin(gv, limit);
      }
      const float silu = gv / (1.0f + std::exp(-gv));
      const float v = silu * uv;
      o[r * inter + i] = scale ? scale[r] * v : v;
    }
  }
  return out;
}

void hadamard(tensor& x) {
  check_cpu_tensor(x, dtype::f32, 2, "hadamard input");
  const std::int64_t rows = x.size(0), dim = x.size(1);
  DI_CHECK(dim > 0 && (dim & (dim - 1)) == 0, "hadamard: dim {} is not a power of two", dim);
  const float norm = 1.0f / std::sqrt(float(dim));
  float* p = x.data<float>();
  for (std::int64_t r = 0; r < rows; ++r) {
    float* v = p + r * dim;
    for (std::int64_t h = 1; h < dim; h *= 2) {
      for (std::int64_t i = 0; i < dim; i += 2 * h) {
        for (std::int64_t j = i; j < i + h; ++j) {
          const float a = v[j], b = v[j + h];
          v[j] = a + b;
          v[j + h] = a - b;
        }
      }
    }
    for (std::int64_t i = 0; i < dim; ++i) v[i] *= norm;
  }
}

}  // namespace di::cpu
