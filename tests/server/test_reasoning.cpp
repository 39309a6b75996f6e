// Reasoning output of DeepSeek models (vLLM's deepseek_r1 / deepseek_v3 reasoning parsers): the
// split at the first `</think>` (an opening `<think>` dropped, no `</think>`: all reasoning), a
// stream cut anywhere reads as the whole text, the parser names and when deepseek_v3 splits,
// server.reasoning_parser, and a chat request's grammar constraining only the answer after it.
#include "common/error.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "runtime/grammar/response_format.hpp"
#include "server/api_error.hpp"
#include "server/openai_request.hpp"
#include "server/reasoning.hpp"
#include "server/server_config.hpp"
#include "tests/runtime/grammar/grammar_test_util.hpp"
#include "tests/test_support.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace di::server;
using json = request_json;

namespace {

/// The parser fed `pieces` one after another, then finished: reasoning and content in total.
reasoning_delta split_pieces(const std::vector<std::string>& pieces) {
  reasoning_parser p;
  reasoning_delta all;
  auto add = [&](const reasoning_delta& d) {
    all.reasoning += d.reasoning;
    all.content += d.content;
  };
  for (const std::string& piece : pieces) add(p.push(piece));
  add(p.finish());
  return all;
}

/// `text` as the engine streams it: the detokenized text of each of its tokens.
std::vector<std::string> token_pieces(const std::string& text) {
  static const di::tok::tokenizer tok =
      di::tok::tokenizer::from_dir(di::test::shared_path("models/deepseek-v3-tokenizer").string());
  di::tok::incremental_detokenizer detok(tok, {.skip_special_tokens = true});
  std::vector<std::string> pieces;
  for (auto id : tok.encode(text)) pieces.push_back(detok.push(id));
  pieces.push_back(detok.finish());
  return pieces;
}

void check_split(const std::string& text, const std::string& reasoning,
                 const std::string& content) {
  CAPTURE(text);
  const reasoning_delta whole = split_reasoning(text);
  CHECK(whole.reasoning == reasoning);
  CHECK(whole.content == content);
  // Every way a stream could cut it: at each pair of bytes (three pieces), byte by byte, and at
  // the tokenizer's token boundaries.
  for (std::size_t a = 0; a <= text.size(); ++a)
    for (std::size_t b = a; b <= text.size(); ++b) {
      const reasoning_delta d =
          split_pieces({text.substr(0, a), text.substr(a, b - a), text.substr(b)});
      CAPTURE(a);
      CAPTURE(b);
      REQUIRE(d.reasoning == reasoning);
      REQUIRE(d.content == content);
    }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  const reasoning_delta by_byte = split_pieces(bytes);
  CHECK(by_byte.reasoning == reasoning);
  CHECK(by_byte.content == content);
  const reasoning_delta by_token = split_pieces(token_pieces(text));
  CHECK(by_token.reasoning == reasoning);
  CHECK(by_token.content == content);
}

}  // namespace

TEST_CASE("reasoning: split at the first </think>, an opening <think> dropped") {
  check_split("<think>\nLet me add.\n</think>\n\nIt is 4.", "\nLet me add.\n", "\n\nIt is 4.");
  // The prompt opened the thinking (V3.1's template with thinking, R1's): no <think> comes.
  check_split("2 + 2 is 4.</think>Four.", "2 + 2 is 4.", "Four.");
  check_split("</think>Only an answer.", "", "Only an answer.");
  check_split("<think></think>", "", "");
  // Later markers are text: a <think> inside the reasoning, both markers in the content.
  check_split("a<think>b</think>c<think>d</think>e", "a<think>b", "c<think>d</think>e");
  check_split("<think><think>x</think>", "<think>x", "");
  check_split(" <think>x</think>y", " <think>x", "y");  // not at the very start: kept
  check_split("名前は</think>東京です", "名前は", "東京です");
  check_split("</think></think>", "", "</think>");
}

TEST_CASE("reasoning: no </think> -- cut off while thinking -- is all reasoning") {
  check_split("", "", "");
  check_split("still thinking", "still thinking", "");
  check_split("<think>still thinking", "still thinking", "");
  check_split("<thi", "<thi", "");          // a marker cut off stays text
  check_split("x</think", "x</think", "");  // so does the end marker
  check_split("<think>x</", "x</", "");
  check_split("<think", "<think", "");
}

TEST_CASE("reasoning: parser names; deepseek_v3 splits only when thinking is asked for") {
  CHECK(reasoning_parser_of("") == reasoning_parser_kind::none);
  CHECK(reasoning_parser_of("deepseek_r1") == reasoning_parser_kind::deepseek_r1);
  CHECK(reasoning_parser_of("deepseek_v3") == reasoning_parser_kind::deepseek_v3);
  CHECK(!reasoning_parser_of("deepseek"));
  CHECK(!reasoning_parser_of("DeepSeek_R1"));
  const json none = json::object();
  CHECK(!splits_reasoning(reasoning_parser_kind::none, json{{"thinking", true}}));
  CHECK(splits_reasoning(reasoning_parser_kind::deepseek_r1, none));
  CHECK(splits_reasoning(reasoning_parser_kind::deepseek_r1, json{{"thinking", false}}));
  CHECK(!splits_reasoning(reasoning_parser_kind::deepseek_v3, none));
  CHECK(!splits_reasoning(reasoning_parser_kind::deepseek_v3, json{{"thinking", false}}));
  CHECK(splits_reasoning(reasoning_parser_kind::deepseek_v3, json{{"thinking", true}}));
  CHECK(splits_reasoning(reasoning_parser_kind::deepseek_v3, json{{"enable_thinking", true}}));
}

TEST_CASE("reasoning: deepseek_v3 reads thinking / enable_thinking by Python's truth value") {
  // vLLM: bool(chat_kwargs.get("thinking", False)) or bool(chat_kwargs.get("enable_thinking",
  // False)) -- what the template's `{% if thinking %}` sees too.
  const auto v3 = [](const char* kwargs) {
    return splits_reasoning(reasoning_parser_kind::deepseek_v3, json::parse(kwargs));
  };
  for (const char* on :
       {R"({"thinking": 1})", R"({"thinking": -1})", R"({"thinking": 0.5})",
        R"({"thinking": "true"})", R"({"thinking": "yes"})", R"({"thinking": "false"})",
        R"({"thinking": "0"})", R"({"thinking": [0]})", R"({"thinking": {"a": 1}})",
        R"({"thinking": 18446744073709551615})", R"({"enable_thinking": 1})",
        R"({"thinking": false, "enable_thinking": "on"})",
        R"({"thinking": null, "enable_thinking": true})"})
    CHECK_MESSAGE(v3(on), std::string(on));
  for (const char* off :
       {R"({})", R"({"thinking": 0})", R"({"thinking": 0.0})", R"({"thinking": -0.0})",
        R"({"thinking": ""})", R"({"thinking": null})", R"({"thinking": []})",
        R"({"thinking": {}})", R"({"enable_thinking": 0})",
        R"({"thinking": false, "enable_thinking": null})", R"({"Thinking": true})"})
    CHECK_MESSAGE(!v3(off), std::string(off));
}

TEST_CASE("server.reasoning_parser: off by default; an unknown name is an error listing them") {
  server_settings s;
  CHECK(s.reasoning_parser.empty());
  apply_server_overrides(s, {"server.reasoning_parser=deepseek_v3"});
  CHECK(s.reasoning_parser == "deepseek_v3");
  CHECK_THROWS_WITH_AS(apply_server_overrides(s, {"server.reasoning_parser=qwen3"}),
                       doctest::Contains("unknown reasoning parser 'qwen3' (valid: deepseek_r1, "
                                         "deepseek_v3)"),
                       di::error);
  CHECK(s.reasoning_parser == "deepseek_v3");
  s.reasoning_parser = "r1";  // as --reasoning-parser sets it
  CHECK_THROWS_WITH_AS(validate(s), doctest::Contains("valid: deepseek_r1, deepseek_v3"),
                       di::error);
  s.reasoning_parser = "deepseek_r1";
  CHECK_NOTHROW(validate(s));
  // serve --config: the [server] section's key
  const auto path = std::filesystem::temp_directory_path() / "di_reasoning_parser_test.toml";
  std::ofstream(path) << "[server]\nreasoning_parser = \"deepseek_r1\"\n";
  CHECK(read_server_file(path.string(), {}).settings.reasoning_parser == "deepseek_r1");
  std::ofstream(path) << "[server]\nreasoning_parser = \"r1\"\n";
  CHECK_THROWS_WITH_AS(read_server_file(path.string(), {}),
                       doctest::Contains("server.reasoning_parser: unknown reasoning parser 'r1'"),
                       di::error);
  std::filesystem::remove(path);
}

TEST_CASE("reasoning: chat requests split by the parser; a grammar then follows </think>") {
  server_settings s;
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f"}}])";
  auto parse = [&](const std::string& rest) {
    return parse_chat_request(
        json::parse(R"({"messages": [{"role": "user", "content": "x"}])" + rest + "}"), s);
  };
  const std::string regex = R"(, "response_format": {"type": "regex", "regex": "a+"})";
  const std::string thinking = R"(, "chat_template_kwargs": {"thinking": true})";
  CHECK(!parse("").splits_reasoning);  // off by default
  CHECK(!parse(thinking).splits_reasoning);
  CHECK(parse(regex).params.response_format == "regex:a+");

  s.reasoning_parser = "deepseek_r1";
  CHECK(parse("").splits_reasoning);
  const generation_request text = parse(R"(, "response_format": {"type": "text"})");
  CHECK(text.splits_reasoning);
  CHECK(text.params.response_format.empty());
  // The grammar constrains the answer after </think> only (vLLM's rule): free reasoning first.
  const generation_request r1 = parse(regex);
  CHECK(r1.splits_reasoning);
  CHECK(r1.params.response_format == "after:8:</think>regex:a+");
  const auto g = di::grammar::compile_response_format(
      di::grammar::parse_inline_response_format(r1.params.response_format));
  CHECK(di::grammar::test::accepts(*g, "Let me see.</think>aaa"));
  CHECK(di::grammar::test::accepts(*g, "still thinking"));
  CHECK(!di::grammar::test::accepts(*g, "Let me see.</think>b"));
  CHECK(parse(R"(, "response_format": {"type": "json_object"})")
            .params.response_format.starts_with("after:8:</think>json_object"));
  const generation_request required = parse("," + tools + R"(, "tool_choice": "required")");
  CHECK(required.forces_tool_calls);
  CHECK(required.params.response_format.starts_with("after:8:</think>tool_calls:"));
  const generation_request automatic = parse("," + tools);  // auto: calls read from the content
  CHECK(automatic.splits_reasoning);
  CHECK(automatic.parses_tool_calls);
  CHECK(automatic.params.response_format.empty());

  s.reasoning_parser = "deepseek_v3";
  CHECK(!parse("").splits_reasoning);
  const generation_request plain = parse(regex);  // not thinking: the whole output is the answer
  CHECK(!plain.splits_reasoning);
  CHECK(plain.params.response_format == "regex:a+");
  CHECK(!parse(R"(, "chat_template_kwargs": {"thinking": false})" + regex).splits_reasoning);
  CHECK(parse(thinking).splits_reasoning);
  CHECK(parse(R"(, "chat_template_kwargs": {"enable_thinking": true})").splits_reasoning);
  CHECK(parse(thinking + regex).params.response_format == "after:8:</think>regex:a+");
  // Python's truth value, as vLLM: 1 is thinking (its grammar follows </think>), 0 is not.
  const generation_request one = parse(R"(, "chat_template_kwargs": {"thinking": 1})" + regex);
  CHECK(one.splits_reasoning);
  CHECK(one.params.response_format == "after:8:</think>regex:a+");
  CHECK(!parse(R"(, "chat_template_kwargs": {"thinking": 0})" + regex).splits_reasoning);
}
