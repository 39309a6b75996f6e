// The JSON the OpenAI API answers with: completion and chat completion objects, their stream
// chunks, usage, and the logprobs layouts of both endpoints (completions: tokens /
// token_logprobs / top_logprobs / text_offset; chat: content entries with bytes).
#pragma once

#include "runtime/logprobs.hpp"
#include "server/openai_request.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/tokenizer.hpp"

namespace di::server {

/// What one choice produced so far.
struct choice_output {
  std::string text;
  std::vector<std::int32_t> token_ids;
  std::vector<runtime::position_logprobs> logprobs;
  std::vector<std::optional<runtime::position_logprobs>> prompt_logprobs;
  std::string finish_reason;   ///< empty while running
  nlohmann::ordered_json stop_reason;  ///< the stop string or token id, else null
};

/// The fields every object of one response shares.
struct response_header {
  std::string id;
  std::int64_t created = 0;
  std::string model;
  api_kind kind = api_kind::completion;
};

struct usage_counts {
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  std::int64_t cached_tokens = 0;
};

nlohmann::ordered_json usage_json(const usage_counts& u);

/// The text of a token for display: its bytes, each maximal invalid UTF-8 subpart shown as one
/// U+FFFD (Python's decode("utf-8", "replace")). di::error for an id the tokenizer has no
/// token for.
std::string token_text(const tok::tokenizer& tok, std::int32_t id);

/// Where each token's text begins in the text of all of them, in characters (code points, as
/// OpenAI's text_offset counts them in the returned text): tokens are detokenized as the text
/// is, so a token that completes no character (part of a UTF-8 sequence) shares the offset of
/// the token that completes it, and a token after a fragment that never completes begins after
/// the fragment's U+FFFD.
class text_offsets {
 public:
  text_offsets(const tok::tokenizer& tok, bool skip_special_tokens);
  /// The offset of the text token `id` completes, which then follows it.
  std::size_t push(std::int32_t id);
  std::size_t num_chars() const { return chars_; }

 private:
  tok::incremental_detokenizer detok_;
  std::size_t chars_ = 0;
};

/// Code points of valid UTF-8 text.
std::size_t count_chars(std::string_view text);

/// The tokens the router's encoding of a text prompt (encode with add_bos) puts around the
/// text's own: BOS before and EOS after, as tokenizer_config.json's add_bos_token and
/// add_eos_token say.
struct tokens_around_text {
  std::size_t num_before = 0;
  std::size_t num_after = 0;
};
tokens_around_text tokens_added_around_text(const tok::tokenizer& tok);

/// The text_offset of each token of a prompt that completions' `echo` returns, in characters
/// of the echoed prompt. A token-id prompt (`is_text` false) is echoed as it decodes, by the
/// output's decoder (`skip_special_tokens`). A text prompt is echoed as sent, where a special
/// token's text written in it ("<｜end▁of▁sentence｜>") is that token and shows: its own tokens
/// count every token's text, and those the router put around them (tokens_added_around_text)
/// have none. The ids are the router's; nothing is encoded again.
std::vector<std::size_t> echo_text_offsets(const tok::tokenizer& tok,
                                           const std::vector<std::int32_t>& prompt_ids,
                                           bool is_text, bool skip_special_tokens);

/// Completions logprobs of `entries` (prompt entries may be null); `offsets[i]` is token i's
/// text_offset. Each top_logprobs dict holds the top tokens, then the position's own token when
/// it is not among them; of tokens with equal texts the first keeps the key. `as_token_ids`
/// (vLLM's return_tokens_as_token_ids): tokens are named "token_id:N", not by their text.
nlohmann::ordered_json completion_logprobs(
    const tok::tokenizer& tok, const std::vector<std::int32_t>& ids,
    const std::vector<const runtime::position_logprobs*>& entries,
    const std::vector<std::size_t>& offsets, bool as_token_ids = false);
/// Chat logprobs {"content": [...]} of generated entries; `as_token_ids` as above (`bytes` stay
/// the token's own, as vLLM's do).
nlohmann::ordered_json chat_logprobs(const tok::tokenizer& tok,
                                     const std::vector<runtime::position_logprobs>& entries,
                                     bool as_token_ids = false);

/// A whole (non-streamed) response; `choices` already hold the final JSON of each choice.
nlohmann::ordered_json full_response(const response_header& h, nlohmann::ordered_json choices,
                                     const usage_counts& u);
/// One stream chunk with `choices` (may be empty for the usage chunk).
nlohmann::ordered_json stream_chunk(const response_header& h, nlohmann::ordered_json choices);

/// JSON text for the wire (invalid UTF-8 replaced, never throws for it).
std::string dump(const nlohmann::ordered_json& j);

}  // namespace di::server
