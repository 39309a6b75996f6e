// In-place edits of one row of logits that run before temperature and the filters: the
// allowed-token mask (structured output), suppressed tokens (min_tokens) and the repetition,
// presence and frequency penalties. Separate from the sampler so that a CUDA twin can be
// compared against each step.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/sampling_params.hpp"
#include "runtime/token_counts.hpp"

namespace di::runtime {

/// Words of an allowed-token mask for `vocab_size` tokens: ceil(vocab_size / 32). Token `id` is
/// allowed when bit (id % 32) of word (id / 32) is set (xgrammar's bitmask layout).
constexpr std::int64_t allowed_mask_words(std::int64_t vocab_size) {
  return (vocab_size + 31) / 32;
}

/// Throws di::error when the row holds NaN or +inf (a model or kernel bug); -inf is allowed.
void check_logits_row(std::span<const float> logits);

/// Sets the logit of every token the mask does not allow to -inf.
void apply_allowed_mask(std::span<float> logits, std::span<const std::uint32_t> mask);

/// Sets the logits of `ids` to -inf (EOS and stop tokens before min_tokens is reached).
void suppress_tokens(std::span<float> logits, std::span<const std::int32_t> ids);

/// Applies the penalties to the tokens in `counts`, in double, rounded once to float:
///   x = logit
///   if seen in prompt or output: x = x > 0 ? x / repetition_penalty : x * repetition_penalty
///   if seen in output (n times):  x -= frequency_penalty * n + presence_penalty
void apply_penalties(std::span<float> logits, const token_counts& counts,
                     const sampling_params& params);

}  // namespace di::runtime
