// The JSON the OpenAI API answers with: completion and chat completion objects, their stream
// chunks, usage, and the logprobs layouts of both endpoints (completions: tokens /
// token_logprobs / top_logprobs / text_offset; chat: content entries with bytes).
#pragma once

#include "runtime/logprobs.hpp"
#include "server/openai_request.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace di::tok {
class tokenizer;
}

namespace di::server {

/// What one choice produced so far.
struct choice_output {
  std::string text;
  std::vector<std::int32_t> token_ids;
  std::vector<runtime::position_logprobs> logprobs;
  std::vector<std::optional<runtime::position_logprobs>> prompt_logprobs;
  std::string finish_reason;   ///< empty while running
  nlohmann::json stop_reason;  ///< the stop string or token id, else null
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

nlohmann::json usage_json(const usage_counts& u);

/// The text of a token for display (its bytes; invalid UTF-8 shown as U+FFFD).
std::string token_text(const tok::tokenizer& tok, std::int32_t id);

/// Completions logprobs of `entries` (prompt entries may be null), text offsets from `offset`.
nlohmann::json completion_logprobs(const tok::tokenizer& tok, const std::vector<std::int32_t>& ids,
                                   const std::vector<const runtime::position_logprobs*>& entries,
                                   std::size_t offset);
/// Chat logprobs {"content": [...]} of generated entries.
nlohmann::json chat_logprobs(const tok::tokenizer& tok,
                             const std::vector<runtime::position_logprobs>& entries);

/// A whole (non-streamed) response; `choices` already hold the final JSON of each choice.
nlohmann::json full_response(const response_header& h, nlohmann::json choices,
                             const usage_counts& u);
/// One stream chunk with `choices` (may be empty for the usage chunk).
nlohmann::json stream_chunk(const response_header& h, nlohmann::json choices);

/// JSON text for the wire (invalid UTF-8 replaced, never throws for it).
std::string dump(const nlohmann::json& j);

}  // namespace di::server
