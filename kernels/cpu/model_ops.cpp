// CPU reference of the model-specific ops: FP8 table rows (Engram), row concatenation, MoE
// routing with sqrt-softplus scores, the Engram gate, and the compressor's partial-group
// state machine (gated softmax pooling, with V4's overlapping windows).
#include "kernels/cpu/cpu_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace di::cpu {

tensor embedding_fp8(const tensor& codes, const tensor& scales, const tensor& ids) {
  check_cpu_tensor(codes, dtype::u8, 2, "fp8 table codes");
  check_cpu_tensor(scales, dtype::u8, 2, "fp8 table scales");
  check_cpu_tensor(ids, dtype::i64, 1, "fp8 table ids");
  const std::int64_t rows = codes.size(0), dim = codes.size(1), n = ids.size(0);
  DI_CHECK(scales.size(0) == rows && scales.size(1) > 0 && dim % scales.size(1) == 0,
           "fp8 table: scales {} do not fit codes {}", scales.shape().str(), codes.shape().str());
  const std::int64_t block = dim / scales.size(1);
  tensor out = tensor::empty({n, dim}, dtype::f32);  // [n, dim]
  const std::int64_t* id = ids.data<std::int64_t>();
  for (std::int64_t t = 0; t < n; ++t) {
    DI_CHECK(id[t] >= 0 && id[t] < rows, "fp8 table: row {} outside [0, {})", id[t], rows);
    const std::uint8_t* c = codes.data<std::uint8_t>() + id[t] * dim;
    const std::uint8_t* s = scales.data<std::uint8_t>() + id[t] * scales.size(1);
    for (std::int64_t d = 0; d < dim; ++d)
      out.data<float>()[t * dim + d] = e4m3_to_f32(c[d]) * e8m0_to_f32(s[d / block]);
  }
  return out;
}

tensor gather_rows(const tensor& x, const tensor& rows) {
  DI_CHECK(x.rank() >= 1 && x.is_contiguous(), "gather_rows: source must be contiguous");
  check_cpu_tensor(rows, dtype::i64, 1, "gather_rows indices");
  const std::int64_t m = x.size(0), n = rows.size(0);
  const std::size_t row_bytes = m > 0 ? x.nbytes() / std::size_t(m) : 0;
  tensor_shape shape = x.shape();
  shape[0] = n;
  tensor out = tensor::empty(shape, x.type());  // [n, ...]
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t r = rows.data<std::int64_t>()[i];
    DI_CHECK(r >= 0 && r < m, "gather_rows: row {} outside [0, {})", r, m);
    std::memcpy(static_cast<std::byte*>(out.raw()) + std::size_t(i) * row_bytes,
                static_cast<const std::byte*>(x.raw()) + std::size_t(r) * row_bytes, row_bytes);
  }
  return out;
}

void scatter_add_rows(tensor& y, const tensor& rows, const tensor& src) {
  DI_CHECK(y.type() == dtype::f32 && y.rank() >= 1 && y.is_contiguous(),
           "scatter_add_rows: target must be a contiguous f32 tensor");
  check_cpu_tensor(rows, dtype::i64, 1, "scatter_add_rows indices");
  tensor_shape shape = y.shape();
  shape[0] = rows.size(0);
  check_tensor(src, dtype::f32, shape, "scatter_add_rows source");
  const std::int64_t m = y.size(0), width = m > 0 ? y.numel() / m : 0;
  for (std::int64_t i = 0; i < rows.size(0); ++i) {
    const std::int64_t r = rows.data<std::int64_t>()[i];
    DI_CHECK(r >= 0 && r < m, "scatter_add_rows: row {} outside [0, {})", r, m);
    float* dst = y.data<float>() + r * width;
    const float* s = src.data<float>() + i * width;
    for (std::int64_t d = 0; d < width; ++d) dst[d] += s[d];
  }
}

void gather_add_rows(tensor& y, const tensor& slots, const tensor& src) {
  DI_CHECK(y.type() == dtype::f32 && y.rank() >= 1 && y.is_contiguous(),
           "gather_add_rows: target must be a contiguous f32 tensor");
  check_cpu_tensor(slots, dtype::i32, 2, "gather_add_rows slots");
  const std::int64_t m = y.size(0), k = slots.size(1), width = m > 0 ? y.numel() / m : 0;
  DI_CHECK(slots.size(0) == m, "gather_add_rows: {} rows of slots for {} target rows",
           slots.size(0), m);
  DI_CHECK(src.type() == dtype::f32 && src.rank() == y.rank() && src.is_contiguous() &&
               (m == 0 || src.numel() == src.size(0) * width),
           "gather_add_rows: source must be contiguous f32 rows of the target's width");
  std::vector<std::int32_t> order(static_cast<std::size_t>(k));
  for (std::int64_t r = 0; r < m; ++r) {
    const std::int32_t* row = slots.data<std::int32_t>() + r * k;
    order.assign(row, row + k);
    std::sort(order.begin(), order.end());
    float* dst = y.data<float>() + r * width;
    for (const std::int32_t s : order) {
      if (s < 0) continue;
      DI_CHECK(s < src.size(0), "gather_add_rows: slot {} outside [0, {})", s, src.size(0));
      const float* from = src.data<float>() + std::int64_t(s) * width;
      for (std::int64_t d = 0; d < width; ++d) dst[d] += from[d];
    }
  }
}

void add_inplace(tensor& y, const tensor& x) {
  check_tensor(x, dtype::f32, y.shape(), "add_inplace operand");
  DI_CHECK(y.type() == dtype::f32 && y.is_contiguous(), "add_inplace: target must be f32");
  for (std::int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] += x.data<float>()[i];
}

void add_position_rows(tensor& y, const tensor& table, const tensor& positions) {
  ops::detail::check_position_rows(y, table, positions);
  check_cpu_tensor(positions, dtype::i64, 1, "add_position_rows positions");
  const std::int64_t n = y.size(0), width = y.size(1), period = table.size(0);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t r = (positions.data<std::int64_t>()[i] % period + period) % period;
    const float* from = table.data<float>() + r * width;
    float* dst = y.data<float>() + i * width;
    for (std::int64_t d = 0; d < width; ++d) dst[d] += from[d];
  }
}

tensor concat_rows(std::span<const tensor> parts) {
  DI_CHECK(!parts.empty(), "concat_rows: nothing to concatenate");
  std::int64_t rows = 0;
  std::int64_t row_elems = 1;  // elements per row: the product of the trailing extents
  for (int d = 1; d < parts[0].rank(); ++d) row_elems *= parts[0].size(d);
  for (const tensor& p : parts) {
    DI_CHECK(p.type() == dtype::f32 && p.is_contiguous() && p.rank() == parts[0].rank(),
             "concat_rows: parts must be contiguous f32 tensors of one rank");
    for (int d = 1; d < p.rank(); ++d)
      DI_CHECK(p.size(d) == parts[0].size(d), "concat_rows: {} vs {}", p.shape().str(),
               parts[0].shape().str());
    rows += p.size(0);
  }
  tensor_shape shape = parts[0].shape();
  shape[0] = rows;
  tensor out = tensor::empty(shape, dtype::f32);  // [sum rows, ...]
  std::int64_t at = 0;
  for (const tensor& p : parts) {
    if (p.numel() > 0) std::memcpy(out.data<float>() + at * row_elems, p.data<float>(), p.nbytes());
    at += p.size(0);
  }
  return out;
}

routing route(const tensor& logits, const tensor& bias, const tensor& fixed,
              const router_params& p) {
  check_cpu_tensor(logits, dtype::f32, 2, "router logits");
  const std::int64_t tokens = logits.size(0), experts = logits.size(1);
  const int k = p.top_k;
  DI_CHECK(k > 0 && k <= experts, "router: top {} of {} experts", k, experts);
  if (bias.defined()) check_tensor(bias, dtype::f32, {experts}, "router bias");
  if (fixed.defined()) check_tensor(fixed, dtype::i32, {tokens, k}, "router fixed experts");
  tensor scores = tensor::empty({tokens, experts}, dtype::f32);  // [tokens, experts]
  for (std::int64_t i = 0; i < tokens * experts; ++i) {
    const float z = logits.data<float>()[i] / p.gate_temp;
    const float softplus = z > 20.0f ? z : std::log1p(std::exp(z));  // torch's threshold 20
    scores.data<float>()[i] = std::sqrt(softplus);
  }
  routing out{tensor::empty({tokens, k}, dtype::f32), fixed.defined() ? fixed.clone() : tensor()};
  if (!fixed.defined()) {
    tensor biased = scores.clone();  // [tokens, experts]
    if (bias.defined())
      for (std::int64_t i = 0; i < tokens * experts; ++i)
        biased.data<float>()[i] += bias.data<float>()[i % experts];
    out.experts = topk(biased, k);
  }
  for (std::int64_t t = 0; t < tokens; ++t) {
    float* w = out.weights.data<float>() + t * k;
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) {
      const std::int32_t e = out.experts.data<std::int32_t>()[t * k + j];
      DI_CHECK(e >= 0 && e < experts, "router: expert {} of {}", e, experts);
      sum += (w[j] = scores.data<float>()[t * experts + e]);
    }
    for (int j = 0; j < k; ++j) {
      if (p.normalize) w[j] /= sum + p.normalize_eps;
      w[j] *= p.route_scale;
    }
  }
  return out;
}

expert_groups group_by_expert(const routing& route, int experts) {
  check_cpu_tensor(route.experts, dtype::i32, 2, "group_by_expert experts");
  check_tensor(route.weights, dtype::f32, route.experts.shape(), "group_by_expert weights");
  DI_CHECK(experts > 0, "group_by_expert: {} experts", experts);
  const std::int64_t n = route.experts.numel();
  const std::int32_t* ids = route.experts.data<std::int32_t>();
  expert_groups g{tensor::empty({n}, dtype::i64), tensor::empty({n}, dtype::f32),
                  tensor::zeros({std::int64_t(experts) + 1}, dtype::i32),
                  tensor::empty({n}, dtype::i32)};
  std::int32_t* offs = g.offsets.data<std::int32_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    DI_CHECK(ids[i] >= 0 && ids[i] < experts, "group_by_expert: expert {} of {}", ids[i], experts);
    ++offs[ids[i] + 1];
  }
  for (int e = 0; e < experts; ++e) offs[e + 1] += offs[e];
  std::vector<std::int32_t> fill(offs, offs + experts);  // next free slot of each group
  const std::int64_t k = route.experts.size(1);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int32_t at = fill[std::size_t(ids[i])]++;
    g.rows.data<std::int64_t>()[at] = i / k;
    g.weights.data<float>()[at] = route.weights.data<float>()[i];
    g.slots.data<std::int32_t>()[i] = at;
  }
  return g;
}

namespace {

/// engram_gate of h [tokens, hc, dim] with token t's key k at keys + t * key_stride + k * dim
/// and its value at values + t * value_stride.
tensor gate_streams(const tensor& h, const float* keys, std::int64_t key_stride,
                    const float* values, std::int64_t value_stride, const tensor& weight,
                    const engram_params& p) {
  const std::int64_t tokens = h.size(0), hc = h.size(1), dim = h.size(2);
  tensor out = tensor::empty(h.shape(), dtype::f32);  // [tokens, hc, dim]
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t k = 0; k < hc; ++k) {
      const float* hp = h.data<float>() + (t * hc + k) * dim;
      const float* kp = keys + t * key_stride + k * dim;
      const float* wp = weight.data<float>() + k * dim;
      float hh = 0.0f, kk = 0.0f, dot = 0.0f;
      for (std::int64_t d = 0; d < dim; ++d) {
        hh += hp[d] * hp[d];
        kk += kp[d] * kp[d];
        dot += hp[d] * wp[d] * kp[d];
      }
      const float rstd =
          (1.0f / std::sqrt(hh / float(dim) + p.eps)) * (1.0f / std::sqrt(kk / float(dim) + p.eps));
      const float g = dot * rstd * (1.0f / std::sqrt(float(dim)));
      const float root = std::copysign(std::sqrt(std::fmax(std::fabs(g), p.clamp)), g);
      const float gate = 1.0f / (1.0f + std::exp(-root));
      float* o = out.data<float>() + (t * hc + k) * dim;
      const float* v = values + t * value_stride;
      for (std::int64_t d = 0; d < dim; ++d) o[d] = hp[d] + gate * v[d];
    }
  }
  return out;
}

}  // namespace

tensor engram_gate(const tensor& h, const tensor& key, const tensor& value, const tensor& weight,
                   const engram_params& p) {
  check_cpu_tensor(h, dtype::f32, 3, "engram streams");
  const std::int64_t tokens = h.size(0), hc = h.size(1), dim = h.size(2);
  check_tensor(key, dtype::f32, h.shape(), "engram key");
  check_tensor(value, dtype::f32, {tokens, dim}, "engram value");
  check_tensor(weight, dtype::f32, {hc, dim}, "engram weight");
  return gate_streams(h, key.data<float>(), hc * dim, value.data<float>(), dim, weight, p);
}

tensor engram_gate_kv(const tensor& h, const tensor& kv, const tensor& weight,
                      const engram_params& p) {
  check_cpu_tensor(h, dtype::f32, 3, "engram streams");
  const std::int64_t tokens = h.size(0), hc = h.size(1), dim = h.size(2);
  check_tensor(kv, dtype::f32, {tokens, (hc + 1) * dim}, "engram keys and value");
  check_tensor(weight, dtype::f32, {hc, dim}, "engram weight");
  return gate_streams(h, kv.data<float>(), (hc + 1) * dim, kv.data<float>() + hc * dim,
                      (hc + 1) * dim, weight, p);
}

namespace {

/// Pools the group held in the state: per channel, softmax of the scores over the group's
/// rows, then the weighted sum of kv. With overlap, rows [0, r) contribute their first half
/// (previous group) and rows [r, 2r) their second half (current group).
void pool_group(const float* skv, const float* sscore, int ratio, bool overlap, std::int64_t dim,
                float* out) {
  const int rows = overlap ? 2 * ratio : ratio;
  const std::int64_t width = overlap ? 2 * dim : dim;
  std::vector<float> w(static_cast<std::size_t>(rows));
  for (std::int64_t c = 0; c < dim; ++c) {
    auto col = [&](int j) { return (overlap && j >= ratio ? dim : 0) + c; };
    float mx = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < rows; ++j) mx = std::fmax(mx, sscore[j * width + col(j)]);
    float sum = 0.0f;
    for (int j = 0; j < rows; ++j)
      sum += (w[std::size_t(j)] = std::exp(sscore[j * width + col(j)] - mx));
    float acc = 0.0f;
    for (int j = 0; j < rows; ++j) acc += skv[j * width + col(j)] * (w[std::size_t(j)] / sum);
    out[c] = acc;
  }
}

}  // namespace

tensor compress_tokens(const tensor& kv, const tensor& score, std::int64_t start, tensor& state_kv,
                       tensor& state_score, const compress_params& p) {
  check_cpu_tensor(kv, dtype::f32, 2, "compressor kv");
  check_tensor(score, dtype::f32, kv.shape(), "compressor score");
  const int r = p.ratio, coff = p.overlap ? 2 : 1;
  const std::int64_t n = kv.size(0), width = kv.size(1), dim = width / coff;
  DI_CHECK(r > 0 && width % coff == 0 && start >= 0, "compressor: ratio {}, rows of {}", r, width);
  check_tensor(state_kv, dtype::f32, {coff * r, width}, "compressor state kv");
  check_tensor(state_score, dtype::f32, {coff * r, width}, "compressor state score");
  const std::int64_t completed = (start + n) / r - start / r;
  tensor out = tensor::empty({completed, dim}, dtype::f32);  // [completed, dim]
  float* skv = state_kv.data<float>();
  float* ssc = state_score.data<float>();
  std::int64_t emitted = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t pos = start + i;
    const std::int64_t slot = (p.overlap ? r : 0) + pos % r;
    std::memcpy(skv + slot * width, kv.data<float>() + i * width, std::size_t(width) * 4);
    std::memcpy(ssc + slot * width, score.data<float>() + i * width, std::size_t(width) * 4);
    if ((pos + 1) % r != 0) continue;
    pool_group(skv, ssc, r, p.overlap, dim, out.data<float>() + emitted++ * dim);
    if (p.overlap) {  // the finished group becomes the next group's overlap half
      std::memcpy(skv, skv + r * width, std::size_t(r * width) * 4);
      std::memcpy(ssc, ssc + r * width, std::size_t(r * width) * 4);
    }
  }
  return out;
}

}  // namespace di::cpu
