// openai_chat_messages (see openai_messages.hpp).
#include "model/chat_template/openai_messages.hpp"

#include "common/error.hpp"
#include "common/json_brief.hpp"

#include <fmt/format.h>

namespace di {

namespace {

using ojson = nlohmann::ordered_json;

/// Chat content: a string, or text parts [{"type": "text", "text": ...}] joined with a newline,
/// as vLLM joins them (they were joined with nothing: ["Question:", "Why?"] rendered as
/// "Question:Why?", a prompt vLLM never shows the model). A bare string is a text part too, as
/// in vLLM, and so is an object with a string "text" and no "type" (both were refused). An
/// assistant message (`is_assistant`) may also hold refusal parts ({"type": "refusal",
/// "refusal": ...}, as OpenAI's schema has them there): their text is joined too (they were
/// refused, so a conversation holding a refused answer could not go on).
ojson content_text(const ojson& content, const std::string& param, bool is_assistant,
                   const message_error& fail) {
  if (content.is_null() || content.is_string()) return content;
  if (!content.is_array()) fail(param, "content must be a string or a list of text parts");
  std::string text;
  for (std::size_t k = 0; k < content.size(); ++k) {
    const ojson& part = content[k];
    if (k > 0) text += '\n';
    if (part.is_string()) {
      text += part.get<std::string>();
      continue;
    }
    if (is_assistant && part.is_object() && part.value("type", ojson()) == "refusal") {
      const auto refusal = part.find("refusal");
      if (refusal == part.end() || !refusal->is_string())
        fail(param,
             fmt::format("'{}[{}]' is a refusal part: it needs a string 'refusal' "
                         "({{\"type\": \"refusal\", \"refusal\": ...}}){}",
                         param, k,
                         refusal == part.end() ? std::string() : ", got " + json_brief(*refusal)));
      text += refusal->get<std::string>();
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

/// The member `key` of `object` unless absent or null (null counts as absent, as the official
/// clients send it for unset optional fields).
const ojson* member(const ojson& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

/// Refuses `object[key]` unless it is absent, null or a string. `what` is its path.
void check_string(const ojson& object, const char* key, const std::string& what,
                  const message_error& fail) {
  if (const ojson* v = member(object, key); v != nullptr && !v->is_string())
    fail(what, fmt::format("'{}' must be a string, got {}", what, json_brief(*v)));
}

/// Refuses `object[key]` unless it is a string (absent and null are refused too). `what` is its
/// path; `why` says what the string is for.
void require_string(const ojson& object, const char* key, const std::string& what, const char* why,
                    const message_error& fail) {
  const ojson* v = member(object, key);
  if (v == nullptr || !v->is_string())
    fail(what, fmt::format("'{}' is required: a string, {}{}", what, why,
                           v == nullptr ? std::string() : ", got " + json_brief(*v)));
}

/// One entry of an assistant message's tool_calls, as OpenAI defines it: {"id": string,
/// "type": "function", "function": {"name": string, "arguments": string}}. The type, name and
/// arguments are required because the template writes them (a missing one, or an object as
/// arguments, failed inside the template with an error naming only `messages`); the id
/// because OpenAI's API and vLLM's message types require it -- the tool message answering the
/// call names it -- although the DeepSeek templates write neither (it could be absent). The
/// arguments stay the JSON text the client sent.
void check_tool_call(const ojson& call, const std::string& at, const message_error& fail) {
  if (!call.is_object())
    fail(at, fmt::format("'{}' must be an object {{\"id\": ..., \"type\": \"function\", "
                         "\"function\": {{\"name\": ..., \"arguments\": ...}}}}",
                         at));
  require_string(call, "id", at + ".id",
                 "the call's id, which the tool message answering it repeats as tool_call_id",
                 fail);
  if (const ojson* type = member(call, "type"); type == nullptr || *type != "function")
    fail(at + ".type", fmt::format("'{}.type' must be \"function\"{}", at,
                                   type == nullptr ? std::string() : ", got " + json_brief(*type)));
  const ojson* fn = member(call, "function");
  if (fn == nullptr || !fn->is_object())
    fail(at + ".function",
         fmt::format("'{}.function' must be an object with a string 'name' and 'arguments'", at));
  const ojson* name = member(*fn, "name");
  if (name == nullptr || !name->is_string())
    fail(at + ".function.name",
         fmt::format("'{}.function.name' must be a string naming the function{}", at,
                     name == nullptr ? std::string() : ", got " + json_brief(*name)));
  const ojson* arguments = member(*fn, "arguments");
  if (arguments == nullptr || !arguments->is_string())
    fail(at + ".function.arguments",
         fmt::format("'{}.function.arguments' must be a JSON string: the arguments as JSON text, "
                     "as the API returns them ('{{\"x\": 1}}', not an object){}",
                     at, arguments == nullptr ? std::string() : ", got " + json_brief(*arguments)));
}

/// The fields OpenAI's schema types beside role and content: `name`, `tool_call_id` and
/// `refusal` are strings (null counts as absent), each tool call as check_tool_call says. They
/// were not checked: "name": 5 passed, and a malformed tool call reached the template. A tool
/// message's `tool_call_id` is required, as OpenAI's API and vLLM's message types require it
/// (the DeepSeek templates do not write it; it was optional).
///
/// An assistant message's deprecated `function_call` and `audio` are refused, as the request's
/// top-level `function_call` / `functions` and `audio` are (openai_request.cpp): no template
/// renders them, so the model never saw the call or the audio (vLLM drops both silently). A
/// function_call is not turned into a tool call: its answer -- a message of role "function" --
/// is refused as an unknown role, so such a conversation could not go on anyway. Null counts as
/// absent (clients that send a returned message back send "function_call": null, "audio": null).
void check_message_fields(const ojson& m, const std::string& param, const message_error& fail) {
  for (const char* key : {"name", "tool_call_id", "refusal"})
    check_string(m, key, fmt::format("{}.{}", param, key), fail);
  if (m["role"] == "tool")
    require_string(m, "tool_call_id", param + ".tool_call_id",
                   "the id of the tool call this message answers", fail);
  if (member(m, "function_call") != nullptr)
    fail(param + ".function_call",
         fmt::format("'{}.function_call' (OpenAI's deprecated function calling) is not "
                     "supported; send the call as 'tool_calls': [{{\"id\": ..., \"type\": "
                     "\"function\", \"function\": {{\"name\": ..., \"arguments\": ...}}}}] and "
                     "its answer as a message of role \"tool\"",
                     param));
  if (member(m, "audio") != nullptr)
    fail(param + ".audio",
         fmt::format("'{}.audio' (a previous audio answer) is not supported; this server "
                     "answers in text, and no template renders audio",
                     param));
  if (const ojson* calls = member(m, "tool_calls")) {
    if (!calls->is_array()) fail(param + ".tool_calls", "'tool_calls' must be a list");
    for (std::size_t j = 0; j < calls->size(); ++j)
      check_tool_call((*calls)[j], fmt::format("{}.tool_calls[{}]", param, j), fail);
  }
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
    msg["content"] = m.contains("content")
                         ? content_text(m["content"], param + ".content", role == "assistant", fail)
                         : ojson(nullptr);
    if (msg["content"].is_null() && role != "assistant")
      fail(param + ".content", "only assistant messages may omit 'content'");
    check_message_fields(m, param, fail);
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
