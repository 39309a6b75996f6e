// The sampler's contract: greedy argmax with the lowest-id tie-break, reproducible seeded draws
// that depend only on (seed, step), masks and suppression respected, penalties applied, and
// clear errors (never garbage) for invalid rows.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "runtime/detail/row_reduce.hpp"
#include "runtime/sampler.hpp"
#include "runtime/sampling_rng.hpp"
#include "tests/runtime/sampling_test_util.hpp"

using namespace di::runtime;
using di::test::deepseek_vocab_size;
using di::test::error_of;
using di::test::make_request;
using di::test::mask_of;
using di::test::random_logits;

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();

sampling_params greedy() {
  sampling_params p;
  p.temperature = 0;
  return p;
}

/// `num_steps` tokens sampled from `rows[step % rows.size()]` with one seed.
std::vector<std::int32_t> sample_sequence(sampler& s, const std::vector<std::vector<float>>& rows,
                                          const sampling_params& p, std::uint64_t seed,
                                          int num_steps) {
  std::vector<std::int32_t> out;
  for (int step = 0; step < num_steps; ++step) {
    out.push_back(s.sample(make_request(rows[step % rows.size()], p, seed, step)).token_id);
  }
  return out;
}

}  // namespace

TEST_CASE("greedy takes the argmax, the lowest id on ties, whatever the seed") {
  sampler s;
  const sampling_params p = greedy();
  const std::vector<float> distinct = {0.1f, 3.0f, -2.0f, 2.9f};
  const std::vector<float> tied = {1.0f, 5.0f, 2.0f, 5.0f, 5.0f};
  const std::vector<float> last = {-inf, -inf, -1.0f};
  for (std::uint64_t seed : {0ull, 1ull, 99ull}) {
    CHECK(s.sample(make_request(distinct, p, seed)).token_id == 1);
    CHECK(s.sample(make_request(tied, p, seed, 5)).token_id == 1);
    CHECK(s.sample(make_request(last, p, seed)).token_id == 2);
  }
  const std::vector<float> big = random_logits(deepseek_vocab_size, 3);
  const auto best = std::max_element(big.begin(), big.end()) - big.begin();
  CHECK(s.sample(make_request(big, p)).token_id == best);
  const token_distribution d = s.distribution(make_request(tied, p));
  CHECK(d.ids == std::vector<std::int32_t>{1});
  CHECK(d.probs == std::vector<double>{1.0});
}

TEST_CASE("argmax finds the lowest id of the maximum at every length and lane position") {
  std::mt19937 gen(5);
  std::uniform_int_distribution<int> level(0, 3);
  for (std::size_t n = 1; n <= 70; ++n) {
    for (int trial = 0; trial < 30; ++trial) {
      std::vector<float> row(n);
      for (float& x : row) x = level(gen) == 0 ? -inf : float(level(gen));  // many ties
      const auto expected = std::max_element(row.begin(), row.end()) - row.begin();
      CAPTURE(n);
      CHECK(argmax_lowest_id(row) == expected);
      CHECK(detail::max_logit(row) == row[expected]);
    }
  }
  const std::vector<float> dead(20, -inf);
  CHECK(argmax_lowest_id(dead) == 0);
}

TEST_CASE("greedy ignores top-k, top-p and min-p; penalties still apply") {
  sampler s;
  sampling_params p = greedy();
  p.top_k = 1;
  p.top_p = 0.1;
  p.min_p = 0.9;
  const std::vector<float> logits = {1.0f, 3.0f, 2.5f};
  CHECK(s.sample(make_request(logits, p)).token_id == 1);
  token_counts counts;
  counts.add_output_token(1);
  p.presence_penalty = 1;  // 3.0 - 1 < 2.5
  sample_request r = make_request(logits, p);
  r.counts = &counts;
  CHECK(s.sample(r).token_id == 2);
}

TEST_CASE("the same seed gives the same sequence; the step, not the call count, drives it") {
  sampler s;
  sampling_params p;
  p.temperature = 0.8;
  p.top_p = 0.95;
  const std::vector<std::vector<float>> rows = {random_logits(5000, 1), random_logits(5000, 2)};
  const auto a = sample_sequence(s, rows, p, 1234, 60);
  sampler other;
  for (int i = 0; i < 7; ++i) other.sample(make_request(rows[0], p, 999, i));  // unrelated use
  const auto b = sample_sequence(other, rows, p, 1234, 60);
  CHECK(a == b);
  CHECK(std::set<std::int32_t>(a.begin(), a.end()).size() > 10);  // really random
  // Recomputing one step alone (e.g. after preemption) gives the same token.
  CHECK(s.sample(make_request(rows[37 % 2], p, 1234, 37)).token_id == a[37]);
  CHECK(sample_sequence(s, rows, p, 1235, 60) != a);
}

TEST_CASE("different seeds give different tokens on a 129K-vocabulary row") {
  sampler s;
  sampling_params p;
  const std::vector<float> logits = random_logits(deepseek_vocab_size, 11);
  std::set<std::int32_t> tokens;
  for (std::uint64_t seed = 0; seed < 50; ++seed) {
    tokens.insert(s.sample(make_request(logits, p, seed)).token_id);
  }
  CHECK(tokens.size() >= 45);
}

TEST_CASE("a row's token does not depend on the other rows of the batch") {
  sampler s;
  sampling_params hot;
  hot.temperature = 1.3;
  sampling_params cold;
  cold.temperature = 0.2;
  cold.top_k = 5;
  const std::vector<float> mine = random_logits(3000, 5);
  const std::vector<float> other = random_logits(3000, 6);
  const std::int32_t alone = s.sample(make_request(mine, hot, 77, 3)).token_id;
  for (int composition = 0; composition < 4; ++composition) {
    std::vector<sample_request> batch;
    for (int i = 0; i < composition; ++i) batch.push_back(make_request(other, cold, i, i));
    batch.push_back(make_request(mine, hot, 77, 3));
    batch.push_back(make_request(other, hot, 78, 3));
    const auto outcomes = s.sample_batch(batch);
    REQUIRE(outcomes[composition].is_ok());
    CHECK(outcomes[composition].result.token_id == alone);
  }
}

TEST_CASE("the allowed-token mask is respected by greedy and random sampling") {
  sampler s;
  const std::vector<float> logits = random_logits(1000, 8);
  const std::vector<std::int32_t> allowed = {3, 200, 511, 999};
  const auto mask = mask_of(1000, allowed);
  for (double temperature : {0.0, 1.0, 5.0}) {
    sampling_params p;
    p.temperature = temperature;
    std::set<std::int32_t> seen;
    for (std::uint64_t seed = 0; seed < 400; ++seed) {
      sample_request r = make_request(logits, p, seed);
      r.allowed_mask = mask;
      seen.insert(s.sample(r).token_id);
    }
    CAPTURE(temperature);
    for (std::int32_t id : seen) CHECK(std::count(allowed.begin(), allowed.end(), id) == 1);
    if (temperature >= 5.0) CHECK(seen.size() == allowed.size());
  }
}

TEST_CASE("suppressed tokens are never sampled; suppressing everything is an error") {
  sampler s;
  sampling_params p;
  const std::vector<float> logits = {5.0f, 0.0f, 4.0f};
  const std::vector<std::int32_t> suppressed = {0, 2};
  for (std::uint64_t seed = 0; seed < 50; ++seed) {
    sample_request r = make_request(logits, p, seed);
    r.suppressed_ids = suppressed;
    CHECK(s.sample(r).token_id == 1);
  }
  const std::vector<std::int32_t> all = {0, 1, 2};
  sample_request r = make_request(logits, p);
  r.suppressed_ids = all;
  CHECK(error_of([&] { s.sample(r); }).find("no token can be sampled") == 0);
}

TEST_CASE("a fully masked row is a clear error") {
  sampler s;
  const std::vector<float> logits = random_logits(100, 9);
  const auto mask = mask_of(100, {});
  for (double temperature : {0.0, 1.0}) {
    sampling_params p;
    p.temperature = temperature;
    sample_request r = make_request(logits, p);
    r.allowed_mask = mask;
    CHECK(error_of([&] { s.sample(r); }) ==
          "no token can be sampled: the allowed-token mask and suppressed tokens exclude every "
          "token of the vocabulary");
  }
  // Allowed tokens whose logits are all -inf leave nothing either.
  std::vector<float> dead = logits;
  dead[4] = -inf;
  sampling_params p;
  sample_request r = make_request(dead, p);
  const auto only_dead = mask_of(100, {4});
  r.allowed_mask = only_dead;
  CHECK(error_of([&] { s.sample(r); }).find("no token can be sampled") == 0);
}

TEST_CASE("invalid rows and requests are clear errors, never a token") {
  sampler s;
  sampling_params p;
  std::vector<float> logits = random_logits(64, 10);
  logits[17] = std::numeric_limits<float>::quiet_NaN();
  CHECK(error_of([&] { s.sample(make_request(logits, p)); }) ==
        "logits hold nan at token 17: the model produced invalid scores, refusing to sample");
  const sampling_params g = greedy();
  CHECK(error_of([&] { s.sample(make_request(logits, g)); }).find("nan at token 17") !=
        std::string::npos);
  const std::vector<float> all_neg_inf(8, -inf);
  CHECK(error_of([&] { s.sample(make_request(all_neg_inf, p)); }) ==
        "every logit of the row is -inf: nothing can be sampled");
  const std::vector<float> empty;
  CHECK(error_of([&] { s.sample(make_request(empty, p)); }) ==
        "cannot sample from an empty logits row");
  const std::vector<float> ok = random_logits(64, 12);
  sample_request no_params;
  no_params.logits = ok;
  CHECK(error_of([&] { s.sample(no_params); }) == "sample_request has no sampling_params");
  sampling_params bad;
  bad.top_p = std::nan("");
  CHECK(error_of([&] { s.sample(make_request(ok, bad)); }) == "top_p must be in (0, 1], got nan");
  CHECK(error_of([&] { s.sample(make_request(ok, p, 0, -1)); }) ==
        "sampling step must be >= 0, got -1");
  sample_request wrong_mask = make_request(ok, p);
  const std::vector<std::uint32_t> mask(3, ~0u);
  wrong_mask.allowed_mask = mask;
  CHECK(error_of([&] { s.sample(wrong_mask); }) ==
        "allowed-token mask has 3 words, a vocabulary of 64 needs 2");
}

TEST_CASE("a failing row of a batch reports its error and the other rows still sample") {
  sampler s;
  sampling_params p;
  const std::vector<float> good = random_logits(256, 13);
  std::vector<float> bad = good;
  bad[3] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<sample_request> batch = {make_request(good, p, 1), make_request(bad, p, 2),
                                             make_request(good, p, 3)};
  const auto outcomes = s.sample_batch(batch);
  REQUIRE(outcomes.size() == 3);
  CHECK(outcomes[0].is_ok());
  CHECK_FALSE(outcomes[1].is_ok());
  CHECK(outcomes[1].error.find("nan at token 3") != std::string::npos);
  CHECK(outcomes[2].is_ok());
  CHECK(outcomes[0].result.token_id == s.sample(batch[0]).token_id);
  CHECK(outcomes[2].result.token_id == s.sample(batch[2]).token_id);
}

TEST_CASE("penalties steer random sampling away from repeated tokens") {
  sampler s;
  sampling_params p;
  p.frequency_penalty = 2;
  p.presence_penalty = 2;
  const std::vector<float> logits = {3.0f, 0.0f, 0.0f, 0.0f};
  token_counts counts;
  for (int i = 0; i < 3; ++i) counts.add_output_token(0);  // 3 - 2*3 - 2 = -5
  int num_zero_penalized = 0, num_zero_plain = 0;
  for (std::uint64_t seed = 0; seed < 1000; ++seed) {
    sample_request r = make_request(logits, p, seed);
    num_zero_plain += s.sample(r).token_id == 0;
    r.counts = &counts;
    num_zero_penalized += s.sample(r).token_id == 0;
  }
  // Plain: p(0) = e^3 / (e^3 + 3) = 0.87. Penalized: e^-5 / (e^-5 + 3) = 0.0022.
  CHECK(num_zero_plain > 820);
  CHECK(num_zero_penalized < 12);
  sample_request r = make_request(logits, p);
  r.counts = &counts;
  const token_distribution d = s.distribution(r);
  CHECK(d.probs[0] == doctest::Approx(std::exp(-5.0) / (std::exp(-5.0) + 3)));
}
