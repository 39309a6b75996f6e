// CPU reference of the rotary embedding: interleaved (even, odd) pairs of the trailing rope
// dims rotated as complex numbers by fp32 angles position * inv_freq (the reference forms
// the angle table with an fp32 outer product), or by the conjugate for the inverse rotation.
#include "kernels/cpu/cpu_ops.hpp"

#include <cmath>
#include <vector>

namespace di::cpu {

void rotary(tensor& x, const tensor& positions, const tensor& inv_freq, bool inverse) {
  DI_CHECK(x.rank() == 2 || x.rank() == 3,
           "rotary: input {} must be [tokens, dim] or "
           "[tokens, heads, dim]",
           x.shape().str());
  check_cpu_tensor(x, dtype::f32, x.rank(), "rotary input");
  check_cpu_tensor(positions, dtype::i64, 1, "rotary positions");
  check_cpu_tensor(inv_freq, dtype::f32, 1, "rotary inv_freq");
  const std::int64_t tokens = x.size(0), dim = x.size(-1);
  const std::int64_t heads = x.rank() == 3 ? x.size(1) : 1;
  const std::int64_t pairs = inv_freq.size(0);
  DI_CHECK(positions.size(0) == tokens, "rotary: {} positions for {} tokens", positions.size(0),
           tokens);
  DI_CHECK(2 * pairs <= dim, "rotary: {} rope dims exceed the row of {}", 2 * pairs, dim);
  const float* freq = inv_freq.data<float>();
  const std::int64_t* pos = positions.data<std::int64_t>();
  float* p = x.data<float>();
  std::vector<float> cos_t(static_cast<std::size_t>(pairs)), sin_t(static_cast<std::size_t>(pairs));
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t i = 0; i < pairs; ++i) {
      const float angle = float(pos[t]) * freq[i];
      cos_t[std::size_t(i)] = float(std::cos(double(angle)));
      const float s = float(std::sin(double(angle)));
      sin_t[std::size_t(i)] = inverse ? -s : s;
    }
    for (std::int64_t h = 0; h < heads; ++h) {
      float* rope = p + (t * heads + h) * dim + (dim - 2 * pairs);
      for (std::int64_t i = 0; i < pairs; ++i) {
        const float re = rope[2 * i], im = rope[2 * i + 1];
        const float c = cos_t[std::size_t(i)], s = sin_t[std::size_t(i)];
        rope[2 * i] = re * c - im * s;
        rope[2 * i + 1] = re * s + im * c;
      }
    }
  }
}

}  // namespace di::cpu
