// Token sampling for the CPU reference engine: one row of fp32 logits plus a request's sampling
// state in, one token (and its raw logprobs) out, in vLLM's order: allowed mask and suppressed
// tokens -> penalties -> greedy argmax, or temperature -> top-k -> top-p -> min-p -> draw.
// The draw at step n of a request depends only on (seed, n) (sampling_rng.hpp), so a seeded
// request gives the same tokens however it is batched.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/detail/token_filter.hpp"
#include "runtime/logprobs.hpp"
#include "runtime/sampling_params.hpp"
#include "runtime/token_counts.hpp"

namespace di::runtime {

/// One row to sample. Spans and pointers are borrowed for the duration of the call.
struct sample_request {
  std::span<const float> logits;                 ///< [vocab_size] raw logits of this row
  const sampling_params* params = nullptr;       ///< the request's parameters (required)
  std::uint64_t seed = 0;                        ///< params->seed, or draw_request_seed()
  std::int64_t step = 0;                         ///< index of the token being generated
  const token_counts* counts = nullptr;          ///< prompt + output tokens; null = none yet
  std::span<const std::uint32_t> allowed_mask;   ///< [allowed_mask_words(vocab)]; empty = all
  std::span<const std::int32_t> suppressed_ids;  ///< forced to -inf (EOS before min_tokens)
};

struct sample_result {
  std::int32_t token_id = -1;
  std::optional<position_logprobs> logprobs;  ///< raw logprobs, when params->logprobs is set
};

/// One row of a batch: the result, or why that row (and only that row) failed.
struct sample_outcome {
  sample_result result;
  std::string error;  ///< empty on success
  bool is_ok() const { return error.empty(); }
};

/// The exact distribution a row is sampled from, after every edit and filter.
struct token_distribution {
  std::vector<std::int32_t> ids;  ///< ascending
  std::vector<double> probs;      ///< [ids.size()], sums to 1
};

/// Samples rows one at a time, reusing its scratch buffers. Not thread-safe: one per executor.
///
/// The exact rules (a CUDA sampler must follow them), on the adjusted logits l (after mask,
/// suppression and penalties), with m the largest finite l:
/// - greedy (temperature < 1e-5): the lowest id among the tokens with the largest l.
/// - weight of a token: w = exp(-((m - l) / T)), in double; the top token has w = 1.
/// - top-k: keep l >= the k-th largest finite logit, counting repeats. Every token tied with
///   the k-th is kept, so more than k tokens can survive (as vLLM and HF do).
/// - top-p: over the top-k survivors, keep the shortest prefix in descending-l order whose
///   weight reaches top_p times the survivors' total weight, plus every token whose l equals
///   that prefix's last; ties never split.
/// - min-p: keep w >= min_p (probability >= min_p times the top probability).
/// - tokens whose weight underflows to 0 are never kept; the top token always is.
/// - draw: u = random_uniform(seed, step); walk the kept tokens in ascending id order, summing
///   weights in double; take the first whose running sum exceeds u times the kept total (the
///   last kept token if rounding leaves none). Ids order the walk only: no filter depends on
///   them, and ascending ids need no sort (a GPU twin can use a prefix sum).
/// Raw logprobs, when asked, come from the unedited row (vLLM's default "raw_logprobs").
class sampler {
 public:
  /// Samples one token. Throws di::error on NaN/+inf logits, a fully masked row, a mask of the
  /// wrong size, or out-of-range token ids in the request state.
  sample_result sample(const sample_request& request);

  /// Samples every row (one engine step). A failing row reports its error; the others sample.
  std::vector<sample_outcome> sample_batch(std::span<const sample_request> requests);

  /// The distribution sample() draws from (a single token with probability 1 when greedy).
  token_distribution distribution(const sample_request& request);

 private:
  /// Validates the request and returns its logits after mask, suppression and penalties.
  std::span<const float> adjusted_logits(const sample_request& request);
  std::int32_t choose(std::span<const float> logits, const sample_request& request);

  std::vector<float> adjusted_;  // [vocab] scratch: the edited copy of the row
  detail::token_filter filter_;
};

/// The lowest id among the largest logits (greedy decoding's deterministic tie-break).
std::int32_t argmax_lowest_id(std::span<const float> logits);

}  // namespace di::runtime
