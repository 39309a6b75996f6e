// CPU reference of sparse attention with sinks (every query attends the kv rows its index
// list names; a learned per-head sink logit joins the softmax denominator only), the
// indexer's relu-weighted scores, and top-k selection.
#include "kernels/cpu/cpu_ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace di::cpu {

namespace {

float dot(const float* a, const float* b, std::int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

/// One (token, head): softmax over the named rows plus the sink, weighted sum of the rows.
void attend_one(const float* q, const float* kv, const std::int32_t* idx, std::int64_t k,
                std::int64_t dim, float sink, float scale, float* out, std::vector<float>& w) {
  w.assign(std::size_t(k), 0.0f);
  float max_score = -std::numeric_limits<float>::infinity();
  bool nan_score = false;
  for (std::int64_t j = 0; j < k; ++j) {
    if (idx[j] < 0) continue;
    w[std::size_t(j)] = dot(q, kv + std::int64_t(idx[j]) * dim, dim) * scale;
    nan_score |= std::isnan(w[std::size_t(j)]);
    max_score = std::fmax(max_score, w[std::size_t(j)]);
  }
  // A NaN score (a NaN query or row) makes the output NaN: fmax skips NaN, so scores that were
  // all NaN would otherwise look like "nothing to attend" and give zeros, hiding it.
  std::fill(out, out + dim, nan_score ? std::numeric_limits<float>::quiet_NaN() : 0.0f);
  if (nan_score || max_score == -std::numeric_limits<float>::infinity()) return;
  float denom = 0.0f;
  for (std::int64_t j = 0; j < k; ++j) {
    if (idx[j] < 0) continue;
    const float e = std::exp(w[std::size_t(j)] - max_score);
    denom += e;
    const float* row = kv + std::int64_t(idx[j]) * dim;
    for (std::int64_t d = 0; d < dim; ++d) out[d] += e * row[d];
  }
  denom += std::exp(sink - max_score);
  const float inv = 1.0f / denom;
  for (std::int64_t d = 0; d < dim; ++d) out[d] *= inv;
}

}  // namespace

tensor sparse_attention(const tensor& q, const tensor& kv, const tensor& sinks,
                        const tensor& indices, const sparse_attention_params& params) {
  check_cpu_tensor(q, dtype::f32, 3, "attention q");
  check_cpu_tensor(kv, dtype::f32, 2, "attention kv");
  check_cpu_tensor(indices, dtype::i32, 2, "attention indices");
  const std::int64_t tokens = q.size(0), heads = q.size(1), dim = q.size(2);
  const std::int64_t entries = kv.size(0), k = indices.size(1);
  DI_CHECK(kv.size(1) == dim, "attention: q head dim {} vs kv rows of {}", dim, kv.size(1));
  DI_CHECK(indices.size(0) == tokens, "attention: {} index rows for {} tokens", indices.size(0),
           tokens);
  check_tensor(sinks, dtype::f32, {heads}, "attention sinks");
  const std::int32_t* idx = indices.data<std::int32_t>();
  for (std::int64_t i = 0; i < tokens * k; ++i)
    DI_CHECK(idx[i] < entries, "attention: index {} outside {} kv rows", idx[i], entries);
  tensor out = tensor::empty({tokens, heads, dim}, dtype::f32);  // [tokens, heads, dim]
  const float* qp = q.data<float>();
  const float* kvp = kv.data<float>();
  const float* sink = sinks.data<float>();
  float* o = out.data<float>();
#pragma omp parallel for collapse(2) if (tokens * heads * k * dim > parallel_work)
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t h = 0; h < heads; ++h) {
      thread_local std::vector<float> w;
      attend_one(qp + (t * heads + h) * dim, kvp, idx + t * k, k, dim, sink[h],
                 params.softmax_scale, o + (t * heads + h) * dim, w);
    }
  }
  return out;
}

tensor index_scores(const tensor& q, const tensor& keys, const tensor& weights) {
  check_cpu_tensor(q, dtype::f32, 3, "index_scores q");
  check_cpu_tensor(keys, dtype::f32, 2, "index_scores keys");
  const std::int64_t tokens = q.size(0), heads = q.size(1), dim = q.size(2);
  const std::int64_t entries = keys.size(0);
  DI_CHECK(keys.size(1) == dim, "index_scores: q dim {} vs keys of {}", dim, keys.size(1));
  check_tensor(weights, dtype::f32, {tokens, heads}, "index_scores weights");
  tensor out = tensor::empty({tokens, entries}, dtype::f32);  // [tokens, entries]
  const float* qp = q.data<float>();
  const float* kp = keys.data<float>();
  const float* wp = weights.data<float>();
  float* o = out.data<float>();
#pragma omp parallel for collapse(2) if (tokens * entries * heads * dim > parallel_work)
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t e = 0; e < entries; ++e) {
      float sum = 0.0f;
      for (std::int64_t h = 0; h < heads; ++h) {
        const float s = dot(qp + (t * heads + h) * dim, kp + e * dim, dim);
        sum += std::fmax(s, 0.0f) * wp[t * heads + h];
      }
      o[t * entries + e] = sum;
    }
  }
  return out;
}

tensor topk(const tensor& scores, int k) {
  check_cpu_tensor(scores, dtype::f32, 2, "topk scores");
  const std::int64_t rows = scores.size(0), n = scores.size(1);
  DI_CHECK(k >= 0 && k <= n, "topk: k = {} of {} values", k, n);
  tensor out = tensor::empty({rows, k}, dtype::i32);  // [rows, k]
  const float* s = scores.data<float>();
  std::int32_t* o = out.data<std::int32_t>();
  std::vector<std::int32_t> order(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = s + r * n;
    std::iota(order.begin(), order.end(), 0);
    // Highest score first; equal scores keep the lower index first. NaN ranks below every
    // finite score but above -inf (a comparison with NaN in it is no strict weak order): a
    // router whose scores are all NaN still names experts, so the NaN reaches the logits and
    // fails that request, instead of an expert -1 failing the step.
    const auto rank = [row](std::int32_t i) {
      return std::isnan(row[i]) ? std::numeric_limits<float>::lowest() : row[i];
    };
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&rank](std::int32_t a, std::int32_t b) {
                        const float ra = rank(a), rb = rank(b);
                        return ra > rb || (ra == rb && a < b);
                      });
    for (int j = 0; j < k; ++j) {
      const std::int32_t i = order[std::size_t(j)];
      o[r * k + j] = row[i] == -std::numeric_limits<float>::infinity() ? -1 : i;
    }
  }
  return out;
}

tensor masked_topk(const tensor& scores, const tensor& visible, const tensor& allowed, int k) {
  check_cpu_tensor(scores, dtype::f32, 2, "masked_topk scores");
  const std::int64_t tokens = scores.size(0), entries = scores.size(1);
  check_tensor(visible, dtype::i64, {tokens}, "masked_topk visible counts");
  if (allowed.defined()) check_tensor(allowed, dtype::u8, {tokens, entries}, "masked_topk mask");
  tensor masked = scores.clone();  // [tokens, entries]
  constexpr float neg_inf = -std::numeric_limits<float>::infinity();
  for (std::int64_t t = 0; t < tokens; ++t) {
    float* row = masked.data<float>() + t * entries;
    for (std::int64_t e = 0; e < entries; ++e) {
      const bool hidden = e >= visible.data<std::int64_t>()[t] ||
                          (allowed.defined() && allowed.data<std::uint8_t>()[t * entries + e] == 0);
      if (hidden) row[e] = neg_inf;
    }
  }
  // The picks in ascending entry order, masked picks (-1) after them: the attention that
  // reads them does not care about their order, and a selection in entry order needs no sort
  // on the GPU.
  tensor out = topk(masked, k);  // [tokens, k], descending score
  std::int32_t* o = out.data<std::int32_t>();
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::int32_t* row = o + t * k;
    std::sort(row, row + k,
              [](std::int32_t a, std::int32_t b) { return a >= 0 && (b < 0 || a < b); });
  }
  return out;
}

tensor candidate_blocks(const tensor& scores, const tensor& visible, int topk_blocks,
                        int block_size) {
  check_cpu_tensor(scores, dtype::f32, 2, "candidate_blocks scores");
  const std::int64_t tokens = scores.size(0), entries = scores.size(1);
  check_tensor(visible, dtype::i64, {tokens}, "candidate_blocks visible counts");
  DI_CHECK(topk_blocks > 0 && block_size > 0, "candidate_blocks: top {} blocks of {}", topk_blocks,
           block_size);
  const std::int64_t blocks = (entries + block_size - 1) / block_size;
  constexpr float neg_inf = -std::numeric_limits<float>::infinity();
  tensor block_scores = tensor::full({tokens, blocks}, neg_inf);  // [tokens, blocks]
  for (std::int64_t t = 0; t < tokens; ++t) {
    const std::int64_t vis = visible.data<std::int64_t>()[t];
    float* b = block_scores.data<float>() + t * blocks;
    for (std::int64_t e = 0; e < std::min(vis, entries); ++e)
      b[e / block_size] = std::fmax(b[e / block_size], scores.data<float>()[t * entries + e]);
    // The block of the newest visible entry is partly filled: keep it regardless.
    if (vis > 0) b[(vis - 1) / block_size] = std::numeric_limits<float>::infinity();
  }
  const int k = int(std::min<std::int64_t>(topk_blocks, blocks));
  tensor picked = topk(block_scores, k);  // [tokens, k], -1 for unreachable blocks
  tensor keep = tensor::zeros({tokens, entries}, dtype::u8);  // [tokens, entries]
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (int j = 0; j < k; ++j) {
      const std::int32_t blk = picked.data<std::int32_t>()[t * k + j];
      if (blk < 0) continue;
      const std::int64_t end =
          std::min<std::int64_t>((blk + 1) * std::int64_t(block_size), entries);
      for (std::int64_t e = blk * std::int64_t(block_size); e < end; ++e)
        keep.data<std::uint8_t>()[t * entries + e] = 1;
    }
  }
  return keep;
}

}  // namespace di::cpu
