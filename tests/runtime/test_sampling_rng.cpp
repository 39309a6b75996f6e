// The sampling RNG is part of the engine's contract (a CUDA sampler must reproduce it), so its
// outputs are pinned to values computed by an independent implementation (Python big-integer
// arithmetic) and to the published splitmix64 sequence; its uniforms are checked for bias.
#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <set>
#include <thread>
#include <vector>

#include "runtime/sampling_rng.hpp"

using namespace di::runtime;

TEST_CASE("mix64 is the splitmix64 output function") {
  // splitmix64 seeded with 0 outputs mix64(gamma), mix64(2 * gamma), ...
  CHECK(mix64(splitmix_gamma) == 0xE220A8397B1DCDAFull);
  CHECK(mix64(2 * splitmix_gamma) == 0x6E789E6AA1B965F4ull);
  CHECK(mix64(0) == 0);
}

TEST_CASE("random_bits and random_uniform match the reference values") {
  struct golden {
    std::uint64_t seed, step, lane, bits;
    double uniform;
  };
  const golden cases[] = {
      {0, 0, 0, 0x33FE8BD4F9C57863ull, 0.20310281705476096},
      {0, 1, 0, 0x45CEC29CD9A24E4Bull, 0.2726861603674787},
      {42, 0, 0, 0x6B9AF54417D0BF75ull, 0.42033322250773864},
      {42, 7, 0, 0x895E3BB5567AA102ull, 0.5365941350669154},
      {42, 7, 1, 0xB1B63009E1E01BF0ull, 0.6941862129332325},
      {~0ull, 123456789, 0, 0xFE5FBA2D4A4C7E5Aull, 0.993648181969819},
  };
  for (const golden& g : cases) {
    CAPTURE(g.seed);
    CAPTURE(g.step);
    CHECK(random_bits(g.seed, g.step, g.lane) == g.bits);
    CHECK(random_uniform(g.seed, g.step, g.lane) == g.uniform);
  }
  static_assert(random_bits(42, 7, 1) == 0xB1B63009E1E01BF0ull, "usable at compile time");
}

TEST_CASE("uniforms lie in [0, 1) and are evenly spread over seeds and over steps") {
  constexpr int num_bins = 16;
  constexpr int num_draws = 160'000;
  for (bool over_steps : {false, true}) {
    std::array<int, num_bins> counts{};
    double sum = 0;
    for (int i = 0; i < num_draws; ++i) {
      const double u = over_steps ? random_uniform(7, i) : random_uniform(i, 0);
      REQUIRE(u >= 0.0);
      REQUIRE(u < 1.0);
      sum += u;
      ++counts[static_cast<int>(u * num_bins)];
    }
    CHECK(sum / num_draws == doctest::Approx(0.5).epsilon(0.01));
    const double expected = double(num_draws) / num_bins;
    double chi2 = 0;
    for (int c : counts) chi2 += (c - expected) * (c - expected) / expected;
    CHECK(chi2 < 37.7);  // 15 degrees of freedom, p = 0.001
  }
}

TEST_CASE("draws differ across seeds, steps and lanes") {
  std::set<std::uint64_t> seen;
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    for (std::uint64_t step = 0; step < 20; ++step) {
      for (std::uint64_t lane = 0; lane < 3; ++lane) seen.insert(random_bits(seed, step, lane));
    }
  }
  CHECK(seen.size() == 20 * 20 * 3);
}

TEST_CASE("request seeds drawn concurrently are all distinct") {
  constexpr int num_per_thread = 2000;
  std::vector<std::uint64_t> a(num_per_thread), b(num_per_thread);
  std::thread ta([&] {
    for (auto& s : a) s = draw_request_seed();
  });
  std::thread tb([&] {
    for (auto& s : b) s = draw_request_seed();
  });
  ta.join();
  tb.join();
  std::set<std::uint64_t> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  CHECK(all.size() == 2 * num_per_thread);
}
