// GPU sampling against runtime::sampler on the same adjusted logits: greedy ties, temperature,
// top-k with ties, top-p, min-p and their combinations, rows with -inf entries, the real
// vocabulary size, seeded draws at many steps; and logsumexp for logprobs.
#include "gpu_test_util.hpp"
#include "kernels/cuda/cuda_model_ops.hpp"
#include "kernels/cuda/cuda_model_twins.hpp"
#include "runtime/logits_processors.hpp"
#include "runtime/sampler.hpp"
#include "runtime/token_counts.hpp"

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

namespace di {
namespace {

TEST_CASE("cuda logit edits: mask, suppression and penalties bit-equal to the CPU's") {
  DI_REQUIRE_GPU();
  const std::int64_t rows = 6, vocab = 5003, words = (vocab + 31) / 32;
  tensor logits = test::randn({rows, vocab}, 4.0f);
  std::vector<std::uint32_t> mask(std::size_t(rows * words));
  for (auto& w : mask) w = std::uint32_t(test::rng()()) | std::uint32_t(test::rng()());
  std::vector<std::int64_t> sup_off{0}, seen_off{0};
  std::vector<std::int32_t> sup_ids, seen_ids, seen_out;
  std::vector<cuda::penalty_row> pen(static_cast<std::size_t>(rows));
  std::vector<runtime::token_counts> counts(static_cast<std::size_t>(rows));
  std::vector<runtime::sampling_params> params(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (int j = 0; j < 3; ++j) sup_ids.push_back(std::int32_t(test::rng()() % vocab));
    sup_off.push_back(std::int64_t(sup_ids.size()));
    auto& c = counts[std::size_t(r)];
    for (int j = 0; j < 200; ++j) c.add_prompt_token(std::int32_t(test::rng()() % vocab));
    for (int j = 0; j < 100; ++j) c.add_output_token(std::int32_t(test::rng()() % 400));
    for (const auto& e : c.entries()) {
      seen_ids.push_back(e.id);
      seen_out.push_back(e.num_output);
    }
    seen_off.push_back(std::int64_t(seen_ids.size()));
    auto& p = params[std::size_t(r)];
    p.repetition_penalty = 1.0 + 0.1 * double(r);
    p.frequency_penalty = 0.3 * double(r % 3);
    p.presence_penalty = 0.7 - 0.2 * double(r);
    pen[std::size_t(r)] = {p.repetition_penalty, p.frequency_penalty, p.presence_penalty};
  }
  tensor want = logits.clone();
  for (std::int64_t r = 0; r < rows; ++r) {
    std::span<float> row(want.data<float>() + r * vocab, std::size_t(vocab));
    runtime::apply_allowed_mask(row, {mask.data() + r * words, std::size_t(words)});
    runtime::suppress_tokens(row, {sup_ids.data() + sup_off[std::size_t(r)],
                                   std::size_t(sup_off[std::size_t(r) + 1] - sup_off[std::size_t(r)])});
    runtime::apply_penalties(row, counts[std::size_t(r)], params[std::size_t(r)]);
  }
  dbuf dl(logits);
  const dbuf dm(mask.data(), mask.size() * 4), dso(sup_off.data(), sup_off.size() * 8),
      dsi(sup_ids.data(), sup_ids.size() * 4), dpo(seen_off.data(), seen_off.size() * 8),
      dpi(seen_ids.data(), seen_ids.size() * 4), dpn(seen_out.data(), seen_out.size() * 4),
      dpr(pen.data(), pen.size() * sizeof(cuda::penalty_row));
  cuda::logit_edit_params p;
  p.logits = dl.get<float>();
  p.rows = rows;
  p.vocab = vocab;
  p.allowed = dm.get<std::uint32_t>();
  p.suppressed_offsets = dso.get<std::int64_t>();
  p.suppressed_ids = dsi.get<std::int32_t>();
  p.seen_offsets = dpo.get<std::int64_t>();
  p.seen_ids = dpi.get<std::int32_t>();
  p.seen_num_output = dpn.get<std::int32_t>();
  p.penalties = dpr.get<cuda::penalty_row>();
  cuda::launch_logit_edits(p, nullptr);
  CHECK(test::bytes_equal(dl.to_host(want.shape(), dtype::f32), want));
}

}  // namespace
}  // namespace di

namespace di {
namespace {

TEST_CASE("cuda::sample_tokens: device logits in, device tokens out") {
  DI_REQUIRE_GPU();
  const device dev{device_kind::cuda, 0};
  const tensor logits = test::randn({5, 3000}, 2.0f);
  std::vector<cuda::sample_row> cfg(5);
  std::vector<runtime::sampling_params> params(5);
  for (int r = 0; r < 5; ++r) {
    cfg[std::size_t(r)] = {r == 0 ? 0.0 : 0.9, 0.95, 0.0, 100, 1234u + unsigned(r), r};
    params[std::size_t(r)].temperature = cfg[std::size_t(r)].temperature;
    params[std::size_t(r)].top_p = 0.95;
    params[std::size_t(r)].top_k = 100;
  }
  tensor lse;
  const tensor tokens = cuda::sample_tokens(logits.to(dev), cfg, &lse).to(cpu_device);
  CHECK(lse.dev() == dev);
  runtime::sampler sampler;
  for (int r = 0; r < 5; ++r) {
    runtime::sample_request req;
    req.logits = {logits.data<float>() + r * 3000, 3000};
    req.params = &params[std::size_t(r)];
    req.seed = cfg[std::size_t(r)].seed;
    req.step = cfg[std::size_t(r)].step;
    CHECK(tokens.data<std::int32_t>()[r] == sampler.sample(req).token_id);
  }
}

}  // namespace
}  // namespace di
