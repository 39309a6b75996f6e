// CPU reference of manifold hyper-connections: the mixing coefficients of a site (pre,
// post, and the Sinkhorn-normalised comb matrix), V4's head mix, and the collapse/expand of
// the hc residual streams around a sub-block.
#include "kernels/cpu/cpu_ops.hpp"

#include <cmath>
#include <vector>

namespace di::cpu {

namespace {

float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

/// mixes[m] = (x . fn[m]) * rsqrt(mean(x^2) + eps) over the flattened streams of one token.
void project_mixes(const float* x, std::int64_t width, const float* fn, std::int64_t num_mixes,
                   float eps, float* mixes) {
  float sum = 0.0f;
  for (std::int64_t i = 0; i < width; ++i) sum += x[i] * x[i];
  const float rs = 1.0f / std::sqrt(sum / float(width) + eps);
  for (std::int64_t m = 0; m < num_mixes; ++m) {
    float acc = 0.0f;
    const float* f = fn + m * width;
    for (std::int64_t i = 0; i < width; ++i) acc += x[i] * f[i];
    mixes[m] = acc * rs;
  }
}

/// Row softmax (+eps), then alternating column / row normalisation, as the reference kernel.
void sinkhorn(float* comb, int hc, int iters, float eps) {
  for (int j = 0; j < hc; ++j) {
    float* row = comb + j * hc;
    float mx = row[0];
    for (int k = 1; k < hc; ++k) mx = std::fmax(mx, row[k]);
    float sum = 0.0f;
    for (int k = 0; k < hc; ++k) sum += (row[k] = std::exp(row[k] - mx));
    for (int k = 0; k < hc; ++k) row[k] = row[k] / sum + eps;
  }
  auto normalize_cols = [&] {
    for (int k = 0; k < hc; ++k) {
      float sum = 0.0f;
      for (int j = 0; j < hc; ++j) sum += comb[j * hc + k];
      for (int j = 0; j < hc; ++j) comb[j * hc + k] /= sum + eps;
    }
  };
  normalize_cols();
  for (int it = 1; it < iters; ++it) {
    for (int j = 0; j < hc; ++j) {
      float sum = 0.0f;
      for (int k = 0; k < hc; ++k) sum += comb[j * hc + k];
      for (int k = 0; k < hc; ++k) comb[j * hc + k] /= sum + eps;
    }
    normalize_cols();
  }
}

void check_streams(const tensor& x, const tensor& fn, std::int64_t num_mixes, int hc) {
  check_cpu_tensor(x, dtype::f32, 3, "hc streams");
  DI_CHECK(x.size(1) == hc, "hc streams: {} streams, config says {}", x.size(1), hc);
  check_tensor(fn, dtype::f32, {num_mixes, hc * x.size(2)}, "hc fn");
}

}  // namespace

hc_mix hc_mixes(const tensor& x, const tensor& fn, const tensor& scale, const tensor& base,
                const hc_params& p) {
  const int hc = p.hc_mult;
  const std::int64_t num_mixes = (2 + hc) * hc, tokens = x.size(0), width = hc * x.size(2);
  check_streams(x, fn, num_mixes, hc);
  check_tensor(scale, dtype::f32, {3}, "hc scale");
  check_tensor(base, dtype::f32, {num_mixes}, "hc base");
  hc_mix out{tensor::empty({tokens, hc}, dtype::f32), tensor::empty({tokens, hc}, dtype::f32),
             tensor::empty({tokens, hc, hc}, dtype::f32)};
  const float *s = scale.data<float>(), *b = base.data<float>();
#pragma omp parallel for if (tokens * num_mixes * width > parallel_work)
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::vector<float> mixes(static_cast<std::size_t>(num_mixes));
    project_mixes(x.data<float>() + t * width, width, fn.data<float>(), num_mixes, p.norm_eps,
                  mixes.data());
    float* pre = out.pre.data<float>() + t * hc;
    float* post = out.post.data<float>() + t * hc;
    float* comb = out.comb.data<float>() + t * hc * hc;
    for (int j = 0; j < hc; ++j) {
      pre[j] = sigmoid(mixes[std::size_t(j)] * s[0] + b[j]) + p.hc_eps;
      post[j] = 2.0f * sigmoid(mixes[std::size_t(hc + j)] * s[1] + b[hc + j]);
    }
    for (int j = 0; j < hc * hc; ++j)
      comb[j] = mixes[std::size_t(2 * hc + j)] * s[2] + b[2 * hc + j];
    sinkhorn(comb, hc, p.sinkhorn_iters, p.hc_eps);
  }
  return out;
}

tensor hc_head_pre(const tensor& x, const tensor& fn, const tensor& scale, const tensor& base,
                   const hc_params& p) {
  const int hc = p.hc_mult;
  const std::int64_t tokens = x.size(0), width = hc * x.size(2);
  check_streams(x, fn, hc, hc);
  check_tensor(scale, dtype::f32, {1}, "hc head scale");
  check_tensor(base, dtype::f32, {hc}, "hc head base");
  tensor pre = tensor::empty({tokens, hc}, dtype::f32);  // [tokens, hc]
  std::vector<float> mixes(static_cast<std::size_t>(hc));
  for (std::int64_t t = 0; t < tokens; ++t) {
    project_mixes(x.data<float>() + t * width, width, fn.data<float>(), hc, p.norm_eps,
                  mixes.data());
    for (int j = 0; j < hc; ++j)
      pre.data<float>()[t * hc + j] =
          sigmoid(mixes[std::size_t(j)] * scale.data<float>()[0] + base.data<float>()[j]) +
          p.hc_eps;
  }
  return pre;
}

tensor hc_collapse(const tensor& x, const tensor& pre) {
  check_cpu_tensor(x, dtype::f32, 3, "hc_collapse streams");
  const std::int64_t tokens = x.size(0), hc = x.size(1), dim = x.size(2);
  check_tensor(pre, dtype::f32, {tokens, hc}, "hc_collapse pre");
  tensor out = tensor::zeros({tokens, dim}, dtype::f32);  // [tokens, dim]
  const float *xp = x.data<float>(), *w = pre.data<float>();
  float* o = out.data<float>();
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t k = 0; k < hc; ++k)
      for (std::int64_t d = 0; d < dim; ++d)
        o[t * dim + d] += w[t * hc + k] * xp[(t * hc + k) * dim + d];
  return out;
}

tensor hc_expand(const tensor& y, const tensor& residual, const tensor& post, const tensor& comb) {
  check_cpu_tensor(residual, dtype::f32, 3, "hc_expand residual");
  const std::int64_t tokens = residual.size(0), hc = residual.size(1), dim = residual.size(2);
  check_tensor(y, dtype::f32, {tokens, dim}, "hc_expand sub-block output");
  check_tensor(post, dtype::f32, {tokens, hc}, "hc_expand post");
  check_tensor(comb, dtype::f32, {tokens, hc, hc}, "hc_expand comb");
  tensor out = tensor::empty({tokens, hc, dim}, dtype::f32);  // [tokens, hc, dim]
  const float *yp = y.data<float>(), *r = residual.data<float>();
  const float *pp = post.data<float>(), *c = comb.data<float>();
  float* o = out.data<float>();
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t k = 0; k < hc; ++k) {
      for (std::int64_t d = 0; d < dim; ++d) {
        float mixed = 0.0f;
        for (std::int64_t j = 0; j < hc; ++j)
          mixed += c[(t * hc + j) * hc + k] * r[(t * hc + j) * dim + d];
        o[(t * hc + k) * dim + d] = pp[t * hc + k] * yp[t * dim + d] + mixed;
      }
    }
  }
  return out;
}

}  // namespace di::cpu
