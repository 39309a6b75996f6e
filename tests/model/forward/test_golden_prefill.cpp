// Golden prefill tests of both checkpoints: logits at the 8 stored positions for variant A
// (official numerics) and B (no activation quantization), and the block outputs and final
// norm at the last prompt position.
#include "tests/model/forward/golden.hpp"

#include <doctest/doctest.h>

#include <fmt/format.h>

namespace di::test {
namespace {

struct prefill_result {
  std::vector<forward_output> outputs;
};

/// One-pass prefill of the prompt with logits at `rows` (captures the last row's hiddens).
forward_output prefill(golden_case& g, const std::vector<std::int64_t>& rows, bool capture) {
  const std::vector<std::int64_t> ids = g.i64("input_ids");
  kv_block_pool pool(g.model->layout(), 64);
  sequence_state state(pool, 1024);
  std::vector<std::int64_t> positions(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) positions[i] = std::int64_t(i);
  forward_request req;
  req.state = &state;
  req.tokens = ids;
  req.positions = positions;
  req.logit_rows = rows;
  req.capture_hidden = capture;
  if (g.model->config().is_v41()) {
    const tensor_view& h = g.expected->get("engram_hash_ids");
    req.engram_hash_ids = tensor::view_of(h.bytes.data(), tensor_shape(h.shape), dtype::i64);
  }
  std::vector<forward_request> batch{req};
  return std::move(g.model->forward(batch)[0]);
}

void check_logits(golden_case& g, const forward_output& out, const std::string& key) {
  const std::vector<std::int64_t> rows = g.i64("positions");
  const std::int64_t vocab = g.model->config().vocab_size;
  int passing = 0;
  row_figures worst{0.0, 1.0, 0.0};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::vector<float> want = g.f32_row(key, std::int64_t(i));
    const row_figures f = compare(out.logits.data<float>() + std::int64_t(i) * vocab, want.data(),
                                  std::size_t(vocab));
    MESSAGE(fmt::format("{} row {} (pos {}): max|d| {:.3e} cos {:.8f}", key, i, rows[i], f.max_abs,
                        f.cosine));
    passing += f.max_abs <= 1e-2 && f.cosine >= 0.99999;
    worst.max_abs = std::max(worst.max_abs, f.max_abs);
    worst.cosine = std::min(worst.cosine, f.cosine);
  }
  MESSAGE(fmt::format("{}: {}/8 rows pass; worst max|d| {:.3e}, worst cos {:.8f}", key, passing,
                      worst.max_abs, worst.cosine));
  CHECK(passing >= 7);
}

void check_prefill(const std::string& name) {
  golden_case& g = golden(name);
  g.model->set_options({true});
  const forward_output a = prefill(g, g.i64("positions"), true);
  check_logits(g, a, "logits_last");
  const model_config& c = g.model->config();
  const std::int64_t block = c.hc_mult * c.hidden_size, last = a.logits.size(0) - 1;
  const std::vector<float> hidden = g.f32("hidden_last");
  for (int l = 0; l < c.num_layers; ++l) {
    const row_figures f = compare(a.hidden.data<float>() + (last * c.num_layers + l) * block,
                                  hidden.data() + l * block, std::size_t(block));
    MESSAGE(fmt::format("{} hidden_last layer {}: rel L2 {:.3e}", name, l, f.rel_l2));
    CHECK(f.rel_l2 <= 1e-4);
  }
  const std::vector<float> fn = g.f32("final_norm_last");
  const row_figures f =
      compare(a.final_norm.data<float>() + last * c.hidden_size, fn.data(), fn.size());
  MESSAGE(fmt::format("{} final_norm_last: rel L2 {:.3e}", name, f.rel_l2));
  CHECK(f.rel_l2 <= 1e-4);

  g.model->set_options({false});
  const forward_output b = prefill(g, g.i64("positions"), true);
  check_logits(g, b, "logits_last_noactq");
  for (int l = 0; l < c.num_layers; ++l) {
    const row_figures f =
        compare(b.hidden.data<float>() + (last * c.num_layers + l) * block,
                a.hidden.data<float>() + (last * c.num_layers + l) * block, std::size_t(block));
    MESSAGE(fmt::format("{} B vs A layer {}: rel L2 {:.3e}", name, l, f.rel_l2));
  }
  g.model->set_options({true});
}

TEST_CASE("golden v41_public: prefill logits, hidden states, final norm (variants A and B)") {
  check_prefill("v41_public");
}

TEST_CASE("golden v4_public: prefill logits, hidden states, final norm (variants A and B)") {
  check_prefill("v4_public");
}

}  // namespace
}  // namespace di::test
