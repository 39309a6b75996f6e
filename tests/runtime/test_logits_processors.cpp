// Logit edits before sampling: penalties against hand-computed values, the allowed-token mask,
// suppressed tokens, the invalid-logit check, and the sparse token counts they read.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/logits_processors.hpp"
#include "tests/runtime/sampling_test_util.hpp"

using namespace di::runtime;
using di::test::error_of;
using di::test::mask_of;

namespace {
constexpr float inf = std::numeric_limits<float>::infinity();
}  // namespace

TEST_CASE("token counts keep one entry per distinct token, split by prompt and output") {
  const std::vector<std::int32_t> prompt = {5, 7, 5, 9};
  token_counts counts(prompt);
  counts.add_output_token(7);
  counts.add_output_token(11);
  counts.add_output_token(11);
  CHECK(counts.entries().size() == 4);
  CHECK(counts.num_prompt(5) == 2);
  CHECK(counts.num_output(5) == 0);
  CHECK(counts.num_prompt(7) == 1);
  CHECK(counts.num_output(7) == 1);
  CHECK(counts.num_output(11) == 2);
  CHECK(counts.num_prompt(11) == 0);
  CHECK(counts.num_output(4) == 0);
  CHECK(counts.num_output_tokens() == 3);
  CHECK(error_of([&] { counts.add_output_token(-1); }) == "token id must be >= 0, got -1");
}

TEST_CASE("penalties change exactly the seen tokens, as HF and OpenAI specify") {
  // Token 1: prompt only. Token 2: prompt and once in the output. Token 3: output, 3 times.
  // Token 4: output once with a zero logit. Token 0 and 5: never seen.
  std::vector<float> logits = {1.0f, 2.0f, -1.0f, 0.6f, 0.0f, -3.0f};
  const std::vector<std::int32_t> prompt = {1, 1, 2};
  token_counts counts(prompt);
  for (std::int32_t id : {2, 3, 3, 3, 4}) counts.add_output_token(id);
  sampling_params p;
  p.repetition_penalty = 1.5;
  p.presence_penalty = 0.5;
  p.frequency_penalty = 0.25;
  apply_penalties(logits, counts, p);
  CHECK(logits[0] == 1.0f);
  CHECK(logits[1] == static_cast<float>(2.0 / 1.5));                      // divided
  CHECK(logits[2] == static_cast<float>(-1.0 * 1.5 - (0.25 * 1 + 0.5)));  // multiplied
  CHECK(logits[3] == static_cast<float>(double(0.6f) / 1.5 - (0.25 * 3 + 0.5)));
  CHECK(logits[4] == static_cast<float>(0.0 - (0.25 * 1 + 0.5)));
  CHECK(logits[5] == -3.0f);
  // The same numbers worked by hand.
  CHECK(logits[1] == doctest::Approx(1.333333).epsilon(1e-6));
  CHECK(logits[2] == -2.25f);
  CHECK(logits[3] == doctest::Approx(-0.85).epsilon(1e-6));
  CHECK(logits[4] == -0.75f);
}

TEST_CASE("negative presence and frequency penalties raise logits; -inf stays -inf") {
  std::vector<float> logits = {0.5f, -inf, 2.0f};
  token_counts counts;
  for (std::int32_t id : {0, 0, 1}) counts.add_output_token(id);
  sampling_params p;
  p.presence_penalty = -1;
  p.frequency_penalty = -2;
  apply_penalties(logits, counts, p);
  CHECK(logits[0] == static_cast<float>(0.5 + 2 * 2 + 1));
  CHECK(logits[1] == -inf);
  CHECK(logits[2] == 2.0f);
}

TEST_CASE("a penalized token outside the vocabulary is a clear error") {
  std::vector<float> logits(4, 0.0f);
  token_counts counts;
  counts.add_output_token(4);
  sampling_params p;
  p.presence_penalty = 1;
  CHECK(error_of([&] { apply_penalties(logits, counts, p); }) ==
        "penalized token id 4 is outside the vocabulary [0, 4)");
}

TEST_CASE("the allowed-token mask uses xgrammar's bit layout") {
  constexpr std::int64_t vocab = 70;  // three words, the last one partial
  std::vector<float> logits(vocab, 1.0f);
  const std::vector<std::int32_t> allowed = {0, 31, 32, 63, 64, 69};
  apply_allowed_mask(logits, mask_of(vocab, allowed));
  for (std::int32_t i = 0; i < vocab; ++i) {
    const bool is_allowed = std::find(allowed.begin(), allowed.end(), i) != allowed.end();
    CAPTURE(i);
    CHECK(logits[i] == (is_allowed ? 1.0f : -inf));
  }
  CHECK(allowed_mask_words(vocab) == 3);
  CHECK(allowed_mask_words(64) == 2);
  std::vector<std::uint32_t> short_mask(2, ~0u);
  CHECK(error_of([&] { apply_allowed_mask(logits, short_mask); }) ==
        "allowed-token mask has 2 words, a vocabulary of 70 needs 3");
}

TEST_CASE("suppressed tokens get -inf; ids outside the vocabulary are rejected") {
  std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  const std::vector<std::int32_t> ids = {2, 0};
  suppress_tokens(logits, ids);
  CHECK(logits == std::vector<float>{-inf, 2.0f, -inf});
  const std::vector<std::int32_t> bad = {3};
  CHECK(error_of([&] { suppress_tokens(logits, bad); }) ==
        "suppressed token id 3 is outside the vocabulary [0, 3)");
}

TEST_CASE("NaN and +inf logits are rejected with the offending token; -inf is fine") {
  std::vector<float> logits = {0.0f, -inf, 1.0f, 2.0f};
  CHECK(error_of([&] { check_logits_row(logits); }) == "");
  logits[2] = std::numeric_limits<float>::quiet_NaN();
  CHECK(error_of([&] { check_logits_row(logits); }) ==
        "logits hold nan at token 2: the model produced invalid scores, refusing to sample");
  logits[2] = inf;
  CHECK(error_of([&] { check_logits_row(logits); }) ==
        "logits hold inf at token 2: the model produced invalid scores, refusing to sample");
}
