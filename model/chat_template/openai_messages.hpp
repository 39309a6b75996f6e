// OpenAI chat messages checked and turned into what a chat template sees, shared by the HTTP
// server's chat completions and `deepinfer generate --chat`, so both refuse the same input
// with the same words instead of a template silently dropping a message it does not know.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>

namespace di {

/// Called with the offending parameter ("messages[2].role") and the reason; must throw.
using message_error = std::function<void(const std::string& param, const std::string& message)>;

/// `messages` as a template sees them: a non-empty list of objects whose role is system,
/// developer (rendered as system), user, assistant or tool, whose content is a string, a list
/// of text parts ({"type": "text", "text": ...}, a bare string as in vLLM, or {"text": ...}
/// without a type; joined) or -- for assistant messages only -- also refusal parts
/// ({"type": "refusal", "refusal": ...}, their text joined), absent or null; other keys (tool_calls, name, ...) are kept, typed as OpenAI types them (a
/// tool call's id and a tool message's tool_call_id required); an assistant message's
/// deprecated function_call and its audio are refused. The first problem goes to `fail`.
nlohmann::ordered_json openai_chat_messages(const nlohmann::ordered_json& messages,
                                            const message_error& fail);

}  // namespace di
