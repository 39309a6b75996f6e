// Tool calls in DeepSeek V3's chat format: the parser (whole calls, several, malformed and cut
// off text kept as content, unicode arguments, a stream split anywhere reads as the whole
// text), the grammar of tool_choice "required" / a named function, and tool_choice parsing.
#include "model/tokenizer/tokenizer.hpp"
#include "runtime/grammar/response_format.hpp"
#include "server/api_error.hpp"
#include "server/openai_request.hpp"
#include "server/tool_calls.hpp"
#include "tests/runtime/grammar/grammar_test_util.hpp"
#include "tests/test_support.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace di::server;
using json = request_json;

namespace {

namespace ds = deepseek_tool_format;

/// One call as the chat template renders an assistant's tool_calls.
std::string call_text(const std::string& name, const std::string& args) {
  return std::string(ds::call_begin) + "function" + std::string(ds::sep) + name + "\n```json\n" +
         args + "\n```" + std::string(ds::call_end);
}

std::string calls_text(const std::vector<std::string>& calls) {
  std::string out(ds::calls_begin);
  for (std::size_t i = 0; i < calls.size(); ++i) out += (i ? "\n" : "") + calls[i];
  return out + std::string(ds::calls_end);
}

/// The parser fed `pieces` one after another, then finished: content and calls in total.
tool_call_delta parse_pieces(const std::vector<std::string>& pieces, std::size_t max_calls = 0) {
  tool_call_parser p(max_calls);
  tool_call_delta all;
  auto add = [&](tool_call_delta d) {
    all.content += d.content;
    all.calls.insert(all.calls.end(), d.calls.begin(), d.calls.end());
  };
  for (const std::string& piece : pieces) add(p.push(piece));
  add(p.finish());
  return all;
}

const di::tok::tokenizer& deepseek_tokenizer() {
  static const di::tok::tokenizer tok =
      di::tok::tokenizer::from_dir(di::test::shared_path("models/deepseek-v3-tokenizer").string());
  return tok;
}

/// `text` as the engine streams it: the detokenized text of each of its tokens.
std::vector<std::string> token_pieces(const std::string& text) {
  const di::tok::tokenizer& tok = deepseek_tokenizer();
  di::tok::incremental_detokenizer detok(tok, {.skip_special_tokens = true});
  std::vector<std::string> pieces;
  for (auto id : tok.encode(text)) pieces.push_back(detok.push(id));
  pieces.push_back(detok.finish());
  return pieces;
}

/// Every way of cutting `text` that a stream could produce, checked against the whole text:
/// at each byte (two pieces), byte by byte, and at the tokenizer's token boundaries.
void check_any_split(const std::string& text, std::size_t max_calls = 0) {
  CAPTURE(text);
  const tool_call_delta whole = parse_tool_calls(text, max_calls);
  for (std::size_t cut = 0; cut <= text.size(); ++cut) {
    const tool_call_delta d = parse_pieces({text.substr(0, cut), text.substr(cut)}, max_calls);
    CAPTURE(cut);
    CHECK(d.content == whole.content);
    CHECK(d.calls == whole.calls);
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  const tool_call_delta by_byte = parse_pieces(bytes, max_calls);
  CHECK(by_byte.content == whole.content);
  CHECK(by_byte.calls == whole.calls);
  const std::vector<std::string> tokens = token_pieces(text);
  CHECK(tokens.size() > 1);
  const tool_call_delta by_token = parse_pieces(tokens, max_calls);
  CHECK(by_token.content == whole.content);
  CHECK(by_token.calls == whole.calls);
}

}  // namespace

TEST_CASE("tool calls: one call, its content before it") {
  const std::string text =
      "Let me look.\n" + calls_text({call_text("get_weather", R"({"city": "Paris"})")});
  const tool_call_delta d = parse_tool_calls(text);
  CHECK(d.content == "Let me look.\n");
  REQUIRE(d.calls.size() == 1);
  CHECK(d.calls[0].name == "get_weather");
  CHECK(d.calls[0].arguments == R"({"city": "Paris"})");
  // No content: empty (the response then says null); the template's form without the
  // closing marker (it writes it only after a second call) parses alike.
  const tool_call_delta bare =
      parse_tool_calls(std::string(ds::calls_begin) + call_text("f", "{}"));
  CHECK(bare.content.empty());
  REQUIRE(bare.calls.size() == 1);
  CHECK(bare.calls[0] == tool_call{"f", "{}"});
}

TEST_CASE("tool calls: several, in order; parallel_tool_calls false keeps the first") {
  const std::string text =
      calls_text({call_text("a", R"({"x": 1})"), call_text("b", R"({"y": [1, {"z": "}"}]})"),
                  call_text("a", R"({"x": 2})")});
  const tool_call_delta d = parse_tool_calls(text);
  CHECK(d.content.empty());
  REQUIRE(d.calls.size() == 3);
  CHECK(d.calls[0] == tool_call{"a", R"({"x": 1})"});
  CHECK(d.calls[1] == tool_call{"b", R"({"y": [1, {"z": "}"}]})"});
  CHECK(d.calls[2] == tool_call{"a", R"({"x": 2})"});
  const tool_call_delta one = parse_tool_calls(text, 1);
  REQUIRE(one.calls.size() == 1);
  CHECK(one.calls[0] == d.calls[0]);
  CHECK(one.content.empty());  // the others are read and dropped, not turned into content
}

TEST_CASE("tool calls: text that does not parse stays content") {
  const std::string begin(ds::calls_begin);
  for (const std::string& text : {
           std::string("plain answer, no calls"),
           std::string("<｜tool▁calls▁beg"),            // a marker cut off
           begin,                                       // nothing after it
           begin + "hello",                             // not a call
           begin + call_text("f", R"({"x": 1)"),        // arguments not closed
           begin + call_text("f", R"({"x": 1,})"),      // not JSON
           begin + call_text("f", R"([1, 2])"),         // not an object
           begin + call_text("", "{}"),                 // no name
           begin + call_text("f", "{}").substr(0, 40),  // cut off in the call
           begin + std::string(ds::call_begin) + "tool" + std::string(ds::sep) + "f\n```json\n{}",
       }) {
    CAPTURE(text);
    const tool_call_delta d = parse_tool_calls(text);
    CHECK(d.calls.empty());
    CHECK(d.content == text);
  }
  // After whole calls, what does not parse is content after them (the separator goes).
  const std::string cut = std::string(ds::calls_begin) + call_text("a", "{}") + "\n" +
                          call_text("b", "{\"k\": ").substr(0, 30);
  const tool_call_delta d = parse_tool_calls(cut);
  REQUIRE(d.calls.size() == 1);
  CHECK(d.calls[0] == tool_call{"a", "{}"});
  CHECK(d.content == call_text("b", "{\"k\": ").substr(0, 30));
  const tool_call_delta after = parse_tool_calls(calls_text({call_text("a", "{}")}) + " Done.");
  REQUIRE(after.calls.size() == 1);
  CHECK(after.content == " Done.");
}

TEST_CASE("tool calls: unicode in names' arguments and content") {
  const std::string args = R"({"city": "Zürich", "note": "東京 🚀 \"quoted\" \u00e9 }{"})";
  const std::string text = "Voilà — " + calls_text({call_text("météo", args)});
  const tool_call_delta d = parse_tool_calls(text);
  CHECK(d.content == "Voilà — ");
  REQUIRE(d.calls.size() == 1);
  CHECK(d.calls[0].name == "météo");
  CHECK(d.calls[0].arguments == args);
  CHECK(json::parse(d.calls[0].arguments)["note"] == "東京 🚀 \"quoted\" é }{");
}

TEST_CASE("tool calls: a stream split anywhere reads as the whole text") {
  const std::string begin(ds::calls_begin);
  for (const std::string& text : {
           "Sure. " + calls_text({call_text("get_weather", R"({"city": "Zürich 東京"})")}),
           calls_text({call_text("a", R"({"x": 1})"), call_text("b", R"({"s": "```"})")}) +
               "trailing",
           begin + call_text("f", R"({"x": 1,})"),
           begin + call_text("a", "{}") + "\n" + call_text("b", "{").substr(0, 35),
           std::string("a < b and <｜tool▁ but no calls"),
           "x" + begin + "no call here " + begin,
       })
    check_any_split(text);
  check_any_split(calls_text({call_text("a", "{}"), call_text("b", "{}")}), 1);
}

TEST_CASE("tool calls: the grammar of tool_choice admits calls of the right functions only") {
  const json tools = json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"],
      "additionalProperties": false}}},
    {"type": "function", "function": {"name": "now"}}])");
  auto compile = [&](const std::string& only, bool parallel) {
    return di::grammar::compile_response_format(di::grammar::parse_inline_response_format(
        tool_call_grammar_spec(tools, only, parallel, "+compact")));
  };
  using di::grammar::test::accepts;
  const std::string weather = call_text("get_weather", R"({"city":"Zürich"})");
  const std::string now = call_text("now", "{}");
  const auto any = compile("", true);
  CHECK(accepts(*any, calls_text({weather})));
  CHECK(accepts(*any, calls_text({now, weather})));
  CHECK(!accepts(*any, calls_text({})));                                             // at least one
  CHECK(!accepts(*any, calls_text({call_text("get_weather", R"({"town":"x"})")})));  // schema
  CHECK(!accepts(*any, calls_text({call_text("now", R"({"x":1})")})));  // no parameters: {}
  CHECK(!accepts(*any, calls_text({call_text("other", "{}")})));
  CHECK(!accepts(*any, "text first " + calls_text({now})));
  const auto single = compile("", false);
  CHECK(accepts(*single, calls_text({weather})));
  CHECK(!accepts(*single, calls_text({now, weather})));
  const auto named = compile("now", true);
  CHECK(accepts(*named, calls_text({now, now})));
  CHECK(!accepts(*named, calls_text({weather})));
  // What the grammar admits is what the parser reads.
  const tool_call_delta d = parse_tool_calls(calls_text({now, weather}));
  REQUIRE(d.calls.size() == 2);
  CHECK(d.calls[1] == tool_call{"get_weather", R"({"city":"Zürich"})"});
}

TEST_CASE(
    "forced tool calls write no argument their parameters do not declare, unless "
    "server.json_schema_extra_keys is allow") {
  // No additionalProperties: JSON Schema allows other keys; generation does not write them by
  // default (as xgrammar's strict mode in vLLM and SGLang, and llama.cpp).
  const std::string body = R"({"messages": [{"role": "user", "content": "x"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
      "type": "object", "properties": {"city": {"type": "string"},
        "days": {"type": "array", "prefixItems": [{"type": "integer"}]}}, "required": ["city"]}}}],
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})";
  server_settings s;
  auto grammar_of = [&] {
    const std::string spec = parse_chat_request(json::parse(body), s).params.response_format;
    return di::grammar::compile_response_format(di::grammar::parse_inline_response_format(spec));
  };
  using di::grammar::test::accepts;
  const std::string declared = call_text("get_weather", R"({"city": "Oslo", "days": [1]})");
  const std::string extra_key = call_text("get_weather", R"({"city": "Oslo", "unit": "C"})");
  const std::string extra_item = call_text("get_weather", R"({"city": "Oslo", "days": [1, 2]})");
  const auto strict = grammar_of();
  CHECK(accepts(*strict, calls_text({declared})));
  CHECK_FALSE(accepts(*strict, calls_text({extra_key})));
  CHECK_FALSE(accepts(*strict, calls_text({extra_item})));
  s.json_schema_extra_keys = "allow";
  CHECK(parse_chat_request(json::parse(body), s)
            .params.response_format.starts_with("tool_calls+extra_keys:"));
  const auto open = grammar_of();
  CHECK(accepts(*open, calls_text({declared})));
  CHECK(accepts(*open, calls_text({extra_key})));
  CHECK(accepts(*open, calls_text({extra_item})));
  // A response_format gets the same modifier.
  s.json_whitespace = "compact";
  CHECK(parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "x"}],
          "response_format": {"type": "json_schema", "json_schema": {"name": "n",
          "schema": {"type": "integer"}}}})"),
                           s)
            .params.response_format == R"(json_schema+compact+extra_keys:{"type":"integer"})");
}

TEST_CASE("tool_choice: auto, none, required, a named function; bad values are a 400") {
  const server_settings s;
  const std::string tools =
      R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
                   {"type": "function", "function": {"name": "g"}}])";
  auto parse = [&](const std::string& rest) {
    return parse_chat_request(
        json::parse(R"({"messages": [{"role": "user", "content": "x"}], )" + rest + "}"), s);
  };
  auto param_of = [&](const std::string& rest) -> std::string {
    try {
      parse(rest);
    } catch (const api_error& e) {
      CHECK(e.status == 400);
      return e.param;
    }
    return "";
  };
  const generation_request automatic = parse(tools);
  CHECK(automatic.parses_tool_calls);
  CHECK(!automatic.forces_tool_calls);
  CHECK(automatic.params.response_format.empty());
  CHECK(!parse(tools + R"(, "tool_choice": "none")").parses_tool_calls);
  CHECK(!parse(R"("tool_choice": "auto")").parses_tool_calls);  // no tools: a text answer
  const generation_request required = parse(tools + R"(, "tool_choice": "required")");
  CHECK(required.parses_tool_calls);
  CHECK(required.forces_tool_calls);
  CHECK(required.params.response_format.starts_with("tool_calls:"));
  CHECK(required.params.response_format.find("<｜tool▁sep｜>g\\n") != std::string::npos);
  const generation_request named =
      parse(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "f"}},
                  "parallel_tool_calls": false)");
  CHECK(named.forces_tool_calls);
  CHECK(!named.parallel_tool_calls);
  CHECK(named.params.response_format.find("<｜tool▁sep｜>g\\n") == std::string::npos);
  CHECK(named.params.response_format.find(R"("max_calls":1)") != std::string::npos);
  CHECK(di::grammar::compile_response_format(
            di::grammar::parse_inline_response_format(named.params.response_format)) != nullptr);
  // A schema that does not compile is named by its function.
  const generation_request bad = parse(
      R"("tools": [{"type": "function", "function": {"name": "lb", "parameters": {"type": "object",
          "properties": {"x": {"type": "string", "pattern": "(?<=a)b"}}}}}], "tool_choice": "required")");
  CHECK_THROWS_WITH_AS(di::grammar::compile_response_format(
                           di::grammar::parse_inline_response_format(bad.params.response_format)),
                       doctest::Contains("the parameters of 'lb': "), di::error);

  CHECK(param_of(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "h"}})") ==
        "tool_choice");
  CHECK(param_of(tools + R"(, "tool_choice": "any")") == "tool_choice");
  CHECK(param_of(tools + R"(, "tool_choice": {"type": "function"})") == "tool_choice");
  CHECK(param_of(tools + R"(, "tool_choice": 3)") == "tool_choice");
  CHECK(param_of(R"("tool_choice": "required")") == "tool_choice");
  CHECK(param_of(R"("tools": [], "tool_choice": "required")") == "tool_choice");
  CHECK(param_of(tools + R"(, "parallel_tool_calls": "yes")") == "parallel_tool_calls");
  CHECK(param_of(tools +
                 R"(, "tool_choice": "required", "response_format": {"type": "json_object"})") ==
        "response_format");
  CHECK(param_of(R"("tools": [{"type": "function", "function": {"name": "f", "parameters":
      {"type": "string"}}}], "tool_choice": "required")") == "tools");
  CHECK(param_of(tools +
                 R"(, "tool_choice": "auto", "response_format": {"type": "json_object"})") == "");
}

TEST_CASE("a function name the call format cannot carry is a 400 naming it") {
  // The parser reads a call's name up to its newline, trimmed, and takes none that is empty,
  // too long or holds a marker's "<｜": a call of such a function -- forced by tool_choice --
  // was written under the grammar and then not read back (raw markup as content, no
  // tool_calls, finish_reason "stop").
  const server_settings s;
  auto request = [&](const std::string& name, const std::string& choice) {
    json body = json::parse(R"({"messages": [{"role": "user", "content": "x"}]})");
    body["tools"] = json::array({{{"type", "function"}, {"function", {{"name", name}}}}});
    body["tool_choice"] = choice;
    return body;
  };
  auto param_of = [&](const std::string& name, const std::string& choice) -> std::string {
    try {
      parse_chat_request(request(name, choice), s);
    } catch (const api_error& e) {
      CHECK(e.status == 400);
      return e.param;
    }
    return "";
  };
  for (const std::string& name :
       {std::string(), std::string(" f"), std::string("f\t"), std::string("a\nb"),
        std::string("a") + std::string(ds::sep), std::string(ds::call_end),
        std::string(max_tool_name_bytes + 1, 'a')}) {
    CAPTURE(name);
    const tool_call_delta read = parse_tool_calls(calls_text({call_text(name, "{}")}));
    CHECK((read.calls.empty() || read.calls[0].name != name));  // the format cannot carry it
    CHECK(!unreadable_tool_name(name).empty());
    CHECK(param_of(name, "required") == "tools[0].function.name");
    CHECK(param_of(name, "auto") == "tools[0].function.name");
  }
  for (const std::string& name :
       {std::string("get_weather"), std::string("ns.fn-2"), std::string("with space"),
        std::string("日本"), std::string(max_tool_name_bytes, 'a')}) {
    CAPTURE(name);
    const tool_call_delta read = parse_tool_calls(calls_text({call_text(name, "{}")}));
    REQUIRE(read.calls.size() == 1);
    CHECK(read.calls[0].name == name);
    CHECK(unreadable_tool_name(name).empty());
    CHECK(param_of(name, "required") == "");
  }
}

TEST_CASE("a tool's members are OpenAI's: others and wrong types are a 400 naming them") {
  // They were not read: a misspelt "parameter" left the function without a schema (its forced
  // calls' arguments were `{}`), and a description or strict of any type passed.
  const server_settings s;
  auto param_of = [&](const std::string& tool) -> std::string {
    try {
      parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "x"}],
                                         "tool_choice": "required", "tools": [)" +
                                     tool + "]}"),
                         s);
    } catch (const api_error& e) {
      CHECK(e.status == 400);
      return e.param;
    }
    return "";
  };
  CHECK(param_of(R"({"type": "function", "function": {"name": "f", "parameter":
                    {"type": "object", "properties": {"a": {"type": "integer"}}}}})") ==
        "tools[0].function.parameter");
  CHECK(param_of(R"({"type": "function", "function": {"name": "f", "description": 5}})") ==
        "tools[0].function.description");
  CHECK(param_of(R"({"type": "function", "function": {"name": "f", "strict": "yes"}})") ==
        "tools[0].function.strict");
  CHECK(param_of(R"({"type": "function", "function": {"name": "f"}, "parameters": {}})") ==
        "tools[0].parameters");
  // OpenAI's members pass, null ones too.
  CHECK(param_of(R"({"type": "function", "function": {"name": "f", "description": "d",
                    "strict": true, "parameters": {"type": "object"}}})") == "");
  CHECK(param_of(R"({"type": "function", "function": {"name": "f", "description": null,
                    "strict": null, "extra": null}, "other": null})") == "");
}

TEST_CASE("two tools of one name are a 400 naming the later one's name") {
  // OpenAI refuses them; they were accepted, and a call naming the function could mean either
  // (tool_choice naming it constrained the output to the first's or the second's parameters).
  const server_settings s;
  auto param_of = [&](const std::string& tools) -> std::string {
    try {
      parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "x"}],
                                         "tools": [)" +
                                     tools + "]}"),
                         s);
    } catch (const api_error& e) {
      CHECK(e.status == 400);
      CHECK(std::string(e.what()).find("'f'") != std::string::npos);
      return e.param;
    }
    return "";
  };
  const std::string f = R"({"type": "function", "function": {"name": "f"}})";
  const std::string g = R"({"type": "function", "function": {"name": "g"}})";
  CHECK(param_of(f + ", " + f) == "tools[1].function.name");
  CHECK(
      param_of(
          f + ", " + g + ", " +
          R"({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}})") ==
      "tools[2].function.name");
  CHECK(param_of(f + ", " + g) == "");
  CHECK(param_of(R"({"type": "function", "function": {"name": "F"}}, )" + f) == "");  // exact
}
