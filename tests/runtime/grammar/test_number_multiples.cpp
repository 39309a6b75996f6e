// The digit automata of multipleOf (runtime/grammar/json_schema/number_multiples.hpp) against a
// plain reference: the remainder automaton mod k, all k states, minimized by Moore's refinement,
// and the value of random digit strings mod k.
#include "runtime/grammar/json_schema/number_multiples.hpp"

#include <doctest/doctest.h>

#include <map>
#include <random>
#include <string>

using namespace di::grammar::json_detail;

namespace {

/// The number of states of the minimal automaton of the multiples of k, from all k remainders.
std::size_t reference_num_states(std::uint64_t k) {
  std::vector<std::uint64_t> cls(k, 1);
  cls[0] = 0;
  for (std::size_t num_classes = 0;;) {
    std::map<std::vector<std::uint64_t>, std::uint64_t> ids;
    std::vector<std::uint64_t> refined(k);
    for (std::uint64_t r = 0; r < k; ++r) {
      std::vector<std::uint64_t> key{cls[r]};
      for (std::uint64_t d = 0; d < 10; ++d) key.push_back(cls[(10 * r + d) % k]);
      refined[r] = ids.emplace(key, ids.size()).first->second;
    }
    cls = std::move(refined);
    if (ids.size() == num_classes) return num_classes;
    num_classes = ids.size();
  }
}

bool runs_to_final(const digit_automaton& a, const std::string& digits) {
  std::uint32_t s = 0;
  for (char c : digits) s = a.next[s][std::uint32_t(c - '0')];
  return a.is_final[s] != 0;
}

std::uint64_t mod(const std::string& digits, std::uint64_t k) {
  std::uint64_t r = 0;
  for (char c : digits) r = (10 * r + std::uint64_t(c - '0')) % k;
  return r;
}

}  // namespace

TEST_CASE("multiples_automaton is the minimal automaton of the multiples") {
  std::mt19937_64 rng(7);
  std::vector<std::uint64_t> steps{1,    2,    5,    10,   64,    125,   999,   1000,
                                   3200, 4096, 7000, 8192, 15625, 86400, 40000, 1000000 / 64};
  for (int i = 0; i < 20; ++i) steps.push_back(1 + rng() % 20000);
  for (const std::uint64_t k : steps) {
    CAPTURE(k);
    const digit_automaton a = multiples_automaton(k, 100000);
    CHECK(a.num_states() == reference_num_states(k));
    for (int j = 0; j < 300; ++j) {
      std::string digits;
      const std::size_t n = 1 + rng() % 25;
      for (std::size_t p = 0; p < n; ++p) digits.push_back(char('0' + rng() % 10));
      // Half of them made multiples of k: the digits of a random multiple.
      if (j % 2 == 0 && k <= 1'000'000'000) digits = std::to_string((rng() % 1'000'000'000) * k);
      CAPTURE(digits);
      CHECK(runs_to_final(a, digits) == (mod(digits, k) == 0));
    }
  }
}

TEST_CASE("multiples_automaton: a 2^a x 5^b step costs its classes, not its size") {
  // Divisibility by 2^a x 5^b depends on the last max(a, b) digits only: 10^6 needs 7 states
  // (the count of trailing zeros), 5^6 36, 2^16 2829; 86400 = 27 x 3200 141 (the product of 27
  // remainders and 3200's 16 classes, minimized). 10^6 and 2^16 were refused ("its factor 15625
  // would need a remainder automaton of 15625 states").
  CHECK(multiples_automaton(1'000'000, 20000).num_states() == 7);
  CHECK(multiples_automaton(15625, 20000).num_states() == 36);
  CHECK(multiples_automaton(65536, 20000).num_states() == 2829);
  CHECK(multiples_automaton(86400, 20000).num_states() == 141);
  CHECK(multiples_automaton(1'000'000'000'000, 20000).num_states() == 13);
  // Past the bound an error, not a walk over the remainders: 2^20 has 20290 classes, 2^39
  // about 10^8; the prime 19997 needs all its remainders.
  CHECK_THROWS_WITH(multiples_automaton(1 << 20, 20000),
                    doctest::Contains("more than 20000 states"));
  CHECK_THROWS_WITH(multiples_automaton(549'755'813'888, 20000),
                    doctest::Contains("more than 20000 states"));
  CHECK(multiples_automaton(1 << 20, 30000).num_states() == 20290);
  CHECK_THROWS_WITH(multiples_automaton(19997, 5000), doctest::Contains("19997 states"));
}
