// One request generated start to finish in this process, on the CPU reference engine, through
// the same pieces the actor runtime uses: the runtime scheduler (admission, sampling plan,
// streaming detokenizer, stop checker) and the CPU model runner (forward and sampling), in one
// thread. `deepinfer generate` is a thin CLI over it.
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
  std::unique_ptr<tok::tokenizer> tokenizer;
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

struct generation_request {
  std::vector<std::int32_t> prompt_ids;
  runtime::sampling_params params;  ///< validated by generate()
  /// Called with text as soon as it is final (never part of a UTF-8 character or of a
  /// possible stop string).
  std::function<void(const std::string&)> on_text;
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

/// Generates one completion. Invalid input (ids outside the vocabulary, a prompt that does
/// not fit the context, bad sampling values, a response_format that does not compile) throws
/// di::error before any work; the grammar is compiled here, before the step loop.
generation_result generate(const loaded_model& m, const generation_request& request);

}  // namespace di::cli
