// The numpy port against values captured from numpy 2.4.6 (python3 -c ...):
//   np.random.SeedSequence(s).generate_state(4, np.uint64), np.random.PCG64(s).random_raw(n),
//   np.random.default_rng(s).integers(low, high, size=n, dtype=np.int64), and the official
//   compute_hash_multipliers(layer_ids, max_ngram_size, compressed_vocab_size).
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "common/error.hpp"
#include "model/engram/hasher.hpp"
#include "model/engram/numpy_random.hpp"

namespace {

using u64s = std::vector<std::uint64_t>;
using i64s = std::vector<std::int64_t>;
constexpr std::int64_t int64_min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t int64_max = std::numeric_limits<std::int64_t>::max();

TEST_CASE("SeedSequence.generate_state matches numpy") {
  CHECK(di::np::seed_sequence(10007).generate_state_u64(4) ==
        u64s{8634291315755388167ull, 11042498673593962405ull, 15418481100450270793ull,
             9041516862649747678ull});
  // A seed of two 32-bit words.
  CHECK(di::np::seed_sequence((1ull << 40) + 3).generate_state_u64(4) ==
        u64s{6059815089232835828ull, 7748354339778573394ull, 7469072271128384145ull,
             3873464148347455775ull});
}

TEST_CASE("PCG64 raw output matches numpy") {
  di::np::pcg64 a = di::np::default_rng(10007);
  CHECK(u64s{a.next_u64(), a.next_u64(), a.next_u64()} ==
        u64s{15187255322829266483ull, 959186003677246517ull, 7126631698937927467ull});
  di::np::pcg64 b = di::np::default_rng(0);
  CHECK(u64s{b.next_u64(), b.next_u64()} == u64s{11749869230777074271ull, 4976686463289251617ull});
}

TEST_CASE("Generator.integers(dtype=int64) matches numpy on every range class") {
  auto draw = [](std::uint64_t seed, std::int64_t low, std::int64_t high, std::size_t n) {
    di::np::pcg64 rng = di::np::default_rng(seed);
    return di::np::integers_i64(rng, low, high, n);
  };
  // 64-bit Lemire over the full int64 range.
  CHECK(draw(7, int64_min, int64_max, 3) ==
        i64s{2307604057237572234, 7327301329031162516, 5085503372737050977});
  // Range 2^32 - 1 inclusive: one buffered 32-bit word per draw.
  CHECK(draw(123, 0, 1ll << 32, 5) ==
        i64s{66316749, 2930678937, 2546691363, 231159515, 3904498326});
  // 32-bit Lemire with rejections on a tiny range.
  CHECK(draw(5, 0, 7, 9) == i64s{4, 5, 0, 5, 3, 3, 4, 2, 6});
  // A one-value range draws nothing.
  CHECK(draw(9, -5, -4, 3) == i64s{-5, -5, -5});
  CHECK_THROWS_AS(draw(9, 4, 4, 1), di::error);
}

TEST_CASE("engram_hash_multipliers matches the official compute_hash_multipliers") {
  const int golden_layers[] = {0, 1, 4, 14};
  CHECK(di::engram_hash_multipliers(golden_layers, 4, 98627) ==
        i64s{59567203862923, 25229837992077, 3831750483381, 1545626769233, 76993395940407,
             4862694818241, 36129212583461, 74336168021201, 82648053629935, 5061543868817,
             74000710804647, 19044230081221, 68036077441013, 51753666516433, 31067133107689,
             83008754102935});
  // bound 2^29 - 1: the 32-bit draw path.
  const int layer3[] = {3};
  CHECK(di::engram_hash_multipliers(layer3, 5, 1ll << 33) ==
        i64s{954548423, 317546435, 396142215, 942006883, 472532943});
  // bound 2^31 - 11: 32-bit Lemire near its upper range.
  const int layer7[] = {7};
  CHECK(di::engram_hash_multipliers(layer7, 3, (1ll << 31) + 11) ==
        i64s{3920440285, 3801034693, 1489166659});
  // bound clamps to 1: every multiplier is 1.
  const int layer2[] = {2};
  CHECK(di::engram_hash_multipliers(layer2, 3, 1ll << 62) == i64s{1, 1, 1});
}

}  // namespace
