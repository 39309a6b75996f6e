// Statistical checks: draws over many seeds follow softmax(logits / T), and the test can tell
// temperatures apart (T = 0.5 and T = 2 are rejected against each other's distribution); the
// filtered distribution is sampled in proportion to its renormalised probabilities.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "runtime/sampler.hpp"
#include "tests/runtime/sampling_test_util.hpp"

using namespace di::runtime;
using di::test::make_request;

namespace {

// Chi-square critical values at p = 1e-4 (the test is deterministic: the seeds are fixed).
constexpr double chi2_critical_5_dof = 25.74;
constexpr double chi2_critical_2_dof = 18.42;

/// softmax(logits / temperature) computed directly in long double.
std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  long double total = 0;
  std::vector<double> p;
  for (float l : logits) total += std::exp(static_cast<long double>(l) / temperature);
  for (float l : logits)
    p.push_back(double(std::exp(static_cast<long double>(l) / temperature) / total));
  return p;
}

/// Token counts of `num_draws` draws with seeds 0.. (and steps varying with the seed).
std::vector<int> draw_counts(const std::vector<float>& logits, const sampling_params& p,
                             int num_draws) {
  sampler s;
  std::vector<int> counts(logits.size(), 0);
  for (int seed = 0; seed < num_draws; ++seed) {
    ++counts[s.sample(make_request(logits, p, 1000 + seed, seed % 13)).token_id];
  }
  return counts;
}

/// Pearson's chi-square of `counts` against `probs` (cells with zero probability must be empty).
double chi_square(const std::vector<int>& counts, const std::vector<double>& probs) {
  int total = 0;
  for (int c : counts) total += c;
  double chi2 = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (probs[i] == 0) {
      REQUIRE(counts[i] == 0);
      continue;
    }
    const double expected = probs[i] * total;
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return chi2;
}

}  // namespace

TEST_CASE("draws follow softmax(logits / T) and distinguish temperatures") {
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 2.0f};
  constexpr int num_draws = 20000;
  const double temperatures[] = {0.5, 1.0, 2.0};
  std::vector<std::vector<int>> counts;
  for (double t : temperatures) {
    sampling_params p;
    p.temperature = t;
    counts.push_back(draw_counts(logits, p, num_draws));
  }
  for (std::size_t i = 0; i < 3; ++i) {
    for (std::size_t j = 0; j < 3; ++j) {
      const double chi2 = chi_square(counts[i], softmax(logits, temperatures[j]));
      CAPTURE(temperatures[i]);
      CAPTURE(temperatures[j]);
      if (i == j) {
        CHECK(chi2 < chi2_critical_5_dof);
      } else {
        CHECK(chi2 > 10 * chi2_critical_5_dof);
      }
    }
  }
}

TEST_CASE("a small temperature change is still detected") {
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 2.0f};
  sampling_params p;
  p.temperature = 1.0;
  const std::vector<int> counts = draw_counts(logits, p, 40000);
  CHECK(chi_square(counts, softmax(logits, 1.0)) < chi2_critical_5_dof);
  CHECK(chi_square(counts, softmax(logits, 1.15)) > chi2_critical_5_dof);
  CHECK(chi_square(counts, softmax(logits, 0.87)) > chi2_critical_5_dof);
}

TEST_CASE("filtered distributions are sampled in proportion to their renormalised mass") {
  const std::vector<float> logits = {0.3f, 2.0f, -1.0f, 1.2f, 1.9f, -0.2f, 0.8f, -3.0f};
  sampling_params p;
  p.temperature = 0.8;
  p.top_k = 6;
  p.top_p = 0.9;
  p.min_p = 0.25;
  sampler s;
  const token_distribution d = s.distribution(make_request(logits, p));
  // top-k drops 2 and 7, top-p (mass .847 < .9 without token 6) drops 0 and 5, and min-p drops
  // 6 (relative probability .22): tokens 1, 3 and 4 remain.
  REQUIRE(d.ids == std::vector<std::int32_t>{1, 3, 4});
  std::vector<double> probs(logits.size(), 0.0);
  for (std::size_t i = 0; i < d.ids.size(); ++i) probs[d.ids[i]] = d.probs[i];
  // The renormalised softmax over the kept tokens, computed independently.
  const std::vector<double> full = softmax(logits, 0.8);
  const double kept_mass = full[1] + full[3] + full[4];
  for (std::int32_t id : {1, 3, 4}) CHECK(probs[id] == doctest::Approx(full[id] / kept_mass));
  const std::vector<int> counts = draw_counts(logits, p, 20000);
  CHECK(chi_square(counts, probs) < chi2_critical_2_dof);
}
