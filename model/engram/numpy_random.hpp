// A bit-exact C++ port of the numpy random pieces Engram's hash multipliers come from:
// `np.random.default_rng(seed)` (SeedSequence -> PCG64 XSL-RR 128/64) and
// `Generator.integers(low, high, dtype=np.int64)` (Lemire's bounded draws). Hash ids
// depend on every bit of these numbers, so they are reproduced, not approximated.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace di::np {

/// numpy.random.SeedSequence(entropy) with no spawn key and the default pool of 4 words.
class seed_sequence {
 public:
  explicit seed_sequence(std::uint64_t entropy);
  /// generate_state(num_words, dtype=np.uint64).
  std::vector<std::uint64_t> generate_state_u64(int num_words) const;

 private:
  std::array<std::uint32_t, 4> pool_{};
};

/// numpy.random.PCG64 (XSL-RR output on a 128-bit LCG), seeded from a SeedSequence.
class pcg64 {
 public:
  explicit pcg64(const seed_sequence& seed);
  std::uint64_t next_u64();
  /// Halves of one 64-bit draw, low half first (numpy buffers the high half).
  std::uint32_t next_u32();

 private:
  unsigned __int128 state_ = 0;
  unsigned __int128 inc_ = 0;
  bool has_u32_ = false;
  std::uint32_t buffered_u32_ = 0;
};

/// np.random.default_rng(seed) for a non-negative integer seed.
pcg64 default_rng(std::uint64_t seed);

/// Generator.integers(low, high, size=count, dtype=np.int64) with endpoint=False;
/// requires low < high.
std::vector<std::int64_t> integers_i64(pcg64& rng, std::int64_t low, std::int64_t high,
                                       std::size_t count);

}  // namespace di::np
