// openai_chat_messages: the chat endpoint's message rules shared by the HTTP server and
// `generate --chat` -- what passes and how it is rewritten, each refusal's parameter, and that
// a problem stays an error even when the caller's callback does not throw.
#include "common/error.hpp"
#include "model/chat_template/openai_messages.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace di::test {

namespace {

using ojson = nlohmann::ordered_json;

struct refusal : std::runtime_error {
  std::string param;
  refusal(std::string p, const std::string& why) : std::runtime_error(why), param(std::move(p)) {}
};

/// The parameter the first problem of `messages` names ("" when there is none).
std::string refused_param(const char* messages) {
  try {
    openai_chat_messages(
        ojson::parse(messages),
        [](const std::string& param, const std::string& why) { throw refusal(param, why); });
  } catch (const refusal& r) {
    return r.param;
  }
  return "";
}

}  // namespace

TEST_CASE("chat messages: developer becomes system, text parts join, other keys stay") {
  // Parts are joined with a newline, as vLLM joins them (they were joined with nothing).
  const ojson out = openai_chat_messages(
      ojson::parse(R"([{"role": "developer", "content": [{"type": "text", "text": "a"},
                        {"type": "text", "text": "b"}]},
                       {"role": "assistant", "tool_calls": [{"id": "x", "type": "function",
                        "function": {"name": "f", "arguments": "{}"}}]}])"),
      [](const std::string& p, const std::string& w) { throw refusal(p, w); });
  REQUIRE(out.size() == 2);
  CHECK(out[0]["role"] == "system");
  CHECK(out[0]["content"] == "a\nb");
  CHECK(out[1]["content"].is_null());
  CHECK(out[1]["tool_calls"][0]["id"] == "x");
}

TEST_CASE("chat messages: short text parts -- a bare string (vLLM's), a text without a type") {
  const ojson out = openai_chat_messages(
      ojson::parse(R"([{"role": "user", "content": ["a", {"text": "b"}, {"type": "text",
                                                     "text": "c"}]}])"),
      [](const std::string& p, const std::string& w) { throw refusal(p, w); });
  CHECK(out[0]["content"] == "a\nb\nc");
  // still refused: a part of another type, a text that is not a string, a string-less object
  CHECK(refused_param(R"([{"role": "user", "content": [{"type": "image_url", "text": "a"}]}])") ==
        "messages[0].content");
  CHECK(refused_param(R"([{"role": "user", "content": [{"text": 5}]}])") == "messages[0].content");
  CHECK(refused_param(R"([{"role": "user", "content": [{"image_url": "x"}]}])") ==
        "messages[0].content");
  CHECK(refused_param(R"([{"role": "user", "content": [5]}])") == "messages[0].content");
}

TEST_CASE("chat messages: each refusal names its parameter") {
  CHECK(refused_param(R"([{"role": "user", "content": "q"}])").empty());
  CHECK(refused_param("[]") == "messages");
  CHECK(refused_param(R"({"role": "user"})") == "messages");
  CHECK(refused_param(R"(["q"])") == "messages[0]");
  CHECK(refused_param(R"([{"content": "q"}])") == "messages[0].role");
  CHECK(refused_param(R"([{"role": 5, "content": "q"}])") == "messages[0].role");
  CHECK(refused_param(R"([{"role": "user", "content": "q"}, {"role": "usr", "content": "q"}])") ==
        "messages[1].role");
  CHECK(refused_param(R"([{"role": "user"}])") == "messages[0].content");
  // an assistant message with neither content nor tool calls would vanish from the prompt
  CHECK(refused_param(R"([{"role": "user", "content": "a"}, {"role": "assistant"}])") ==
        "messages[1].content");
  CHECK(refused_param(R"([{"role": "assistant", "content": null, "tool_calls": []}])") ==
        "messages[0].content");
  CHECK(refused_param(R"([{"role": "assistant", "tool_calls": {"id": "x"}}])") ==
        "messages[0].tool_calls");
  CHECK(refused_param(R"([{"role": "user", "content": 5}])") == "messages[0].content");
  CHECK(refused_param(R"([{"role": "user", "content": [{"type": "image_url"}]}])") ==
        "messages[0].content");
}

TEST_CASE("chat messages: name, tool_call_id, refusal and tool calls have OpenAI's types") {
  // null counts as absent
  CHECK(refused_param(R"([{"role": "user", "content": "q", "name": "ann"},
                          {"role": "assistant", "content": "a", "name": null, "refusal": null},
                          {"role": "assistant", "content": null, "tool_calls": [{"id": "c1",
                           "type": "function", "function": {"name": "f",
                           "arguments": "{\"x\": 1}"}}]},
                          {"role": "tool", "content": "r", "tool_call_id": "c1"}])")
            .empty());
  // each was accepted and reached the template, which ignored it or failed naming `messages`
  CHECK(refused_param(R"([{"role": "user", "content": "q"}, {"role": "user", "content": "q",
                          "name": 5}])") == "messages[1].name");
  CHECK(refused_param(R"([{"role": "tool", "content": "r", "tool_call_id": 5}])") ==
        "messages[0].tool_call_id");
  CHECK(refused_param(R"([{"role": "assistant", "content": "a", "refusal": ["no"]}])") ==
        "messages[0].refusal");
  const auto call = [](const char* fields) {
    return refused_param(
        fmt::format(R"([{{"role": "assistant", "content": null, "tool_calls": [{{"id": "c0", )"
                    R"("type": "function", "function": {{"name": "f", "arguments": "{{}}"}}}}, )"
                    R"({}]}}])",
                    fields)
            .c_str());
  };
  const std::string at = "messages[0].tool_calls[1]";
  CHECK(call("5") == at);
  CHECK(call(R"({"id": 7, "type": "function", "function": {"name": "f", "arguments": "{}"}})") ==
        at + ".id");
  CHECK(call(R"({"id": "c1", "function": {"name": "f", "arguments": "{}"}})") == at + ".type");
  CHECK(call(R"({"id": "c1", "type": "custom", "custom": {"name": "f", "input": ""}})") ==
        at + ".type");
  CHECK(call(R"({"id": "c1", "type": "function"})") == at + ".function");
  CHECK(call(R"({"id": "c1", "type": "function", "function": "f"})") == at + ".function");
  CHECK(call(R"({"id": "c1", "type": "function", "function": {"arguments": "{}"}})") ==
        at + ".function.name");
  CHECK(call(R"({"id": "c1", "type": "function", "function": {"name": 5, "arguments": "{}"}})") ==
        at + ".function.name");
  CHECK(call(R"({"id": "c1", "type": "function", "function": {"name": "f"}})") ==
        at + ".function.arguments");
  CHECK(
      call(
          R"({"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}})") ==
      at + ".function.arguments");
}

/// The message of the first problem of `messages` ("" when there is none).
static std::string refusal_message(const char* messages) {
  try {
    openai_chat_messages(
        ojson::parse(messages),
        [](const std::string& param, const std::string& why) { throw refusal(param, why); });
  } catch (const refusal& r) {
    return r.what();
  }
  return "";
}

TEST_CASE("chat messages: a tool call's id and a tool message's tool_call_id are required") {
  // OpenAI's API and vLLM's message types require both; the DeepSeek templates write neither,
  // and both were optional
  const char* no_id = R"([{"role": "assistant", "content": null, "tool_calls": [{"type":
                          "function", "function": {"name": "f", "arguments": "{}"}}]}])";
  CHECK(refused_param(no_id) == "messages[0].tool_calls[0].id");
  CHECK(refusal_message(no_id).find("'messages[0].tool_calls[0].id' is required: a string") == 0);
  CHECK(refused_param(R"([{"role": "assistant", "content": null, "tool_calls": [{"id": null,
                          "type": "function", "function": {"name": "f", "arguments": "{}"}}]}])") ==
        "messages[0].tool_calls[0].id");
  const char* no_call_id =
      R"([{"role": "user", "content": "q"}, {"role": "tool", "content": "r"}])";
  CHECK(refused_param(no_call_id) == "messages[1].tool_call_id");
  CHECK(refusal_message(no_call_id).find("'messages[1].tool_call_id' is required: a string") == 0);
  CHECK(refused_param(R"([{"role": "tool", "content": "r", "tool_call_id": null}])") ==
        "messages[0].tool_call_id");
  // other roles need none
  CHECK(refused_param(R"([{"role": "user", "content": "q"}, {"role": "assistant", "content":
                          "a"}])")
            .empty());
}

TEST_CASE("chat messages: a message's function_call and audio are refused, null passes") {
  // no template renders either: the call or the audio was dropped from the prompt silently
  const char* call = R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a",
                         "function_call": {"name": "f", "arguments": "{}"}}])";
  CHECK(refused_param(call) == "messages[1].function_call");
  CHECK(refusal_message(call).find("'messages[1].function_call' (OpenAI's deprecated function "
                                   "calling) is not supported; send the call as 'tool_calls'") ==
        0);
  CHECK(refused_param(R"([{"role": "assistant", "content": null, "function_call": {"name": "f",
                          "arguments": "{}"}}])") == "messages[0].function_call");
  CHECK(refused_param(R"([{"role": "user", "content": "q", "function_call": "x"}])") ==
        "messages[0].function_call");
  const char* audio = R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a",
                          "audio": {"id": "audio_1"}}])";
  CHECK(refused_param(audio) == "messages[1].audio");
  CHECK(refusal_message(audio).find("'messages[1].audio' (a previous audio answer) is not "
                                    "supported") == 0);
  CHECK(refused_param(R"([{"role": "assistant", "content": "a", "audio": 5}])") ==
        "messages[0].audio");
  // a returned message sent back: its unset fields are null
  CHECK(refused_param(R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a",
                          "function_call": null, "audio": null, "refusal": null,
                          "tool_calls": null}])")
            .empty());
}

TEST_CASE("chat messages: an object as a tool call's arguments is refused as not a JSON string") {
  CHECK_THROWS_WITH_AS(
      openai_chat_messages(ojson::parse(R"([{"role": "assistant", "content": null, "tool_calls": [
                                          {"id": "c1", "type": "function", "function": {
                                           "name": "f", "arguments": {"x": 1}}}]}])"),
                           [](const std::string&, const std::string&) {}),
      doctest::Contains("messages[0].tool_calls[0].function.arguments: "
                        "'messages[0].tool_calls[0].function.arguments' must be a JSON string"),
      di::error);
}

TEST_CASE("chat messages: a callback that returns still ends in an error") {
  int reported = 0;
  CHECK_THROWS_WITH_AS(
      openai_chat_messages(ojson::parse(R"([{"role": 5}])"),
                           [&](const std::string&, const std::string&) { ++reported; }),
      "messages[0].role: a message needs a string 'role'", di::error);
  CHECK(reported == 1);
}

}  // namespace di::test
