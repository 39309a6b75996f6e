// Per-request sampling parameters (the OpenAI / vLLM set) and their validation. The router
// validates every request at admission, so the sampler and the scheduler can trust them; each
// error names the offending parameter the way OpenAI and vLLM do.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace di::runtime {

/// Server-side limits that bound what a request may ask for.
struct sampling_limits {
  int max_logprobs = 20;  ///< the largest `logprobs` / `prompt_logprobs` accepted
};

/// How one request chooses its tokens and when it stops. Defaults sample from the plain softmax.
struct sampling_params {
  double temperature = 1.0;            ///< 0 (below 1e-5) = greedy; must be >= 0
  int top_k = 0;                       ///< keep the k most likely tokens; 0 or -1 = off
  double top_p = 1.0;                  ///< nucleus mass in (0, 1]; 1 = off
  double min_p = 0.0;                  ///< drop tokens below min_p * max probability; 0 = off
  double repetition_penalty = 1.0;     ///< HF semantics over prompt + output tokens; 1 = off
  double presence_penalty = 0.0;       ///< OpenAI: subtracted once per token seen in the output
  double frequency_penalty = 0.0;      ///< OpenAI: subtracted per occurrence in the output
  std::optional<std::uint64_t> seed;   ///< fixes the random stream; unset = drawn at admission
  std::optional<int> logprobs;         ///< top-N logprobs of every generated token
  std::optional<int> prompt_logprobs;  ///< top-N logprobs of every prompt token
  std::optional<int> max_tokens;       ///< generated-token budget; unset = up to the context
  /// Until this many tokens exist, the scheduler passes EOS and stop_token_ids to the sampler
  /// as sample_request::suppressed_ids, and stop strings end the request only once they are
  /// completed by token min_tokens or a later one (vLLM's rule). A response_format whose text
  /// is done (nothing may follow) still ends the request.
  int min_tokens = 0;
  std::vector<std::string> stop;             ///< stop strings (matched on detokenized text)
  std::vector<std::int32_t> stop_token_ids;  ///< extra token ids that end generation
  /// Keep generating after EOS. With a response_format: EOS is kept out while the grammar may
  /// go on, and still ends the request once nothing may follow.
  bool ignore_eos = false;
  bool skip_special_tokens = true;           ///< drop special tokens from the detokenized text
  bool include_stop_str_in_output = false;   ///< keep the matched stop string (vLLM's option)
  /// Structured output: the grammar the text must match, in the inline syntax of
  /// runtime/grammar/response_format.hpp ("json_schema:<schema JSON>", "json_object",
  /// "regex:<pattern>", "ebnf:<grammar>"); empty = free text. The runner masks every step to
  /// the grammar and allows only EOS once the text is complete.
  std::string response_format;
  /// vLLM's cache_salt: "" = none; else the prefix cache shares this request's blocks only with
  /// requests of the same salt (runtime/block_manager.hpp, prefix_root).
  std::string cache_salt;

  /// True when the request takes the argmax (temperature below 1e-5, as vLLM).
  bool is_greedy() const;
  /// True when any of the three penalties is active.
  bool has_penalties() const;
  /// Throws di::error naming the first invalid parameter ("top_p must be in (0, 1], got 0").
  void validate(std::int64_t vocab_size, const sampling_limits& limits = {}) const;
};

/// Temperatures below this are treated as greedy (vLLM's _SAMPLING_EPS).
inline constexpr double greedy_temperature_eps = 1e-5;

}  // namespace di::runtime
