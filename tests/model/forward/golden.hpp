// Shared helpers of the golden forward tests: the two reference checkpoints under
// ../shared/testdata/golden, their expected.safetensors read through di::checkpoint, and the
// per-row comparison figures the golden README asks for (max |d|, cosine, relative L2).
#pragma once

#include "model/checkpoint/checkpoint.hpp"
#include "model/forward/model.hpp"
#include "tests/test_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace di::test {

/// One golden folder: the model (variant A by default), its expected outputs.
struct golden_case {
  std::unique_ptr<deepseek_model> model;
  std::unique_ptr<checkpoint> expected;

  std::vector<std::int64_t> i64(const std::string& name) const {
    const tensor_view& v = expected->get(name);
    std::vector<std::int64_t> out(std::size_t(v.num_elements()));
    std::memcpy(out.data(), v.bytes.data(), v.bytes.size());
    return out;
  }
  std::vector<float> f32(const std::string& name) const {
    const tensor_view& v = expected->get(name);
    std::vector<float> out(std::size_t(v.num_elements()));
    std::memcpy(out.data(), v.bytes.data(), v.bytes.size());
    return out;
  }
  /// Row `r` of a [rows, n] expected tensor.
  std::vector<float> f32_row(const std::string& name, std::int64_t r) const {
    const tensor_view& v = expected->get(name);
    const std::int64_t n = v.shape.back();
    std::vector<float> out(static_cast<std::size_t>(n));
    std::memcpy(out.data(), v.bytes.data() + r * n * 4, std::size_t(n) * 4);
    return out;
  }
};

/// Loads (once per process) the golden folder `name` ("v41_public" or "v4_public").
inline golden_case& golden(const std::string& name) {
  static std::map<std::string, golden_case> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  const auto dir = shared_path("testdata/golden/" + name);
  golden_case g;
  g.model = deepseek_model::load(dir);
  g.expected = std::make_unique<checkpoint>(dir / "expected.safetensors");
  if (g.model->config().is_v41()) {
    // The official token map (stored with the outputs), so hashing needs no tokenizer here.
    const tensor_view& v = g.expected->get("engram_token_map");
    engram_token_map map;
    map.map.resize(std::size_t(v.num_elements()));
    std::memcpy(map.map.data(), v.bytes.data(), v.bytes.size());
    for (std::int32_t id : map.map)
      map.num_compressed = std::max<std::int64_t>(map.num_compressed, id + 1);
    g.model->set_engram_hasher(
        std::make_shared<const engram_hasher>(g.model->config().engram, std::move(map)));
  }
  return cache.emplace(name, std::move(g)).first->second;
}

struct row_figures {
  double max_abs = 0.0;
  double cosine = 1.0;
  double rel_l2 = 0.0;
  double mean_abs = 0.0;
};

inline row_figures compare(const float* got, const float* want, std::size_t n) {
  double dot = 0, gg = 0, ww = 0, dd = 0, mx = 0, sum_abs = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = double(got[i]) - double(want[i]);
    mx = std::max(mx, std::fabs(d));
    sum_abs += std::fabs(d);
    dot += double(got[i]) * want[i];
    gg += double(got[i]) * got[i];
    ww += double(want[i]) * want[i];
    dd += d * d;
  }
  return {mx, dot / std::sqrt(gg * ww), std::sqrt(dd / ww), sum_abs / double(n)};
}

/// A request for `tokens` continuing `state`, with logits at `rows`.
inline forward_request request_for(sequence_state& state, std::span<const std::int64_t> tokens,
                                   std::vector<std::int64_t>& positions,
                                   std::vector<std::int64_t> rows, bool capture = false) {
  positions.resize(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i)
    positions[i] = state.num_tokens() + std::int64_t(i);
  forward_request r;
  r.state = &state;
  r.tokens = tokens;
  r.positions = positions;
  r.logit_rows = std::move(rows);
  r.capture_hidden = capture;
  return r;
}

/// Runs one request and returns its output.
inline forward_output run_one(const deepseek_model& m, forward_request r) {
  std::vector<forward_request> batch{std::move(r)};
  return std::move(m.forward(batch)[0]);
}

inline std::int64_t argmax(const float* v, std::size_t n) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return std::int64_t(best);
}

}  // namespace di::test
