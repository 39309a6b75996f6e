// Helpers shared by the sampling tests: random logits rows, request construction, and catching
// the message of a di::error.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "runtime/sampler.hpp"

namespace di::test {

/// The vocabulary size of DeepSeek-V4.
inline constexpr std::int64_t deepseek_vocab_size = 129280;

/// A row of `n` logits drawn from N(0, stddev^2) with a fixed generator seed.
inline std::vector<float> random_logits(std::int64_t n, std::uint32_t seed, double stddev = 2.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0.0, stddev);
  std::vector<float> row(static_cast<std::size_t>(n));
  for (float& x : row) x = static_cast<float>(dist(gen));
  return row;
}

/// The message of the di::error `fn` throws, or "" when it does not throw.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const di::error& e) {
    return e.what();
  }
  return "";
}

/// A request over `logits` with the given parameters, seed and step.
inline runtime::sample_request make_request(std::span<const float> logits,
                                            const runtime::sampling_params& params,
                                            std::uint64_t seed = 0, std::int64_t step = 0) {
  runtime::sample_request request;
  request.logits = logits;
  request.params = &params;
  request.seed = seed;
  request.step = step;
  return request;
}

/// A mask allowing exactly `ids` of a vocabulary of `vocab_size`.
inline std::vector<std::uint32_t> mask_of(std::int64_t vocab_size,
                                          const std::vector<std::int32_t>& ids) {
  std::vector<std::uint32_t> mask(static_cast<std::size_t>((vocab_size + 31) / 32), 0);
  for (std::int32_t id : ids) mask[id / 32] |= 1u << (id % 32);
  return mask;
}

}  // namespace di::test
