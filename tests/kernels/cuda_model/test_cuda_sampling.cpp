// GPU sampling against runtime::sampler on the same adjusted logits: greedy ties, temperature,
// top-k with ties, top-p, min-p and their combinations, rows with -inf entries, the real
// vocabulary size, seeded draws at many steps; and logsumexp for logprobs.
#include "gpu_test_util.hpp"
#include "kernels/cuda/cuda_model_ops.hpp"
#include "runtime/sampler.hpp"

#include <cmath>

namespace di {
namespace {

using test::dbuf;

TEST_CASE("cuda sample: the CPU sampler's tokens on every filter combination") {
  DI_REQUIRE_GPU();
  struct setting {
    double t, top_p, min_p;
    int top_k;
  };
  const setting settings[] = {{0.0, 1.0, 0.0, 0},  {1.0, 1.0, 0.0, 0},  {0.7, 1.0, 0.0, 50},
                              {1.0, 0.9, 0.0, 0},  {1.3, 1.0, 0.05, 0}, {0.8, 0.8, 0.02, 40},
                              {2.0, 0.5, 0.0, 2000}, {1.0, 0.3, 0.0, 1}};
  for (std::int64_t vocab : {1, 7, 1000, 129280}) {
    CAPTURE(vocab);
    const std::int64_t rows = 48;
    tensor logits = test::randn({rows, vocab}, 3.0f);
    for (std::int64_t i = 0; i < logits.numel(); ++i) {
      float& v = logits.data<float>()[i];
      if (i % 11 == 5) v = -INFINITY;         // masked tokens
      if (i % 7 == 2) v = std::round(v * 2) / 2;  // ties
    }
    for (std::int64_t r = 0; r < rows; ++r) logits.data<float>()[r * vocab] = 2.5f;  // a finite one
    std::vector<cuda::sample_row> cfg(static_cast<std::size_t>(rows));
    std::vector<runtime::sampling_params> params(static_cast<std::size_t>(rows));
    for (std::int64_t r = 0; r < rows; ++r) {
      const setting& s = settings[r % 8];
      auto& c = cfg[std::size_t(r)];
      c.temperature = s.t;
      c.top_p = s.top_p;
      c.min_p = s.min_p;
      c.top_k = s.top_k;
      c.seed = test::rng()();
      c.step = std::int64_t(test::rng()() % 1000);
      auto& pp = params[std::size_t(r)];
      pp.temperature = s.t;
      pp.top_p = s.top_p;
      pp.min_p = s.min_p;
      pp.top_k = s.top_k > vocab ? int(vocab) : s.top_k;
      c.top_k = pp.top_k;
    }
    const dbuf dl(logits), dc(cfg.data(), cfg.size() * sizeof(cuda::sample_row));
    dbuf tok(std::size_t(rows) * 4), lse(std::size_t(rows) * 4);
    cuda::launch_sample({dl.get<float>(), dc.get<cuda::sample_row>(), tok.get<std::int32_t>(),
                         lse.get<float>(), rows, vocab},
                        nullptr);
    const tensor got = tok.to_host({rows}, dtype::i32);
    const tensor got_lse = lse.to_host({rows}, dtype::f32);
    runtime::sampler sampler;
    for (std::int64_t r = 0; r < rows; ++r) {
      CAPTURE(r);
      const std::span<const float> row(logits.data<float>() + r * vocab, std::size_t(vocab));
      runtime::sample_request req;
      req.logits = row;
      req.params = &params[std::size_t(r)];
      req.seed = cfg[std::size_t(r)].seed;
      req.step = cfg[std::size_t(r)].step;
      CHECK(got.data<std::int32_t>()[r] == sampler.sample(req).token_id);
      double s = 0.0, m = -INFINITY;
      for (float v : row) m = std::max(m, double(v));
      for (float v : row)
        if (v > -INFINITY) s += std::exp(double(v) - m);
      CHECK(got_lse.data<float>()[r] == doctest::Approx(m + std::log(s)).epsilon(1e-6));
    }
  }
}

}  // namespace
}  // namespace di
