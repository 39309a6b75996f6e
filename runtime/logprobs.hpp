// Log-probabilities returned to clients, for generated tokens and for prompt tokens. They are
// vLLM's default "raw" logprobs: log_softmax of the model's logits before penalties, masks,
// temperature and filters, so they describe the model rather than the sampling settings.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace di::runtime {

/// A token and its logprob.
struct token_logprob {
  std::int32_t id = 0;
  float logprob = 0;
};

/// The logprobs at one position: of the token actually there (sampled or from the prompt),
/// its rank, and the N most likely tokens.
struct position_logprobs {
  std::int32_t id = 0;             ///< the token at this position
  float logprob = 0;               ///< its raw logprob (present even when not in `top`)
  std::int64_t rank = 0;           ///< tokens with a logit >= its logit (vLLM: 1 = the top)
  std::vector<token_logprob> top;  ///< N entries, logprob descending, ties by lower id
};

/// Logprobs of `token_id` and the top `num_top` tokens of one row of raw logits ([vocab]).
/// log_softmax is computed in double (max-subtracted log-sum-exp over ids in ascending order)
/// and rounded to float. Throws di::error on NaN/+inf logits or when every logit is -inf.
position_logprobs compute_logprobs(std::span<const float> logits, std::int32_t token_id,
                                   int num_top);

/// vLLM's `prompt_logprobs`: entry i describes prompt token i under the distribution that
/// predicted it (logits row i - 1); entry 0 is null because nothing predicted the first token.
/// `logits` is [prompt_ids.size() - 1, vocab_size], row j being the output at position j.
std::vector<std::optional<position_logprobs>> compute_prompt_logprobs(
    std::span<const float> logits, std::int64_t vocab_size,
    std::span<const std::int32_t> prompt_ids, int num_top);

}  // namespace di::runtime
