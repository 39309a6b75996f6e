// Top-k, top-p and min-p keep exactly the right tokens: hand-made rows (including ties at the
// cutoff: tokens with equal logits are kept or dropped together), a brute-force reference on
// random rows with many ties and on 129K-vocabulary rows, and thousands of draws that never
// leave the kept set.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "runtime/sampler.hpp"
#include "tests/runtime/sampling_test_util.hpp"

using namespace di::runtime;
using di::test::deepseek_vocab_size;
using di::test::make_request;
using di::test::random_logits;

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();

sampling_params filters(double temperature, int top_k, double top_p, double min_p) {
  sampling_params p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

std::vector<std::int32_t> kept(const std::vector<float>& logits, const sampling_params& p) {
  sampler s;
  return s.distribution(make_request(logits, p)).ids;
}

/// Natural-log logits of the given probabilities.
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double q : probs) out.push_back(static_cast<float>(std::log(q)));
  return out;
}

/// The kept set by the rules' definition, with a full sort: top-k keeps logits >= the k-th
/// largest; top-p keeps the shortest descending prefix reaching top_p of the top-k mass, plus
/// ties of its last token; min-p keeps weights >= min_p times the top weight.
std::vector<std::int32_t> reference_kept(const std::vector<float>& logits,
                                         const sampling_params& p) {
  std::vector<std::int32_t> order;
  for (std::int32_t i = 0; i < std::int32_t(logits.size()); ++i) {
    if (logits[i] > -inf) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const double top = logits[order[0]];
  float threshold = -inf;
  if (p.top_k > 0 && p.top_k < std::int32_t(order.size())) threshold = logits[order[p.top_k - 1]];
  auto weight = [&](std::int32_t id) { return std::exp(-(top - logits[id]) / p.temperature); };
  double mass = 0;
  for (std::int32_t id = 0; id < std::int32_t(logits.size()); ++id) {
    if (logits[id] > -inf && logits[id] >= threshold) mass += weight(id);
  }
  if (p.top_p < 1) {
    double running = 0;
    for (std::int32_t id : order) {
      running += weight(id);
      if (running >= p.top_p * mass) {
        threshold = std::max(threshold, logits[id]);
        break;
      }
    }
  }
  std::vector<std::int32_t> out;
  for (std::int32_t id : order) {
    if (logits[id] >= threshold && weight(id) >= p.min_p && weight(id) > 0) out.push_back(id);
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// Samples `num_draws` seeds and checks every token is kept; with `is_all_expected`, also that
/// every kept token shows up.
void check_draws_stay_inside(const std::vector<float>& logits, const sampling_params& p,
                             int num_draws, bool is_all_expected = true) {
  sampler s;
  const std::vector<std::int32_t> allowed = s.distribution(make_request(logits, p)).ids;
  std::set<std::int32_t> seen;
  for (int seed = 0; seed < num_draws; ++seed) {
    const std::int32_t id = s.sample(make_request(logits, p, seed, seed % 7)).token_id;
    REQUIRE(std::binary_search(allowed.begin(), allowed.end(), id));
    seen.insert(id);
  }
  if (is_all_expected) CHECK(seen.size() == allowed.size());
}

}  // namespace

TEST_CASE("top-k keeps the k largest logits and every token tied with the k-th") {
  const std::vector<float> logits = {3, 1, 2, 2, 0, -1, 2, 5};
  using ids = std::vector<std::int32_t>;
  CHECK(kept(logits, filters(1, 1, 1, 0)) == ids{7});
  CHECK(kept(logits, filters(1, 2, 1, 0)) == ids{0, 7});
  CHECK(kept(logits, filters(1, 3, 1, 0)) == ids{0, 2, 3, 6, 7});  // ties at the cutoff
  CHECK(kept(logits, filters(1, 5, 1, 0)) == ids{0, 2, 3, 6, 7});
  CHECK(kept(logits, filters(1, 6, 1, 0)) == ids{0, 1, 2, 3, 6, 7});
  CHECK(kept(logits, filters(1, 8, 1, 0)) == ids{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(kept(logits, filters(1, 1000, 1, 0)).size() == 8);
  CHECK(kept(logits, filters(1, 0, 1, 0)).size() == 8);
  CHECK(kept(logits, filters(1, -1, 1, 0)).size() == 8);
  const std::vector<float> with_dead = {-inf, 1, -inf, 0};
  CHECK(kept(with_dead, filters(1, 3, 1, 0)) == ids{1, 3});
  check_draws_stay_inside(logits, filters(1, 3, 1, 0), 2000);
}

TEST_CASE("top-p keeps the shortest most-likely prefix reaching top_p") {
  // Probabilities by id: 0.2, 0.4, 0.1, 0.3 (id order differs from probability order).
  const std::vector<float> logits = logits_of({0.2, 0.4, 0.1, 0.3});
  using ids = std::vector<std::int32_t>;
  CHECK(kept(logits, filters(1, 0, 0.35, 0)) == ids{1});
  CHECK(kept(logits, filters(1, 0, 0.65, 0)) == ids{1, 3});
  CHECK(kept(logits, filters(1, 0, 0.75, 0)) == ids{0, 1, 3});
  CHECK(kept(logits, filters(1, 0, 0.95, 0)) == ids{0, 1, 2, 3});
  CHECK(kept(logits, filters(1, 0, 1e-9, 0)) == ids{1});
  check_draws_stay_inside(logits, filters(1, 0, 0.65, 0), 2000);
}

TEST_CASE("top-p keeps every token tied with the last one it needs") {
  // e^2, e^1, e^0, e^1 over 13.826: 0.534, 0.197, 0.072, 0.197.
  const std::vector<float> logits = {1, 2, 0, 1};
  using ids = std::vector<std::int32_t>;
  CHECK(kept(logits, filters(1, 0, 0.5, 0)) == ids{1});
  CHECK(kept(logits, filters(1, 0, 0.6, 0)) == ids{0, 1, 3});  // token 0 suffices; 3 is tied
  CHECK(kept(logits, filters(1, 0, 0.93, 0)) == ids{0, 1, 2, 3});
}

TEST_CASE("min-p keeps tokens whose probability is at least min_p times the top one") {
  const std::vector<float> logits = logits_of({0.5, 0.25, 0.05, 0.025});  // relative 1 .5 .1 .05
  using ids = std::vector<std::int32_t>;
  CHECK(kept(logits, filters(1, 0, 1, 0.2)) == ids{0, 1});
  CHECK(kept(logits, filters(1, 0, 1, 0.08)) == ids{0, 1, 2});
  CHECK(kept(logits, filters(1, 0, 1, 1)) == ids{0});
  // Temperature applies first: at T = 2 the relative probabilities are 1, .71, .32, .22.
  CHECK(kept(logits, filters(2, 0, 1, 0.2)) == ids{0, 1, 2, 3});
  check_draws_stay_inside(logits, filters(1, 0, 1, 0.08), 2000);
}

TEST_CASE("filters apply in order: temperature, then top-k, then top-p on the survivors") {
  const std::vector<float> logits = logits_of({0.4, 0.3, 0.2, 0.1});
  using ids = std::vector<std::int32_t>;
  CHECK(kept(logits, filters(1, 0, 0.5, 0)) == ids{0, 1});
  CHECK(kept(logits, filters(1, 2, 0.5, 0)) == ids{0});  // 0.4 / 0.7 >= 0.5 after top-k
  const std::vector<float> spread = {2, 1, 0};
  CHECK(kept(spread, filters(1, 0, 0.7, 0)) == ids{0, 1});
  CHECK(kept(spread, filters(0.25, 0, 0.7, 0)) == ids{0});  // sharper after temperature
  sampler s;
  const token_distribution d = s.distribution(make_request(logits, filters(1, 3, 1, 0)));
  CHECK(d.ids == ids{0, 1, 2});
  CHECK(d.probs[0] == doctest::Approx(0.4 / 0.9));
  CHECK(d.probs[1] == doctest::Approx(0.3 / 0.9));
  CHECK(d.probs[2] == doctest::Approx(0.2 / 0.9));
  check_draws_stay_inside(logits, filters(0.7, 3, 0.8, 0.1), 3000);
}

TEST_CASE("kept sets match a brute-force reference on rows full of ties") {
  std::mt19937 gen(2024);
  std::uniform_int_distribution<int> level(-12, 12);
  std::uniform_int_distribution<int> k_pick(-1, 40);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<float> logits(48);
    for (float& l : logits) l = level(gen) * 0.5f;  // 49 levels: many exact ties
    if (trial % 3 == 0) logits[trial % 48] = -inf;
    const sampling_params p =
        filters(0.2 + 2 * unit(gen), k_pick(gen), trial % 4 == 0 ? 1.0 : 0.05 + 0.95 * unit(gen),
                trial % 5 == 0 ? 0.0 : 0.3 * unit(gen));
    CAPTURE(trial);
    CHECK(kept(logits, p) == reference_kept(logits, p));
  }
}

TEST_CASE("kept sets match the reference on 129K-vocabulary rows") {
  const std::vector<float> logits = random_logits(deepseek_vocab_size, 21, 3.0);
  const sampling_params cases[] = {filters(1, 0, 0.9, 0),    filters(0.7, 0, 0.5, 0),
                                   filters(1.5, 0, 0.99, 0), filters(1, 50, 1, 0),
                                   filters(1, 1000, 0.9, 0), filters(0.6, 0, 0.95, 0.01),
                                   filters(1, 0, 1, 0.05),   filters(2, 40000, 0.3, 0)};
  for (const sampling_params& p : cases) {
    CAPTURE(p.temperature);
    CAPTURE(p.top_k);
    CAPTURE(p.top_p);
    CAPTURE(p.min_p);
    const auto got = kept(logits, p);
    CHECK(got == reference_kept(logits, p));
    CHECK(got.size() > 1);
  }
  check_draws_stay_inside(random_logits(2000, 4, 3.0), filters(1, 0, 0.9, 0), 8000, false);
}
