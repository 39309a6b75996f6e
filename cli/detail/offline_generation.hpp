// One request generated start to finish in this process, through the actor runtime: an
// in-process cluster (actors/local_cluster: router, one scheduler, one executor) whose runner
// wraps the model already loaded and placed (CPU or CUDA), and a client session that submits
// the request and hears its token events. The same actors serve `deepinfer serve` and
// clusters. `deepinfer generate` is a thin CLI over it.
#pragma once

#include "model/forward/model.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "runtime/grammar/response_format.hpp"
#include "runtime/logprobs.hpp"
#include "runtime/sampling_params.hpp"
#include "runtime/stop_checker.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace di::cli {

/// A loaded model with what generation needs beside the weights.
struct loaded_model {
  std::shared_ptr<deepseek_model> model;
  std::shared_ptr<const tok::tokenizer> tokenizer;  ///< shared with the cluster's actors
  /// Structured output (enable_structured_output): the tokenizer's bytes per token, masks of
  /// the model's vocab_size, and the compiled grammars by spec text.
  std::shared_ptr<const grammar::token_vocabulary> grammar_vocab;
  std::shared_ptr<grammar::grammar_cache> grammars;
};

/// Loads config, weights and tokenizer of `dir` (and the Engram hasher when the model has
/// Engram layers).
loaded_model load_model_for_generation(const std::string& dir, bool act_quant);

/// Builds what requests with params.response_format need (the token trie; once per model).
void enable_structured_output(loaded_model& m);

/// Rows of one prefill chunk when progress is shown (on the CPU, chunks compute bitwise what
/// one pass does).
inline constexpr std::int64_t prefill_progress_chunk = 512;

/// How far the prefill of a one-request generation has come: every ~0.5 s from 1 s after the
/// submit until its first token, then once with is_final (only if it was called before), so
/// that a progress line can be ended before the text. Calls never overlap, and on_text is not
/// called while one runs.
struct prefill_progress {
  std::int64_t done = 0;   ///< prompt tokens computed (whole chunks)
  std::int64_t total = 0;  ///< prompt tokens
  double seconds = 0;      ///< since the submit
  bool is_final = false;
};

struct generation_request {
  std::vector<std::int32_t> prompt_ids;
  runtime::sampling_params params;  ///< validated by generate()
  /// Called with text as soon as it is final (never part of a UTF-8 character or of a
  /// possible stop string).
  std::function<void(const std::string&)> on_text;
  /// Called while a long prefill runs (see prefill_progress); set, a CPU prefill of more than
  /// two prefill_progress_chunk tokens runs in chunks of that many, so that it advances.
  std::function<void(const prefill_progress&)> on_prefill_progress;
};

struct generation_result {
  std::vector<std::int32_t> output_ids;
  std::string text;
  runtime::finish_reason finish = runtime::finish_reason::none;
  std::vector<runtime::position_logprobs> logprobs;  ///< one per output token (params.logprobs)
  std::vector<std::optional<runtime::position_logprobs>> prompt_logprobs;  ///< entry 0 null
  std::uint64_t seed = 0;         ///< the seed used (drawn when the request had none)
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
};

/// Generates one completion through a local cluster started for it (its pools sized for this
/// request) and stopped before returning. Invalid input (ids outside the vocabulary, a prompt
/// that does not fit the context, bad sampling values, a response_format that does not
/// compile) throws di::error before any actor starts; the grammar is compiled here too. A
/// request the actors refuse or fail also throws di::error with their message. on_text runs
/// on the client session's thread, one call at a time, in order.
generation_result generate(const loaded_model& m, const generation_request& request);

/// `n` completions of the same request from one cluster, submitted together so that they are
/// decoded as one batch (pools sized for all of them). Completion i uses the request's seed + i
/// when it has one, else a seed of its own. on_text is not called (several streams would
/// interleave). Results come in submission order; errors as generate().
std::vector<generation_result> generate_n(const loaded_model& m, const generation_request& request,
                                          int n);

}  // namespace di::cli
