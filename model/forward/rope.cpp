// YaRN for compressed layers: dims whose wavelength fits the original context keep their
// frequency, those far beyond are divided by `factor`, with a linear ramp between the
// beta_fast and beta_slow correction dims (the reference's precompute_freqs_cis).
#include "model/forward/rope.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace di {

namespace {

/// The (fractional) dim whose wavelength turns `rotations` times over `seq_len` positions.
double correction_dim(double rotations, int dim, double base, double seq_len) {
  return dim * std::log(seq_len / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
}

}  // namespace

tensor rope_inv_freq(const model_config& c, bool compressed) {
  const int dim = c.rope_head_dim;
  DI_CHECK(dim > 0 && dim % 2 == 0, "rope_head_dim {} must be positive and even", dim);
  const double base = compressed ? c.compress_rope_theta : c.rope_theta;
  tensor t = tensor::empty({dim / 2}, dtype::f32);  // [rope_head_dim / 2]
  float* freq = t.data<float>();
  for (int i = 0; i < dim / 2; ++i)
    freq[i] = 1.0f / std::pow(float(base), float(2 * i) / float(dim));
  const std::int64_t original = c.yarn.original_max_position_embeddings;
  if (!compressed || !c.yarn.enabled || original <= 0) return t;
  const double low_d = std::floor(correction_dim(c.yarn.beta_fast, dim, base, double(original)));
  const double high_d = std::ceil(correction_dim(c.yarn.beta_slow, dim, base, double(original)));
  const float low = float(std::max(low_d, 0.0));
  const float high = float(std::min(high_d, double(dim - 1)));
  const float span = high == low ? 0.001f : high - low;
  const float factor = float(c.yarn.factor);
  for (int i = 0; i < dim / 2; ++i) {
    const float ramp = std::clamp((float(i) - low) / span, 0.0f, 1.0f);
    const float smooth = 1.0f - ramp;
    freq[i] = freq[i] / factor * (1.0f - smooth) + freq[i] * smooth;
  }
  return t;
}

}  // namespace di
