// Validation of sampling parameters. Messages follow vLLM's wording ("<name> must be ..., got
// <value>") so that clients see the same errors as from other OpenAI-compatible servers.
#include "runtime/sampling_params.hpp"

#include <cmath>

#include "common/error.hpp"
#include "runtime/failure.hpp"

namespace di::runtime {
namespace {

void check_finite(double value, const char* name) {
  DI_CHECK_PARAM(std::isfinite(value), name, "{} must be a finite number, got {}", name, value);
}

/// Checks `value` in [lo, hi] (NaN fails every comparison, so it is reported too).
void check_closed_range(double value, double lo, double hi, const char* name) {
  DI_CHECK_PARAM(value >= lo && value <= hi, name, "{} must be in [{}, {}], got {}", name, lo, hi,
                 value);
}

void check_logprobs(const std::optional<int>& value, const char* name,
                    const sampling_limits& limits) {
  if (!value) return;
  DI_CHECK_PARAM(*value >= 0, name, "{} must be >= 0, got {}", name, *value);
  DI_CHECK_PARAM(*value <= limits.max_logprobs, name,
                 "{} must be <= {} (the limit max_logprobs), got {}", name, limits.max_logprobs,
                 *value);
}

void check_filters(const sampling_params& p) {
  check_finite(p.temperature, "temperature");
  DI_CHECK_PARAM(p.temperature >= 0, "temperature", "temperature must be >= 0, got {}",
                 p.temperature);
  DI_CHECK_PARAM(p.top_k >= -1, "top_k", "top_k must be -1 or 0 (disabled) or at least 1, got {}",
                 p.top_k);
  DI_CHECK_PARAM(p.top_p > 0 && p.top_p <= 1, "top_p", "top_p must be in (0, 1], got {}", p.top_p);
  check_closed_range(p.min_p, 0, 1, "min_p");
}

void check_penalties(const sampling_params& p) {
  check_finite(p.repetition_penalty, "repetition_penalty");
  DI_CHECK_PARAM(p.repetition_penalty > 0, "repetition_penalty",
                 "repetition_penalty must be > 0, got {}", p.repetition_penalty);
  check_closed_range(p.presence_penalty, -2, 2, "presence_penalty");
  check_closed_range(p.frequency_penalty, -2, 2, "frequency_penalty");
}

void check_stopping(const sampling_params& p, std::int64_t vocab_size) {
  if (p.max_tokens) {
    DI_CHECK_PARAM(*p.max_tokens >= 1, "max_tokens", "max_tokens must be at least 1, got {}",
                   *p.max_tokens);
  }
  DI_CHECK_PARAM(p.min_tokens >= 0, "min_tokens", "min_tokens must be >= 0, got {}", p.min_tokens);
  if (p.max_tokens) {
    DI_CHECK_PARAM(p.min_tokens <= *p.max_tokens, "min_tokens",
                   "min_tokens must be <= max_tokens ({}), got {}", *p.max_tokens, p.min_tokens);
  }
  for (const std::string& s : p.stop) {
    DI_CHECK_PARAM(!s.empty(), "stop", "stop must not contain an empty string");
  }
  for (std::int32_t id : p.stop_token_ids) {
    DI_CHECK_PARAM(id >= 0 && id < vocab_size, "stop_token_ids",
                   "stop_token_ids must be token ids in [0, {}), got {}", vocab_size, id);
  }
}

}  // namespace

bool sampling_params::is_greedy() const {
  return temperature < greedy_temperature_eps;
}

bool sampling_params::has_penalties() const {
  return repetition_penalty != 1.0 || presence_penalty != 0.0 || frequency_penalty != 0.0;
}

void sampling_params::validate(std::int64_t vocab_size, const sampling_limits& limits) const {
  DI_CHECK(vocab_size > 0, "vocab_size must be positive, got {}", vocab_size);
  check_filters(*this);
  check_penalties(*this);
  check_logprobs(logprobs, "logprobs", limits);
  check_logprobs(prompt_logprobs, "prompt_logprobs", limits);
  check_stopping(*this, vocab_size);
}

}  // namespace di::runtime
