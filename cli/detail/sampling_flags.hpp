// The sampling flags `generate` and `client` share (--max-tokens, --temperature, ..., --seed,
// --logprobs), declared once so that both parse and check them the same way.
#pragma once

#include "runtime/sampling_params.hpp"

#include <cstdint>
#include <optional>

namespace CLI {
class App;
class Validator;
}

namespace di::cli {

struct sampling_flags {
  runtime::sampling_params params;
  int max_tokens = 64;
  /// Any 64-bit value (what a run prints as its seed replays it); unset = drawn per request.
  std::optional<std::uint64_t> seed;
  std::optional<int> logprobs;         ///< top-K of every generated token
  std::optional<int> prompt_logprobs;  ///< top-K of every prompt token

  /// The request's sampling parameters: params with max_tokens, seed and the logprobs set.
  runtime::sampling_params to_params() const;
};

/// Declares the flags on `sub`, writing into `f` (which must outlive the parse).
void add_sampling_flags(CLI::App& sub, sampling_flags& f);

/// A check for integer options that must be >= 0, with a plain message (CLI::NonNegativeNumber's
/// prints DBL_MAX in full, ~310 digits).
/// `name` is the value's name in --help ("K >= 0").
CLI::Validator non_negative_integer(const char* name = "K");

}  // namespace di::cli
