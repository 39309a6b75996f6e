// openai_chat_messages (see openai_messages.hpp).
#include "model/chat_template/openai_messages.hpp"

#include "common/error.hpp"

#include <fmt/format.h>

namespace di {

namespace {

using ojson = nlohmann::ordered_json;

/// Chat content: a string, or text parts [{"type": "text", "text": ...}] joined. A bare string is
/// a text part too, as in vLLM, and so is an object with a string "text" and no "type" (both
/// were refused).
ojson content_text(const ojson& content, const std::string& param, const message_error& fail) {
  if (content.is_null() || content.is_string()) return content;
  if (!content.is_array()) fail(param, "content must be a string or a list of text parts");
  std::string text;
  for (const ojson& part : content) {
    if (part.is_string()) {
      text += part.get<std::string>();
      continue;
    }
    const bool is_text = part.is_object() && part.contains("text") && part["text"].is_string() &&
                         (!part.contains("type") || part["type"] == "text");
    if (!is_text)
      fail(param,
           "only text content parts ({\"type\": \"text\", \"text\": ...}, or a string) are "
           "supported");
    text += part["text"].get<std::string>();
  }
  return text;
}

}  // namespace

ojson openai_chat_messages(const ojson& messages, const message_error& report) {
  // `report` must throw; should it return, the problem is still an error, not a read of a
  // malformed message.
  const message_error fail = [&](const std::string& param, const std::string& why) {
    report(param, why);
    DI_FAIL("{}: {}", param, why);
  };
  if (!messages.is_array() || messages.empty())
    fail("messages", "'messages' must be a non-empty list");
  ojson out = ojson::array();
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ojson& m = messages[i];
    const std::string param = fmt::format("messages[{}]", i);
    if (!m.is_object()) fail(param, "each message must be an object");
    if (!m.contains("role") || !m["role"].is_string())
      fail(param + ".role", "a message needs a string 'role'");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" &&
        role != "tool")
      fail(param + ".role", fmt::format("unknown role '{}'", role));
    ojson msg = m;
    msg["role"] = role == "developer" ? "system" : role;
    msg["content"] = m.contains("content") ? content_text(m["content"], param + ".content", fail)
                                           : ojson(nullptr);
    if (msg["content"].is_null() && role != "assistant")
      fail(param + ".content", "only assistant messages may omit 'content'");
    if (m.contains("tool_calls") && !m["tool_calls"].is_null() && !m["tool_calls"].is_array())
      fail(param + ".tool_calls", "'tool_calls' must be a list");
    // An assistant message with neither would vanish from the prompt (templates render only
    // one of the two): refused, like any message the template would drop.
    if (msg["content"].is_null() &&
        !(m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty()))
      fail(param + ".content", "an assistant message needs 'content' or a non-empty 'tool_calls'");
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace di
