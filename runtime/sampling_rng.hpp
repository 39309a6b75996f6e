// The counter-based random source of sampling. A draw is a pure function of (seed, step, lane):
// it never depends on batch composition, on other requests or on how often anything else drew,
// so a seeded request is reproducible however it is scheduled. A CUDA sampler must reproduce
// these functions bit for bit; they use only 64-bit integer shifts, xors, adds and multiplies
// (all modulo 2^64) and one exact integer-to-double conversion.
#pragma once

#include <cstdint>

namespace di::runtime {

/// Weyl increment of splitmix64: 2^64 / golden ratio, odd.
inline constexpr std::uint64_t splitmix_gamma = 0x9E3779B97F4A7C15ull;

/// The splitmix64 output function (Stafford's "Mix13"), a bijection of the 64-bit integers:
///   z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
///   z = (z ^ (z >> 27)) * 0x94D049BB133111EB
///   return z ^ (z >> 31)
constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// 64 random bits for draw `lane` of generation step `step` of the request seeded `seed`:
///   h = mix64(seed + gamma)          (the first splitmix64 output of state `seed`)
///   h = mix64(h ^ step)
///   return mix64(h ^ lane)
/// `step` is the index of the token being generated in the request's output (0 for the first);
/// lane 0 is the token draw, other lanes are free for later uses (e.g. speculative acceptance).
constexpr std::uint64_t random_bits(std::uint64_t seed, std::uint64_t step,
                                    std::uint64_t lane = 0) {
  std::uint64_t h = mix64(seed + splitmix_gamma);
  h = mix64(h ^ step);
  return mix64(h ^ lane);
}

/// A uniform double in [0, 1): the top 53 bits of random_bits() times 2^-53 (exact).
constexpr double random_uniform(std::uint64_t seed, std::uint64_t step, std::uint64_t lane = 0) {
  return static_cast<double>(random_bits(seed, step, lane) >> 11) * 0x1.0p-53;
}

/// A fresh seed for a request that brought none, drawn once at admission from a process-wide
/// source (std::random_device and the clock, then a splitmix64 stream). Thread-safe.
std::uint64_t draw_request_seed();

}  // namespace di::runtime
