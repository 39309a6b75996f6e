// numpy's SeedSequence, PCG64 and int64 bounded draws, following numpy's
// bit_generator.pyx, pcg64.h and distributions.c step by step (all arithmetic is
// modular, in the word size numpy uses). Verified against numpy 2.x draws in the tests.
#include "model/engram/numpy_random.hpp"

#include "common/error.hpp"

namespace di::np {

namespace {

// SeedSequence's hash constants (bit_generator.pyx); all arithmetic is mod 2^32.
constexpr std::uint32_t init_a = 0x43b0d7e5u;
constexpr std::uint32_t mult_a = 0x931e8875u;
constexpr std::uint32_t init_b = 0x8b51f9ddu;
constexpr std::uint32_t mult_b = 0x58f38dedu;
constexpr std::uint32_t mix_mult_l = 0xca01f9ddu;
constexpr std::uint32_t mix_mult_r = 0x4973f715u;
constexpr int xshift = 16;

// PCG's default 128-bit LCG multiplier.
constexpr unsigned __int128 pcg_multiplier =
    (static_cast<unsigned __int128>(0x2360ed051fc65da4ull) << 64) | 0x4385df649fccf645ull;

std::uint32_t hashmix(std::uint32_t value, std::uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= mult_a;
  value *= hash_const;
  value ^= value >> xshift;
  return value;
}

std::uint32_t mix(std::uint32_t x, std::uint32_t y) {
  std::uint32_t result = mix_mult_l * x - mix_mult_r * y;
  result ^= result >> xshift;
  return result;
}

// An integer seed as little-endian 32-bit words; zero is one zero word.
std::vector<std::uint32_t> entropy_words(std::uint64_t entropy) {
  std::vector<std::uint32_t> words;
  do {
    words.push_back(static_cast<std::uint32_t>(entropy));
    entropy >>= 32;
  } while (entropy != 0);
  return words;
}

std::uint64_t rotate_right(std::uint64_t value, unsigned rot) {
  return (value >> rot) | (value << ((64u - rot) & 63u));
}

// Lemire's nearly-divisionless draw in [0, rng] for rng < 2^64 - 1 (numpy's
// bounded_lemire_uint64): reject only the low products that would bias the result.
std::uint64_t bounded_lemire_u64(pcg64& gen, std::uint64_t rng) {
  const std::uint64_t rng_excl = rng + 1;
  unsigned __int128 m = static_cast<unsigned __int128>(gen.next_u64()) * rng_excl;
  auto leftover = static_cast<std::uint64_t>(m);
  if (leftover < rng_excl) {
    const std::uint64_t threshold = (UINT64_MAX - rng) % rng_excl;
    while (leftover < threshold) {
      m = static_cast<unsigned __int128>(gen.next_u64()) * rng_excl;
      leftover = static_cast<std::uint64_t>(m);
    }
  }
  return static_cast<std::uint64_t>(m >> 64);
}

// The 32-bit variant numpy uses whenever the range fits in 32 bits (rng < 2^32 - 1).
std::uint32_t bounded_lemire_u32(pcg64& gen, std::uint32_t rng) {
  const std::uint32_t rng_excl = rng + 1;
  std::uint64_t m = static_cast<std::uint64_t>(gen.next_u32()) * rng_excl;
  auto leftover = static_cast<std::uint32_t>(m);
  if (leftover < rng_excl) {
    const std::uint32_t threshold = (UINT32_MAX - rng) % rng_excl;
    while (leftover < threshold) {
      m = static_cast<std::uint64_t>(gen.next_u32()) * rng_excl;
      leftover = static_cast<std::uint32_t>(m);
    }
  }
  return static_cast<std::uint32_t>(m >> 32);
}

// One draw in [0, rng], choosing the generator width exactly as random_bounded_uint64_fill.
std::uint64_t bounded_draw(pcg64& gen, std::uint64_t rng) {
  if (rng == 0) return 0;
  if (rng < 0xffffffffull) return bounded_lemire_u32(gen, static_cast<std::uint32_t>(rng));
  if (rng == 0xffffffffull) return gen.next_u32();
  if (rng == UINT64_MAX) return gen.next_u64();
  return bounded_lemire_u64(gen, rng);
}

}  // namespace

seed_sequence::seed_sequence(std::uint64_t entropy) {
  const std::vector<std::uint32_t> words = entropy_words(entropy);
  std::uint32_t hash_const = init_a;
  for (std::size_t i = 0; i < pool_.size(); ++i)
    pool_[i] = hashmix(i < words.size() ? words[i] : 0u, hash_const);
  for (std::size_t src = 0; src < pool_.size(); ++src)
    for (std::size_t dst = 0; dst < pool_.size(); ++dst)
      if (src != dst) pool_[dst] = mix(pool_[dst], hashmix(pool_[src], hash_const));
  for (std::size_t src = pool_.size(); src < words.size(); ++src)
    for (std::size_t dst = 0; dst < pool_.size(); ++dst)
      pool_[dst] = mix(pool_[dst], hashmix(words[src], hash_const));
}

std::vector<std::uint64_t> seed_sequence::generate_state_u64(int num_words) const {
  DI_CHECK(num_words >= 0, "seed_sequence: negative state size {}", num_words);
  std::uint32_t hash_const = init_b;
  std::vector<std::uint64_t> state(std::size_t(num_words), 0);
  for (std::size_t i = 0; i < 2 * state.size(); ++i) {
    std::uint32_t value = pool_[i % pool_.size()];
    value ^= hash_const;
    hash_const *= mult_b;
    value *= hash_const;
    value ^= value >> xshift;
    // Pairs of 32-bit words viewed as one little-endian uint64.
    state[i / 2] |= static_cast<std::uint64_t>(value) << (32 * (i % 2));
  }
  return state;
}

pcg64::pcg64(const seed_sequence& seed) {
  const std::vector<std::uint64_t> words = seed.generate_state_u64(4);
  const unsigned __int128 init_state = (static_cast<unsigned __int128>(words[0]) << 64) | words[1];
  const unsigned __int128 init_seq = (static_cast<unsigned __int128>(words[2]) << 64) | words[3];
  // pcg_setseq_128_srandom_r: odd increment, one step, add the seed, one more step.
  inc_ = (init_seq << 1) | 1;
  state_ = inc_;
  state_ += init_state;
  state_ = state_ * pcg_multiplier + inc_;
}

std::uint64_t pcg64::next_u64() {
  state_ = state_ * pcg_multiplier + inc_;
  const auto high = static_cast<std::uint64_t>(state_ >> 64);
  const auto low = static_cast<std::uint64_t>(state_);
  return rotate_right(high ^ low, static_cast<unsigned>(state_ >> 122));
}

std::uint32_t pcg64::next_u32() {
  if (has_u32_) {
    has_u32_ = false;
    return buffered_u32_;
  }
  const std::uint64_t next = next_u64();
  has_u32_ = true;
  buffered_u32_ = static_cast<std::uint32_t>(next >> 32);
  return static_cast<std::uint32_t>(next);
}

pcg64 default_rng(std::uint64_t seed) {
  return pcg64(seed_sequence(seed));
}

std::vector<std::int64_t> integers_i64(pcg64& rng, std::int64_t low, std::int64_t high,
                                       std::size_t count) {
  DI_CHECK(low < high, "integers_i64: empty range [{}, {})", low, high);
  // numpy draws an offset in [0, high - 1 - low] and adds `low`, all modulo 2^64.
  const std::uint64_t range =
      static_cast<std::uint64_t>(high) - 1u - static_cast<std::uint64_t>(low);
  std::vector<std::int64_t> out(count);
  for (auto& value : out)
    value = static_cast<std::int64_t>(static_cast<std::uint64_t>(low) + bounded_draw(rng, range));
  return out;
}

}  // namespace di::np
