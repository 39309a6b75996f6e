// Raw logprobs: one max pass, one double-precision sum of exponentials, and a small top-N
// selection (insertion into a sorted buffer for small N, partial_sort for large N).
#include "runtime/logprobs.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/error.hpp"
#include "runtime/detail/row_reduce.hpp"
#include "runtime/logits_processors.hpp"

namespace di::runtime {
namespace {

/// log(sum(exp(logits))) in double; the row must be checked (no NaN/+inf).
double log_sum_exp(std::span<const float> logits) {
  const float max_logit = detail::max_logit(logits);
  DI_CHECK(max_logit > -std::numeric_limits<float>::infinity(),
           "every logit of the row is -inf: no distribution to report logprobs from");
  const double m = max_logit;
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - m);
  return m + std::log(sum);
}

/// True when token a ranks before token b: higher logit, ties by lower id.
bool ranks_before(std::span<const float> logits, std::int32_t a, std::int32_t b) {
  return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
}

/// The `n` best token ids in rank order.
std::vector<std::int32_t> top_ids(std::span<const float> logits, int n) {
  const auto vocab_size = static_cast<std::int32_t>(logits.size());
  n = std::min(n, vocab_size);
  std::vector<std::int32_t> ids;
  if (n <= 0) return ids;
  auto before = [&](std::int32_t a, std::int32_t b) { return ranks_before(logits, a, b); };
  if (n > 64) {
    ids.resize(vocab_size);
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), before);
    ids.resize(n);
    return ids;
  }
  ids.reserve(n + 1);
  for (std::int32_t i = 0; i < vocab_size; ++i) {
    // Ids arrive ascending, so a tie with the current last never displaces it.
    if (static_cast<int>(ids.size()) == n && !(logits[i] > logits[ids.back()])) continue;
    ids.insert(std::upper_bound(ids.begin(), ids.end(), i, before), i);
    if (static_cast<int>(ids.size()) > n) ids.pop_back();
  }
  return ids;
}

}  // namespace

position_logprobs compute_logprobs(std::span<const float> logits, std::int32_t token_id,
                                   int num_top) {
  check_logits_row(logits);
  DI_CHECK(token_id >= 0 && static_cast<std::size_t>(token_id) < logits.size(),
           "token id {} is outside the vocabulary [0, {})", token_id, logits.size());
  DI_CHECK(num_top >= 0, "the number of top logprobs must be >= 0, got {}", num_top);
  const double lse = log_sum_exp(logits);
  auto logprob = [&](std::int32_t id) {
    return static_cast<float>(static_cast<double>(logits[id]) - lse);
  };
  position_logprobs out;
  out.id = token_id;
  out.logprob = logprob(token_id);
  const float token_logit = logits[token_id];
  out.rank = std::count_if(logits.begin(), logits.end(), [&](float l) { return l >= token_logit; });
  for (std::int32_t id : top_ids(logits, num_top)) out.top.push_back({id, logprob(id)});
  return out;
}

std::vector<std::optional<position_logprobs>> compute_prompt_logprobs(
    std::span<const float> logits, std::int64_t vocab_size,
    std::span<const std::int32_t> prompt_ids, int num_top) {
  DI_CHECK(vocab_size > 0, "vocab_size must be positive, got {}", vocab_size);
  const auto num_tokens = static_cast<std::int64_t>(prompt_ids.size());
  const std::int64_t num_rows = std::max<std::int64_t>(num_tokens - 1, 0);
  DI_CHECK(static_cast<std::int64_t>(logits.size()) == num_rows * vocab_size,
           "prompt logprobs need {} rows of {} logits for a {}-token prompt, got {} values",
           num_rows, vocab_size, num_tokens, logits.size());
  std::vector<std::optional<position_logprobs>> out(prompt_ids.size());
  for (std::int64_t i = 1; i < num_tokens; ++i) {
    // Row i - 1 is the model's output at position i - 1, which predicted token i.
    out[i] =
        compute_logprobs(logits.subspan((i - 1) * vocab_size, vocab_size), prompt_ids[i], num_top);
  }
  return out;
}

}  // namespace di::runtime
