// openai_chat_messages: the chat endpoint's message rules shared by the HTTP server and
// `generate --chat` -- what passes and how it is rewritten, each refusal's parameter, and that
// a problem stays an error even when the caller's callback does not throw.
#include "common/error.hpp"
#include "model/chat_template/openai_messages.hpp"

#include <doctest/doctest.h>

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
  const ojson out = openai_chat_messages(
      ojson::parse(R"([{"role": "developer", "content": [{"type": "text", "text": "a"},
                        {"type": "text", "text": "b"}]},
                       {"role": "assistant", "tool_calls": [{"id": "x"}]}])"),
      [](const std::string& p, const std::string& w) { throw refusal(p, w); });
  REQUIRE(out.size() == 2);
  CHECK(out[0]["role"] == "system");
  CHECK(out[0]["content"] == "ab");
  CHECK(out[1]["content"].is_null());
  CHECK(out[1]["tool_calls"][0]["id"] == "x");
}

TEST_CASE("chat messages: short text parts -- a bare string (vLLM's), a text without a type") {
  const ojson out = openai_chat_messages(
      ojson::parse(R"([{"role": "user", "content": ["a", {"text": "b"}, {"type": "text",
                                                     "text": "c"}]}])"),
      [](const std::string& p, const std::string& w) { throw refusal(p, w); });
  CHECK(out[0]["content"] == "abc");
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

TEST_CASE("chat messages: a callback that returns still ends in an error") {
  int reported = 0;
  CHECK_THROWS_WITH_AS(
      openai_chat_messages(ojson::parse(R"([{"role": 5}])"),
                           [&](const std::string&, const std::string&) { ++reported; }),
      "messages[0].role: a message needs a string 'role'", di::error);
  CHECK(reported == 1);
}

}  // namespace di::test
