// The sampler (see sampler.hpp): request checks, logit edits into a scratch copy only when some
// edit applies, then greedy argmax or the filtered inverse-CDF draw, then raw logprobs.
#include "runtime/sampler.hpp"

#include <algorithm>
#include <limits>

#include "common/error.hpp"
#include "runtime/detail/row_reduce.hpp"
#include "runtime/logits_processors.hpp"
#include "runtime/sampling_rng.hpp"

namespace di::runtime {
namespace {

bool has_finite_logit(std::span<const float> logits) {
  return std::any_of(logits.begin(), logits.end(),
                     [](float l) { return l > -std::numeric_limits<float>::infinity(); });
}

detail::filter_settings filter_settings_of(const sampling_params& p) {
  return {.temperature = p.temperature, .top_k = p.top_k, .top_p = p.top_p, .min_p = p.min_p};
}

void check_request(const sample_request& request) {
  DI_CHECK(request.params != nullptr, "sample_request has no sampling_params");
  DI_CHECK(!request.logits.empty(), "cannot sample from an empty logits row");
  DI_CHECK(request.logits.size() <= static_cast<std::size_t>(std::numeric_limits<int>::max()),
           "a logits row of {} entries exceeds the 32-bit token id range", request.logits.size());
  DI_CHECK(request.step >= 0, "sampling step must be >= 0, got {}", request.step);
  // Parameters were validated at admission; checking again keeps NaN settings out of the math.
  request.params->validate(static_cast<std::int64_t>(request.logits.size()),
                           sampling_limits{.max_logprobs = std::numeric_limits<int>::max()});
  check_logits_row(request.logits);
  DI_CHECK(has_finite_logit(request.logits),
           "every logit of the row is -inf: nothing can be sampled");
}

}  // namespace

std::int32_t argmax_lowest_id(std::span<const float> logits) {
  DI_CHECK(!logits.empty(), "argmax of an empty logits row");
  return static_cast<std::int32_t>(detail::argmax_lowest_index(logits));
}

std::span<const float> sampler::adjusted_logits(const sample_request& request) {
  check_request(request);
  const sampling_params& params = *request.params;
  const bool is_penalized =
      request.counts != nullptr && params.has_penalties() && !request.counts->entries().empty();
  if (request.allowed_mask.empty() && request.suppressed_ids.empty() && !is_penalized) {
    return request.logits;
  }
  adjusted_.assign(request.logits.begin(), request.logits.end());
  if (!request.allowed_mask.empty()) apply_allowed_mask(adjusted_, request.allowed_mask);
  suppress_tokens(adjusted_, request.suppressed_ids);
  if (is_penalized) apply_penalties(adjusted_, *request.counts, params);
  DI_CHECK(has_finite_logit(adjusted_),
           "no token can be sampled: the allowed-token mask and suppressed tokens exclude every "
           "token of the vocabulary");
  return adjusted_;
}

std::int32_t sampler::choose(std::span<const float> logits, const sample_request& request) {
  if (request.params->is_greedy()) return argmax_lowest_id(logits);
  filter_.apply(logits, filter_settings_of(*request.params));
  return filter_.sample(random_uniform(request.seed, static_cast<std::uint64_t>(request.step)));
}

sample_result sampler::sample(const sample_request& request) {
  sample_result result;
  result.token_id = choose(adjusted_logits(request), request);
  if (request.params->logprobs) {
    result.logprobs = compute_logprobs(request.logits, result.token_id, *request.params->logprobs);
  }
  return result;
}

std::vector<sample_outcome> sampler::sample_batch(std::span<const sample_request> requests) {
  std::vector<sample_outcome> outcomes(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    try {
      outcomes[i].result = sample(requests[i]);
    } catch (const di::error& e) {
      outcomes[i].error = e.what();
    }
  }
  return outcomes;
}

token_distribution sampler::distribution(const sample_request& request) {
  const std::span<const float> logits = adjusted_logits(request);
  if (request.params->is_greedy()) return {.ids = {argmax_lowest_id(logits)}, .probs = {1.0}};
  filter_.apply(logits, filter_settings_of(*request.params));
  token_distribution out;
  out.ids.assign(filter_.kept_ids().begin(), filter_.kept_ids().end());
  for (double w : filter_.kept_weights()) out.probs.push_back(w / filter_.total_weight());
  return out;
}

}  // namespace di::runtime
