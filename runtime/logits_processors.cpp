// Logit edits before sampling (see logits_processors.hpp). Repetition penalty follows Hugging
// Face (CTRL paper) semantics; presence and frequency penalties follow the OpenAI API.
#include "runtime/logits_processors.hpp"

#include <cmath>
#include <limits>

#include "common/error.hpp"

namespace di::runtime {

namespace {
constexpr float neg_inf = -std::numeric_limits<float>::infinity();
}  // namespace

void check_logits_row(std::span<const float> logits) {
  // A branch-free count first (it vectorizes); the slow search only runs on a bad row.
  constexpr float pos_inf = std::numeric_limits<float>::infinity();
  std::int64_t num_bad = 0;
  for (float l : logits) num_bad += !(l < pos_inf);  // NaN and +inf both fail '<'
  if (num_bad == 0) return;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float l = logits[i];
    if (std::isnan(l) || l == std::numeric_limits<float>::infinity()) [[unlikely]] {
      DI_FAIL("logits hold {} at token {}: the model produced invalid scores, refusing to sample",
              l, i);
    }
  }
}

void apply_allowed_mask(std::span<float> logits, std::span<const std::uint32_t> mask) {
  const auto vocab_size = static_cast<std::int64_t>(logits.size());
  DI_CHECK(static_cast<std::int64_t>(mask.size()) == allowed_mask_words(vocab_size),
           "allowed-token mask has {} words, a vocabulary of {} needs {}", mask.size(), vocab_size,
           allowed_mask_words(vocab_size));
  for (std::int64_t i = 0; i < vocab_size; ++i) {
    if (((mask[i >> 5] >> (i & 31)) & 1u) == 0) logits[i] = neg_inf;
  }
}

void suppress_tokens(std::span<float> logits, std::span<const std::int32_t> ids) {
  for (std::int32_t id : ids) {
    DI_CHECK(id >= 0 && static_cast<std::size_t>(id) < logits.size(),
             "suppressed token id {} is outside the vocabulary [0, {})", id, logits.size());
    logits[id] = neg_inf;
  }
}

void apply_penalties(std::span<float> logits, const token_counts& counts,
                     const sampling_params& params) {
  const double repetition = params.repetition_penalty;
  for (const token_counts::entry& e : counts.entries()) {
    DI_CHECK(static_cast<std::size_t>(e.id) < logits.size(),
             "penalized token id {} is outside the vocabulary [0, {})", e.id, logits.size());
    double x = logits[e.id];
    x = x > 0 ? x / repetition : x * repetition;
    if (e.num_output > 0) {
      x -= params.frequency_penalty * e.num_output + params.presence_penalty;
    }
    const auto adjusted = static_cast<float>(x);
    DI_CHECK(adjusted != std::numeric_limits<float>::infinity(),
             "penalties overflowed the logit of token {} to +inf", e.id);
    logits[e.id] = adjusted;
  }
}

}  // namespace di::runtime
