// Logprobs: equal to an independent long-double log_softmax of the raw logits, top-N sorted
// (ties by lower id), the chosen token's logprob and rank reported even outside the top-N, raw
// (unaffected by temperature, penalties and masks), and vLLM's prompt_logprobs convention.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/logprobs.hpp"
#include "runtime/sampler.hpp"
#include "tests/runtime/sampling_test_util.hpp"

using namespace di::runtime;
using di::test::deepseek_vocab_size;
using di::test::error_of;
using di::test::make_request;
using di::test::mask_of;
using di::test::random_logits;

namespace {

/// log_softmax by the definition, without max subtraction, in long double.
std::vector<double> reference_log_softmax(std::span<const float> logits) {
  long double total = 0;
  for (float l : logits) total += std::exp(static_cast<long double>(l));
  std::vector<double> out;
  for (float l : logits) out.push_back(double(static_cast<long double>(l) - std::log(total)));
  return out;
}

/// Checks `got` against the reference: the token's logprob and rank, and the top-N list.
void check_against_reference(const position_logprobs& got, std::span<const float> logits,
                             int num_top) {
  const std::vector<double> ref = reference_log_softmax(logits);
  CHECK(std::abs(got.logprob - ref[got.id]) < 1e-5);
  std::int64_t rank = 0;
  for (float l : logits) rank += l >= logits[got.id];
  CHECK(got.rank == rank);
  REQUIRE(got.top.size() == static_cast<std::size_t>(num_top));
  for (std::size_t i = 0; i < got.top.size(); ++i) {
    CHECK(std::abs(got.top[i].logprob - ref[got.top[i].id]) < 1e-5);
    if (i > 0) CHECK(got.top[i - 1].logprob >= got.top[i].logprob);
  }
  // Nothing outside the list beats its last entry.
  const std::int32_t last = got.top.back().id;
  for (std::int32_t id = 0; id < std::int32_t(logits.size()); ++id) {
    bool is_listed = false;
    for (const token_logprob& t : got.top) is_listed |= t.id == id;
    if (!is_listed)
      CHECK(!(logits[id] > logits[last] || (logits[id] == logits[last] && id < last)));
  }
}

}  // namespace

TEST_CASE("logprobs equal an independent log_softmax, top-N sorted descending") {
  const std::vector<float> logits = random_logits(1000, 31, 4.0);
  for (int num_top : {1, 5, 20, 100}) {
    CAPTURE(num_top);
    check_against_reference(compute_logprobs(logits, 17, num_top), logits, num_top);
  }
  const std::vector<float> big = random_logits(deepseek_vocab_size, 32, 3.0);
  check_against_reference(compute_logprobs(big, 4242, 20), big, 20);
  const position_logprobs none = compute_logprobs(logits, 3, 0);
  CHECK(none.top.empty());
}

TEST_CASE("top-N ties are listed by lower id and ranks count ties against the token") {
  const std::vector<float> logits = {1, 3, 2, 3, -1, 3};
  const position_logprobs lp = compute_logprobs(logits, 5, 4);
  REQUIRE(lp.top.size() == 4);
  CHECK(lp.top[0].id == 1);
  CHECK(lp.top[1].id == 3);
  CHECK(lp.top[2].id == 5);
  CHECK(lp.top[3].id == 2);
  CHECK(lp.rank == 3);  // vLLM: the number of tokens with a logprob >= the token's
  CHECK(compute_logprobs(logits, 4, 0).rank == 6);
  CHECK(compute_logprobs(logits, 2, 0).rank == 4);
}

TEST_CASE("huge and -inf logits give finite, exact logprobs") {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {1000.0f, 999.0f, neg_inf, 998.0f};
  const position_logprobs lp = compute_logprobs(logits, 1, 4);
  const double lse = 1000.0 + std::log(1 + std::exp(-1.0) + std::exp(-2.0));
  CHECK(lp.logprob == doctest::Approx(999.0 - lse).epsilon(1e-7));
  CHECK(lp.top[3].id == 2);
  CHECK(lp.top[3].logprob == neg_inf);
  const std::vector<float> dead = {neg_inf, neg_inf};
  CHECK(error_of([&] { compute_logprobs(dead, 0, 1); }) ==
        "every logit of the row is -inf: no distribution to report logprobs from");
  std::vector<float> bad = {0.0f, std::numeric_limits<float>::quiet_NaN()};
  CHECK(error_of([&] { compute_logprobs(bad, 0, 1); }).find("nan at token 1") != std::string::npos);
  CHECK(error_of([&] { compute_logprobs(logits, 4, 1); }) ==
        "token id 4 is outside the vocabulary [0, 4)");
}

TEST_CASE("sampled-token logprobs are raw and reported even outside the top-N") {
  sampler s;
  const std::vector<float> logits = random_logits(500, 33);
  // Only the least likely token is allowed, and the sampling settings distort the row.
  const auto least = std::min_element(logits.begin(), logits.end()) - logits.begin();
  const auto mask = mask_of(500, {std::int32_t(least)});
  sampling_params p;
  p.temperature = 0.3;
  p.repetition_penalty = 1.7;
  p.logprobs = 5;
  token_counts counts;
  counts.add_output_token(std::int32_t(least));
  sample_request r = make_request(logits, p, 8, 2);
  r.allowed_mask = mask;
  r.counts = &counts;
  const sample_result result = s.sample(r);
  CHECK(result.token_id == least);
  REQUIRE(result.logprobs.has_value());
  CHECK(result.logprobs->id == least);
  CHECK(result.logprobs->rank == 500);
  check_against_reference(*result.logprobs, logits, 5);
  p.logprobs.reset();
  CHECK_FALSE(s.sample(r).logprobs.has_value());
}

TEST_CASE("prompt logprobs: entry 0 is null, entry i scores token i under row i - 1") {
  constexpr std::int64_t vocab = 300;
  const std::vector<std::int32_t> prompt = {7, 250, 3, 3, 99};
  std::vector<float> rows;  // [4, vocab]
  for (std::uint32_t r = 0; r < 4; ++r) {
    const std::vector<float> row = random_logits(vocab, 40 + r);
    rows.insert(rows.end(), row.begin(), row.end());
  }
  const auto out = compute_prompt_logprobs(rows, vocab, prompt, 3);
  REQUIRE(out.size() == prompt.size());
  CHECK_FALSE(out[0].has_value());
  for (std::size_t i = 1; i < prompt.size(); ++i) {
    REQUIRE(out[i].has_value());
    CHECK(out[i]->id == prompt[i]);
    const std::span<const float> row(rows.data() + (i - 1) * vocab, vocab);
    check_against_reference(*out[i], row, 3);
  }
  const std::vector<std::int32_t> single = {5};
  const auto one = compute_prompt_logprobs({}, vocab, single, 3);
  REQUIRE(one.size() == 1);
  CHECK_FALSE(one[0].has_value());
  CHECK(error_of([&] { compute_prompt_logprobs(rows, vocab, single, 3); }) ==
        "prompt logprobs need 0 rows of 300 logits for a 1-token prompt, got 1200 values");
}
