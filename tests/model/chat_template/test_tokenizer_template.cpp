// Tests of tokenizer_chat_template: loading a tokenizer folder (the real DeepSeek-V3 one and
// synthetic ones), special tokens given as strings or AddedToken objects, choosing among
// named templates as transformers does, and continue_final_message.
#include "model/chat_template/tokenizer_chat_template.hpp"
#include "tests/model/chat_template/template_helpers.hpp"
#include "tests/test_support.hpp"

#include <doctest/doctest.h>

#include <filesystem>

using di::chat_request;
using di::tokenizer_chat_template;
using ojson = nlohmann::ordered_json;

namespace {

chat_request conversation(bool with_tools = false) {
  chat_request r;
  r.messages = ojson::parse(R"([{"role": "user", "content": "Hi"}])");
  if (with_tools) r.tools = ojson::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  return r;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const di::error& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("the DeepSeek-V3 tokenizer folder loads with its special tokens") {
  auto t = tokenizer_chat_template::load(
      (di::test::source_dir() / "assets/deepseek-v3-tokenizer").string());  // bundled in the repo
  CHECK(t.template_names() == std::vector<std::string>{"default"});
  const ojson& tokens = t.special_tokens();
  CHECK(tokens["bos_token"] == "<｜begin▁of▁sentence｜>");  // an AddedToken object in the file
  CHECK(tokens["eos_token"] == "<｜end▁of▁sentence｜>");
  CHECK_FALSE(tokens.contains("unk_token"));  // null in the file
  chat_request r = conversation();
  CHECK(t.apply(r) == "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>");
  r.add_generation_prompt = false;
  CHECK(t.apply(r) == "<｜begin▁of▁sentence｜><｜User｜>Hi");
}

TEST_CASE("named templates: tool_use with tools, default otherwise, or chosen by name") {
  ojson config = ojson::parse(R"({
    "bos_token": "<s>",
    "chat_template": [
      {"name": "default", "template": "{{ bos_token }}plain"},
      {"name": "tool_use", "template": "{{ bos_token }}tools={{ tools|length }}"},
      {"name": "rag", "template": "rag:{{ documents|length }}"}]})");
  auto t = tokenizer_chat_template::from_config(config);
  CHECK(t.apply(conversation()) == "<s>plain");
  CHECK(t.apply(conversation(true)) == "<s>tools=1");
  chat_request named = conversation(true);
  named.template_name = "default";
  CHECK(t.apply(named) == "<s>plain");
  named.template_name = "rag";
  named.documents = ojson::parse(R"([{"text": "a"}, {"text": "b"}])");
  CHECK(t.apply(named) == "rag:2");
  named.template_name = "missing";
  std::string error = error_of([&] { t.apply(named); });
  CHECK(di::test::contains(error, "no chat template named 'missing'"));
  CHECK(di::test::contains(error, "default, tool_use, rag"));

  auto no_default = tokenizer_chat_template::from_config(ojson::parse(
      R"({"chat_template": [{"name": "a", "template": "A"}, {"name": "b", "template": "B"}]})"));
  CHECK(di::test::contains(error_of([&] { no_default.apply(conversation()); }),
                           "none is named 'default'"));
}

TEST_CASE("a tokenizer folder: chat_template.jinja overrides, extra templates are added") {
  di::test::temp_dir dir("chat-template");
  di::test::write_file(dir / "tokenizer_config.json",
                       R"({"eos_token": {"__type": "AddedToken", "content": "</s>"},
                           "chat_template": "from config"})");
  CHECK(tokenizer_chat_template::load(dir.path().string()).apply(conversation()) == "from config");
  di::test::write_file(dir / "chat_template.jinja", "from file {{ eos_token }}\n");
  std::filesystem::create_directories(dir / "additional_chat_templates");
  di::test::write_file(dir / "additional_chat_templates" / "tool_use.jinja",
                       "tools {{ eos_token }}");
  auto t = tokenizer_chat_template::load(dir.path().string());
  CHECK(t.apply(conversation()) == "from file </s>");  // the final newline is dropped
  CHECK(t.apply(conversation(true)) == "tools </s>");

  di::test::write_file(dir / "chat_template.jinja", "{% for %}");
  std::string error = error_of([&] { tokenizer_chat_template::load(dir.path().string()); });
  CHECK(di::test::contains(error, "chat_template.jinja"));
  CHECK(di::test::contains(error, "syntax error at 1:8"));
  CHECK(di::test::contains(
      error_of([&] { tokenizer_chat_template::load((dir / "nope").string()); }), "does not exist"));
}

TEST_CASE("request fields, kwargs and continue_final_message") {
  auto t = tokenizer_chat_template::from_source(
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}{{ extra|default('') }}");
  chat_request r;
  r.messages = ojson::parse(R"([{"role": "user", "content": "Hi"},
                                {"role": "assistant", "content": "Hel  "}])");
  r.kwargs = ojson::parse(R"({"extra": "!"})");
  CHECK(t.apply(r) == "<user>Hi</user><assistant>Hel  </assistant><assistant>!");
  r.add_generation_prompt = false;
  r.continue_final_message = true;
  CHECK(t.apply(r) == "<user>Hi</user><assistant>Hel  ");
  r.add_generation_prompt = true;
  CHECK(di::test::contains(error_of([&] { t.apply(r); }), "not compatible"));
  r.add_generation_prompt = false;
  r.kwargs = ojson::parse(R"({"messages": []})");
  CHECK(di::test::contains(error_of([&] { t.apply(r); }), "cannot set 'messages'"));
}
