// Request parsing of the HTTP server: fields land in sampling_params, every invalid input is a
// 400 naming its parameter, deep nesting is refused before parsing, keys compare exactly.
#include "runtime/grammar/response_format.hpp"
#include "server/api_error.hpp"
#include "server/api_routes.hpp"
#include "server/generation.hpp"
#include "server/openai_request.hpp"
#include "server/openai_response.hpp"
#include "tests/test_support.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <fstream>
#include <functional>
#include <iterator>

using namespace di::server;
using json = request_json;

namespace {

/// The param of the api_error that parsing `body` throws ("" when it does not throw).
std::string param_of(const std::string& body, bool chat = false) {
  const server_settings s;
  try {
    const json j = parse_body(body, s);
    if (chat)
      parse_chat_request(j, s);
    else
      parse_completion_request(j, s);
  } catch (const api_error& e) {
    CHECK(e.status == 400);
    return e.param.empty() ? "<none>" : e.param;
  }
  return "";
}

}  // namespace

TEST_CASE("completion fields map onto sampling_params") {
  const server_settings s;
  const json j = json::parse(
      R"({"model": "m", "prompt": "hi", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
      "top_k": 40, "min_p": 0.05, "presence_penalty": 1, "frequency_penalty": -1, "repetition_penalty": 1.2,
      "seed": -1, "stop": "x", "stop_token_ids": [5], "n": 3, "logprobs": 2, "echo": true, "stream": true,
      "stream_options": {"include_usage": true}, "ignore_eos": true, "min_tokens": 2})");
  const generation_request r = parse_completion_request(j, s);
  CHECK(r.model == "m");
  REQUIRE(r.prompts.size() == 1);
  CHECK(r.prompts[0].text == "hi");
  CHECK(r.params.max_tokens == 7);
  CHECK(r.params.temperature == 0.5);
  CHECK(r.params.top_p == 0.9);
  CHECK(r.params.top_k == 40);
  CHECK(r.params.min_p == 0.05);
  CHECK(r.params.presence_penalty == 1);
  CHECK(r.params.frequency_penalty == -1);
  CHECK(r.params.repetition_penalty == 1.2);
  CHECK(r.params.seed == std::uint64_t(-1));
  CHECK(r.params.stop == std::vector<std::string>{"x"});
  CHECK(r.params.stop_token_ids == std::vector<std::int32_t>{5});
  CHECK(r.n == 3);
  CHECK(r.logprobs == 2);
  CHECK(r.echo);
  CHECK(r.stream);
  CHECK(r.include_usage);
  CHECK(r.params.ignore_eos);
  CHECK(r.params.min_tokens == 2);
}

TEST_CASE("response_format becomes the inline spec") {
  const server_settings s;
  auto spec = [&](const char* body) {
    return parse_completion_request(json::parse(body), s).params.response_format;
  };
  CHECK(spec(R"({"prompt": "x", "response_format": {"type": "text"}})") == "");
  CHECK(spec(R"({"prompt": "x", "response_format": {"type": "json_object"}})") == "json_object");
  CHECK(spec(R"j({"prompt": "x", "response_format": {"type": "regex", "regex": "(yes|no)"}})j") ==
        "regex:(yes|no)");
  const std::string schema = spec(
      R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "integer"}}}})");
  CHECK(schema == "json_schema:{\"type\":\"integer\"}");
  // The schema's own key order reaches the grammar (objects are written in that order).
  CHECK(
      spec(R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema":
        {"type": "object", "properties": {"zeta": {"type": "boolean"}, "alpha": {"type": "null"}}},
        "name": "o"}}})") ==
      R"(json_schema:{"type":"object","properties":{"zeta":{"type":"boolean"},"alpha":{"type":"null"}}})");
}

TEST_CASE("server.json_whitespace becomes the JSON formats' modifier") {
  server_settings s;
  auto spec = [&](const char* body) {
    return parse_completion_request(json::parse(body), s).params.response_format;
  };
  const char* object = R"({"prompt": "x", "response_format": {"type": "json_object"}})";
  const char* schema =
      R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "integer"}}}})";
  const char* regex = R"({"prompt": "x", "response_format": {"type": "regex", "regex": "a b"}})";
  s.json_whitespace = "compact";
  CHECK(spec(object) == "json_object+compact");
  CHECK(spec(schema) == "json_schema+compact:{\"type\":\"integer\"}");
  CHECK(spec(regex) == "regex:a b");  // not a JSON format: no modifier
  s.json_whitespace = "pretty";
  CHECK(spec(object) == "json_object+pretty");
  CHECK(spec(schema) == "json_schema+pretty:{\"type\":\"integer\"}");
  // The modified specs are what the grammar front end reads.
  using di::grammar::json_whitespace;
  CHECK(di::grammar::parse_inline_response_format(spec(schema)).schema.whitespace ==
        json_whitespace::pretty);
  s.json_whitespace = "compact";
  CHECK(di::grammar::parse_inline_response_format(spec(object)).schema.whitespace ==
        json_whitespace::compact);
}

TEST_CASE("prompt shapes and defaults") {
  const server_settings s;
  auto parse = [&](const char* body) { return parse_completion_request(json::parse(body), s); };
  CHECK(parse(R"({"prompt": [1, 2, 3]})").prompts[0].ids == std::vector<std::int32_t>{1, 2, 3});
  CHECK(parse(R"({"prompt": ["a", "b"]})").prompts.size() == 2);
  CHECK(parse(R"({"prompt": [[1], [2, 3]]})").prompts[1].ids.size() == 2);
  const generation_request d = parse(R"({"prompt": "x", "seed": null, "stop": null})");
  CHECK(d.params.max_tokens == 16);  // OpenAI's completions default
  CHECK(!d.params.seed);
  CHECK(d.n == 1);
}

TEST_CASE("chat fields: max_completion_tokens wins, logprobs and top_logprobs, content parts") {
  const server_settings s;
  const generation_request r = parse_chat_request(
      json::parse(R"({"messages": [{"role": "developer", "content": [{"type": "text", "text": "a"},
          {"type": "text", "text": "b"}]}, {"role": "user", "content": "q"}], "max_tokens": 3,
          "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 4})"),
      s);
  CHECK(r.params.max_tokens == 5);
  CHECK(r.logprobs == 4);
  CHECK(r.messages[0]["role"] == "system");
  CHECK(r.messages[0]["content"] == "a\nb");  // joined as vLLM joins them
  CHECK(!parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "q"}]})"), s)
             .params.max_tokens);
  // A bad max_tokens beside a good max_completion_tokens is a 400 (it was never read).
  CHECK(param_of(R"({"messages": [{"role": "user", "content": "q"}], "max_tokens": "abc",
                     "max_completion_tokens": 5})",
                 true) == "max_tokens");
  CHECK(param_of(R"({"messages": [{"role": "user", "content": "q"}], "max_tokens": -1,
                     "max_completion_tokens": 5})",
                 true) == "max_tokens");
  // Completions take max_completion_tokens too (it was silently ignored, 0 and "3" included).
  const generation_request c =
      parse_completion_request(json::parse(R"({"prompt": "x", "max_completion_tokens": 5})"), s);
  CHECK(c.params.max_tokens == 5);
  CHECK(c.max_tokens_name == "max_completion_tokens");
  CHECK(parse_completion_request(json::parse(R"({"prompt": "x"})"), s).params.max_tokens == 16);
  CHECK(param_of(R"({"prompt": "x", "max_completion_tokens": 0})") == "max_completion_tokens");
  CHECK(param_of(R"({"prompt": "x", "max_completion_tokens": "3"})") == "max_completion_tokens");
}

TEST_CASE("an assistant message's refusal content part is its text, as OpenAI's schema has it") {
  // {"type": "refusal", "refusal": TEXT} is one of an assistant message's content parts in
  // OpenAI's schema; it was a 400 ("only text content parts"), so a conversation holding a
  // refused answer could not be sent back.
  const server_settings s;
  const generation_request r =
      parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "q"},
          {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't help."}]},
          {"role": "assistant", "content": [{"type": "text", "text": "a"},
                                            {"type": "refusal", "refusal": "b"}]},
          {"role": "user", "content": "again"}]})"),
                         s);
  REQUIRE(r.messages.size() == 4);
  CHECK(r.messages[1]["content"] == "I can't help.");
  CHECK(r.messages[2]["content"] == "a\nb");
  // Only assistant messages take one, and it needs its string.
  CHECK(param_of(R"({"messages": [{"role": "user", "content": [{"type": "refusal",
                     "refusal": "x"}]}]})",
                 true) == "messages[0].content");
  CHECK(param_of(R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant",
                     "content": [{"type": "refusal", "refusal": 5}]}]})",
                 true) == "messages[1].content");
  CHECK(param_of(R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant",
                     "content": [{"type": "refusal", "text": "x"}]}]})",
                 true) == "messages[1].content");
}

TEST_CASE("every invalid field is a 400 naming it") {
  CHECK(param_of(R"({"prompt": "x", "temperature": 2.5})") == "temperature");
  CHECK(param_of(R"({"prompt": "x", "temperature": "1"})") == "temperature");
  CHECK(param_of(R"({"prompt": "x", "top_p": 0})") == "top_p");
  CHECK(param_of(R"({"prompt": "x", "n": 17})") == "n");
  CHECK(param_of(R"({"prompt": "x", "n": 1.5})") == "n");
  CHECK(param_of(R"({"prompt": "x", "max_tokens": 0})") == "max_tokens");
  CHECK(param_of(R"({"prompt": "x", "max_tokens": 99999999999999999999999})") == "max_tokens");
  CHECK(param_of(R"({"prompt": "x", "max_tokens": 1e400})") == "<none>");  // invalid JSON number
  CHECK(param_of(R"({"prompt": "x", "seed": 18446744073709551615})") == "seed");
  CHECK(param_of(R"({"prompt": "x", "logprobs": 21})") == "logprobs");
  CHECK(param_of(R"({"prompt": "x", "stop": [1]})") == "stop");
  CHECK(param_of(R"({"prompt": "x", "stop": ""})") == "stop");
  CHECK(param_of(R"({"prompt": "x", "stop_token_ids": [-1]})") == "stop_token_ids");
  CHECK(param_of(R"({"prompt": "x", "stream_options": 1})") == "stream_options");
  CHECK(param_of(R"({"prompt": "x", "logit_bias": {"1": 2}})") == "logit_bias");
  CHECK(param_of(R"({"prompt": "x", "response_format": {"type": "json_object"}})") == "");
  // The pattern itself is compiled when the request is served (api_routes.cpp, once, into the
  // runners' grammar cache when they share the process): test_server.py's errors_400 checks
  // the 400 for "(a".
  CHECK(param_of(R"j({"prompt": "x", "response_format": {"type": "regex", "regex": "(a"}})j") ==
        "");
  CHECK(param_of(R"({"prompt": "x", "response_format": {"type": "regex"}})") ==
        "response_format.regex");
  CHECK(param_of(R"({"prompt": "x", "response_format": {"type": "yaml"}})") ==
        "response_format.type");
  CHECK(param_of(R"({"prompt": "x", "response_format": {"type": "json_schema"}})") ==
        "response_format.json_schema");
  CHECK(param_of(R"({"prompt": "x", "response_format": {"type": "text"}})") == "");
  CHECK(param_of(R"({"prompt": {}})") == "prompt");
  CHECK(param_of(R"({"prompt": [1, "a"]})") == "prompt");
  CHECK(param_of(R"({})") == "prompt");
  CHECK(param_of(R"({"messages": []})", true) == "messages");
  CHECK(param_of(R"({"messages": [{"role": "user"}]})", true) == "messages[0].content");
  CHECK(param_of(R"({"messages": [{"role": "x", "content": "y"}]})", true) == "messages[0].role");
  CHECK(param_of(R"({"messages": [{"role": 5, "content": "y"}]})", true) == "messages[0].role");
  CHECK(param_of(R"({"messages": ["y"]})", true) == "messages[0]");
  CHECK(param_of(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", true) ==
        "messages[0].content");
  CHECK(param_of(R"({"messages": [{"role": "user", "content": "y"}], "top_logprobs": 2})", true) ==
        "top_logprobs");
  CHECK(param_of("{bad json") == "<none>");
  CHECK(param_of("[1]") == "<none>");
  CHECK(param_of("{\"prompt\": \"\xff\"}") == "<none>");
}

TEST_CASE("structured-output fields of other servers and stray response_format members are a 400") {
  const server_settings s;
  auto refusal = [&](const std::string& body) -> api_error {
    try {
      parse_completion_request(parse_body(body, s), s);
    } catch (const api_error& e) {
      return e;
    }
    return api_error(200, "", "", "");
  };
  auto check = [&](const std::string& body, const std::string& param, const std::string& hint) {
    CAPTURE(body);
    const api_error e = refusal(body);
    CHECK(e.status == 400);
    CHECK(e.param == param);
    const std::string message = e.what();
    CHECK(message.find(param.substr(param.rfind('.') + 1)) != std::string::npos);
    CHECK(message.find(hint) != std::string::npos);
  };
  // SGLang's top-level constraints and vLLM's whitespace pattern were ignored: unconstrained text.
  check(R"({"prompt": "x", "regex": "[0-9]"})", "regex", R"({"type": "regex", "regex": PATTERN})");
  check(R"({"prompt": "x", "ebnf": "root ::= \"a\""})", "ebnf", R"({"type": "ebnf")");
  check(R"({"prompt": "x", "json_schema": "{\"type\": \"integer\"}"})", "json_schema",
        R"({"type": "json_schema", "json_schema": {"name": NAME, "schema": SCHEMA}})");
  check(R"({"prompt": "x", "guided_whitespace_pattern": " "})", "guided_whitespace_pattern",
        "use response_format");
  // Members a format's type does not take.
  check(R"({"prompt": "x", "response_format": {"type": "json_schema", "regex": "a",
        "json_schema": {"name": "n", "schema": {"type": "integer"}}}})",
        "response_format.regex", R"({"type": "regex", "regex": PATTERN})");
  check(
      R"({"prompt": "x", "response_format": {"type": "json_object", "schema": {"type": "integer"}}})",
      "response_format.schema", R"({"type": "json_schema")");
  check(R"({"prompt": "x", "response_format": {"type": "text", "json_schema": {"name": "n",
        "schema": {"type": "integer"}}}})",
        "response_format.json_schema", "type 'text'");
  check(
      R"({"prompt": "x", "response_format": {"type": "regex", "regex": "a", "ebnf": "root ::= \"a\""}})",
      "response_format.ebnf", "it takes 'type', 'regex'");
  // Null is absent, as for every field; an empty value asks for nothing.
  CHECK(param_of(R"({"prompt": "x", "regex": null, "ebnf": null, "json_schema": null,
                     "guided_whitespace_pattern": null})") == "");
  CHECK(param_of(R"({"prompt": "x", "json_schema": {}})") == "");
  // ... except guided_json's {}: the schema that takes any JSON value (vLLM constrains to it).
  CHECK(param_of(R"({"prompt": "x", "guided_json": {}})") == "guided_json");
  CHECK(param_of(R"({"prompt": "x", "guided_json": null, "guided_choice": [],
                     "structured_outputs": {}})") == "");
  CHECK(param_of(R"({"prompt": "x", "response_format": {"type": "text", "json_schema": null}})") ==
        "");
  CHECK(param_of(R"({"prompt": "x", "response_format": {"type": "json_object"}})") == "");
}

TEST_CASE("json_schema's members are checked as OpenAI defines them") {
  auto format = [](const std::string& json_schema) {
    return R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": )" +
           json_schema + "}}";
  };
  // OpenAI's own members pass, null as absent (the official clients send unset ones as null).
  CHECK(param_of(format(R"({"name": "my-format_2", "description": "d", "strict": true,
                            "schema": {"type": "integer"}})")) == "");
  CHECK(param_of(format(R"({"name": "n", "description": null, "strict": null,
                            "schema": {"type": "integer"}})")) == "");
  CHECK(param_of(format(R"({"name": "n", "strict": false, "schema": true})")) == "");
  // The name is required and a string (OpenAI and vLLM); its pattern is not checked (vLLM
  // does not check it, and it changes no output).
  CHECK(param_of(format(R"({"schema": {"type": "integer"}})")) ==
        "response_format.json_schema.name");
  CHECK(param_of(format(R"({"name": null, "schema": {"type": "integer"}})")) ==
        "response_format.json_schema.name");
  CHECK(param_of(format(R"({"name": 5, "schema": {"type": "integer"}})")) ==
        "response_format.json_schema.name");
  CHECK(param_of(format(R"({"name": "has space", "schema": {"type": "integer"}})")) == "");
  CHECK(param_of(format(R"({"name": "n", "strict": "yes", "schema": {"type": "integer"}})")) ==
        "response_format.json_schema.strict");
  CHECK(param_of(format(R"({"name": "n", "strict": 1, "schema": {"type": "integer"}})")) ==
        "response_format.json_schema.strict");
  CHECK(param_of(format(R"({"name": "n", "description": 3, "schema": {"type": "integer"}})")) ==
        "response_format.json_schema.description");
  // A member json_schema does not have is refused: a schema keyword put beside "schema" would
  // have been ignored.
  CHECK(param_of(format(R"({"name": "n", "schema": {"type": "object"}, "required": ["a"]})")) ==
        "response_format.json_schema.required");
  CHECK(param_of(format(R"({"name": "n"})")) == "response_format.json_schema");
  CHECK(param_of(format(R"({"name": "n", "schema": "{}"})")) == "response_format.json_schema");
  CHECK(param_of(format("5")) == "response_format.json_schema");
}

TEST_CASE("a whole number too large is out of range; prompts x n past a group's intake") {
  const auto error_of = [](const std::string& body, const server_settings& s) -> api_error {
    try {
      parse_completion_request(parse_body(body, s), s);
    } catch (const api_error& e) {
      return e;
    }
    return api_error(200, "", "", "");
  };
  const server_settings s;
  // 1e20 is a whole number: it was "must be an integer", without the range
  const api_error big = error_of(R"({"prompt": "x", "top_k": 1e20})", s);
  CHECK(big.status == 400);
  CHECK(big.param == "top_k");
  CHECK(std::string(big.what()).find("must be in [") != std::string::npos);
  CHECK(std::string(error_of(R"({"prompt": "x", "top_k": 2.5})", s).what())
            .find("must be an integer") != std::string::npos);
  server_settings small = s;
  small.max_choices = 8;  // what serve derives from the cluster's limits
  CHECK(error_of(R"({"prompt": ["a", "b", "c"], "n": 3})", small).param == "prompt");
  CHECK(error_of(R"({"prompt": "a", "n": 9, "max_tokens": 2})", small).param == "n");
  const api_error fits = error_of(R"({"prompt": ["a", "b"], "n": 4})", small);
  CHECK(fits.status == 200);
}

TEST_CASE("nesting and object sizes are bounded before parsing") {
  CHECK(measure_body(R"({"a": [[["x"]]]})", 4).depth == 4);
  CHECK(measure_body(R"({"a": [[[["x"]]]]})", 4).depth == 5);
  CHECK(measure_body(R"({"a": "[[[[[[[[[["})", 2).depth ==
        1);  // brackets inside strings do not count
  CHECK(param_of(std::string(10000, '[') + std::string(10000, ']')) == "<none>");
  // Members: colons directly inside an object, not in strings, arrays or deeper objects.
  CHECK(measure_body(R"({"a": 1, "b:": {"c": [{"d": 2, "e": 3}]}, "f": "x:y"})", 64).member_pairs ==
        3 * 3 + 1 + 2 * 2);
  CHECK(measure_body("{}", 64).member_pairs == 0);
  // One object of 9,000 members parses (in key order); 20,000 is refused before parsing, as
  // are many objects of 2,000.
  auto object_of = [](int n) {
    std::string o = "{";
    for (int i = 0; i < n; ++i) o += fmt::format("{}\"k{}\": 0", i ? ", " : "", i);
    return o + "}";
  };
  auto body_with = [](const std::string& extra) {  // in a field the server ignores
    return R"({"prompt": "x", "x_unknown": )" + extra + "}";
  };
  CHECK(param_of(body_with(object_of(9000))) == "");
  CHECK(param_of(body_with(object_of(20000))) == "<none>");
  std::string many = "[";
  for (int i = 0; i < 30; ++i) many += (i ? ", " : "") + object_of(2000);
  CHECK(param_of(body_with(many + "]")) == "<none>");
  CHECK(param_of(body_with("[" + object_of(2000) + "]")) == "");
}

TEST_CASE("a response_format's schema may nest deeper than a body; too deep names where") {
  const server_settings s;
  auto schema_of_depth = [](int n) {  // n nested objects: arrays of ... of integers
    std::string schema = R"({"type": "integer"})";
    for (int i = 1; i < n; ++i) schema = R"({"type": "array", "items": )" + schema + "}";
    return schema;
  };
  auto with_schema = [&](int n) {
    return R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": )"
           R"({"name": "deep", "schema": )" +
           schema_of_depth(n) + "}}}";
  };
  auto error_of = [&](const std::string& body) {
    try {
      parse_completion_request(parse_body(body, s), s);
    } catch (const api_error& e) {
      return e;
    }
    return api_error(200, "");
  };
  // Past the body's 64 levels, within the schema's 500: parsed, the schema kept whole.
  CHECK(error_of(with_schema(100)).status == 200);
  CHECK(error_of(with_schema(s.max_schema_depth)).status == 200);
  const generation_request r = parse_completion_request(parse_body(with_schema(100), s), s);
  CHECK(r.params.response_format.rfind("json_schema:{", 0) == 0);
  for (int n : {s.max_schema_depth + 1, 10000}) {
    const api_error e = error_of(with_schema(n));
    CHECK(e.status == 400);
    CHECK(e.param == "response_format.json_schema.schema");
    const std::string m = e.what();
    CHECK(m.find("nested too deeply") != std::string::npos);
    CHECK(m.find("'response_format.json_schema.schema' nests deeper than 500 levels") !=
          std::string::npos);
    CHECK(m.find("(at response_format.json_schema.schema.items.items.items") != std::string::npos);
    CHECK(m.find("server.max_schema_depth") != std::string::npos);
  }
  // Elsewhere the body's limit holds, naming the field and where in it.
  std::string deep_messages = R"({"messages": [{"role": "user", "content": "q", "x": )";
  deep_messages += std::string(70, '[') + std::string(70, ']') + "}]}";
  const api_error e = error_of(deep_messages);
  CHECK(e.param == "messages");
  CHECK(std::string(e.what()).find("nested deeper than 64 levels in 'messages' (at "
                                   "messages[0].x[0][0]") != std::string::npos);
  // A schema elsewhere (a field the server ignores) gets the body's limit.
  const std::string elsewhere =
      R"({"prompt": "x", "x_schema": {"schema": )" + schema_of_depth(100) + "}}";
  CHECK(error_of(elsewhere).param == "x_schema");
  // The path: keys (escapes as written) and array indices; strings in values do not count.
  const body_shape shape = measure_body(R"({"a": 1, "b": [0, "]", {"c\"": "{", "d": [[1]]}]})", 4);
  CHECK(shape.too_deep);
  CHECK(shape.too_deep_at == R"(b[2].d[0])");
  CHECK(shape.too_deep_field == "b");
}

TEST_CASE("API keys compare exactly") {
  const std::vector<std::string> keys{"sk-one", "sk-two"};
  CHECK(key_matches("sk-one", keys));
  CHECK(key_matches("sk-two", keys));
  CHECK(!key_matches("sk-on", keys));
  CHECK(!key_matches("sk-one ", keys));
  CHECK(!key_matches("", keys));
  CHECK(!key_matches("sk-one", {}));
}

TEST_CASE("refusals and failures map to HTTP statuses by their kind, not their words") {
  using di::runtime::failure_kind;
  CHECK(refusal_error(failure_kind::overloaded, "queue_full: 4096 requests waiting").status == 429);
  CHECK(refusal_error(failure_kind::overloaded, "queue_full: x").code == "rate_limit_exceeded");
  const api_error down = refusal_error(failure_kind::unavailable, "group 1 is down: x");
  CHECK(down.status == 503);
  CHECK(down.code == "service_unavailable");
  CHECK(refusal_error(failure_kind::internal, "logits hold nan").status == 500);
  // The words no longer decide: a message that mentions shutting down, a limit or a stop
  // string but comes as an invalid request is a 400 blaming the field its producer named.
  const api_error e = refusal_error(
      failure_kind::invalid, "stop: the cluster is shutting down, 4096 requests are in flight",
      "temperature");
  CHECK(e.status == 400);
  CHECK(e.param == "temperature");
  CHECK(refusal_error(failure_kind::invalid, "the prompt is empty", "prompt").param == "prompt");
  CHECK(refusal_error(failure_kind::invalid, "request id 3 is already live").param.empty());
  CHECK(refusal_error(failure_kind::none, "?").status == 400);
  // The message is kept whole: the scheduler's admission status comes apart from it
  // (submit_reply::status), so no words are cut off it -- not even words that look like one.
  CHECK(std::string(
            refusal_error(failure_kind::invalid, "min_tokens 9 is more", "min_tokens").what()) ==
        "min_tokens 9 is more");
  CHECK(std::string(refusal_error(failure_kind::invalid, "too_long: a stop string").what()) ==
        "too_long: a stop string");
  CHECK(std::string(refusal_error(failure_kind::overloaded, "4096 requests waiting").what())
            .ends_with("retry later: 4096 requests waiting"));
  CHECK(std::string(refusal_error(failure_kind::invalid, "stop: x").what()) == "stop: x");
  // A chat request that set max_completion_tokens is told about that field.
  const api_error c =
      refusal_error(failure_kind::invalid,
                    "prompt (10 tokens) + max_tokens (99999) exceeds the context of 4096 tokens",
                    "max_tokens", "max_completion_tokens");
  CHECK(c.param == "max_completion_tokens");
  CHECK(std::string(c.what()).find("max_completion_tokens (99999)") != std::string::npos);
  CHECK(std::string(c.what()).find("max_tokens") == std::string::npos);
  CHECK(refusal_error(failure_kind::invalid, "min_tokens must be <= max_tokens (2), got 5",
                      "min_tokens", "max_completion_tokens")
            .param == "min_tokens");
  // Chat's number of top logprobs is top_logprobs (its logprobs is a switch): named so.
  const api_error t =
      refusal_error(failure_kind::invalid, "logprobs must be <= 3 (the limit max_logprobs), got 4",
                    "logprobs", "max_tokens", "top_logprobs");
  CHECK(t.param == "top_logprobs");
  CHECK(std::string(t.what()) == "top_logprobs must be <= 3 (the limit max_logprobs), got 4");
  CHECK(refusal_error(failure_kind::invalid, "prompt_logprobs must be >= 0, got -1",
                      "prompt_logprobs", "max_tokens", "top_logprobs")
            .param == "prompt_logprobs");
  CHECK(refusal_error(failure_kind::invalid, "logprobs must be >= 0, got -1", "logprobs").param ==
        "logprobs");
  // After acceptance: a grammar the runner could not follow is the request's (400), a
  // generation cut off by the cluster a 503, anything else the engine's (500).
  const api_error g =
      generation_error(failure_kind::invalid, "the grammar refuses token 5", "response_format");
  CHECK(g.status == 400);
  CHECK(g.param == "response_format");
  CHECK(g.code == "unsupported_parameter");
  CHECK(generation_error(failure_kind::unavailable, "lost the router: x", "").status == 503);
  CHECK(generation_error(failure_kind::internal, "logits hold nan", "").status == 500);
  CHECK(generation_error(failure_kind::none, "?", "").status == 500);
}

/// The token whose bytes are the single byte `b`.
static di::tok::token_id single_byte_token(const di::tok::tokenizer& tok, unsigned char b) {
  for (di::tok::token_id id = 0; id < di::tok::token_id(tok.vocab_size()); ++id) {
    const auto bytes = tok.id_to_token(id) ? tok.token_bytes(id) : std::string_view();
    if (bytes.size() == 1 && static_cast<unsigned char>(bytes[0]) == b) return id;
  }
  FAIL("no token for byte");
  return di::tok::token_id(-1);
}

TEST_CASE("text_offset: a token after a fragment that never completes begins after its U+FFFD") {
  const auto tok = di::tok::tokenizer::from_dir(
      di::test::shared_path("models/deepseek-v3-tokenizer").string(), {});
  auto id_of_byte = [&](unsigned char b) { return single_byte_token(tok, b); };
  // "x", the first two bytes of a 3-byte character, then "y" (which abandons them: U+FFFD),
  // then a complete 3-byte character split over three tokens, "z", a 2-byte character, and a
  // lone continuation byte (its own U+FFFD).
  const std::string bytes = "x\xE4\xB8y\xE4\xB8\xADz\xC3\xBF\x80";
  text_offsets offsets(tok, true);
  std::vector<std::size_t> got;
  std::string text;
  di::tok::incremental_detokenizer detok(tok);
  for (unsigned char b : bytes) {
    got.push_back(offsets.push(id_of_byte(b)));
    text += detok.push(id_of_byte(b));
  }
  // text: x U+FFFD y 中 z ÿ U+FFFD (the \xC3\xBF completes; \x80 alone is invalid)
  CHECK(text == "x\xEF\xBF\xBDy\xE4\xB8\xADz\xC3\xBF\xEF\xBF\xBD");
  // x at 0; the fragment's tokens share the U+FFFD's offset 1; y at 2 (it was 1); the three
  // bytes of 中 share 3; z at 4; ÿ's two bytes 5; the lone byte's U+FFFD at 6.
  CHECK(got == std::vector<std::size_t>{0, 1, 1, 2, 3, 3, 3, 4, 5, 5, 6});
  // Pending bytes, then a byte that abandons them and starts a new sequence: "\xE4" then
  // "\xC3\xBF": U+FFFD at 0, ÿ at 1.
  text_offsets again(tok, true);
  CHECK(again.push(id_of_byte(0xE4)) == 0);
  CHECK(again.push(id_of_byte(0xC3)) == 1);
  CHECK(again.push(id_of_byte(0xBF)) == 1);
}

/// The DeepSeek tokenizer with `config` as its tokenizer_config.json.
static di::tok::tokenizer deepseek_tokenizer_with(const std::string& config) {
  std::ifstream in(di::test::shared_path("models/deepseek-v3-tokenizer/tokenizer.json"),
                   std::ios::binary);
  const std::string json_text((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
  return di::tok::tokenizer::from_json(json_text, config);
}

TEST_CASE("echo text_offset: the router's ids, the tokens it added around the text count none") {
  // (The offsets were found by encoding the prompt text again and looking for its tokens in the
  // ids: where the tokenizer appends EOS, a text of EOS's own text, [EOS, EOS], was taken as
  // the appended one first -- the text's own token counted none, its offsets [0, 0].)
  const std::string bos = "<｜begin▁of▁sentence｜>", eos = "<｜end▁of▁sentence｜>";  // 21, 19
  const auto config = [&](bool add_bos, bool add_eos) {
    return fmt::format(R"({{"bos_token": "{}", "eos_token": "{}", "add_bos_token": {}, )"
                       R"("add_eos_token": {}}})",
                       bos, eos, add_bos, add_eos);
  };
  using offsets = std::vector<std::size_t>;
  const auto echo = [](const di::tok::tokenizer& tok, const std::string& text) {
    return echo_text_offsets(tok, tok.encode(text, {.add_bos = true}), true, true);
  };
  SUBCASE("BOS before (DeepSeek's own configuration)") {
    const auto tok = deepseek_tokenizer_with(config(true, false));
    CHECK(tokens_added_around_text(tok).num_before == 1);
    CHECK(tokens_added_around_text(tok).num_after == 0);
    // BOS, "a", EOS written in the text (its 19 characters show), "b"
    CHECK(echo(tok, "a" + eos + "b") == offsets{0, 0, 1, 20});
    // a text of BOS's own text: [BOS, BOS], the second one the text's
    CHECK(echo(tok, bos + "x") == offsets{0, 0, 21});
    CHECK(echo(tok, "") == offsets{0});  // BOS alone
  }
  SUBCASE("EOS after") {
    const auto tok = deepseek_tokenizer_with(config(false, true));
    CHECK(tokens_added_around_text(tok).num_before == 0);
    CHECK(tokens_added_around_text(tok).num_after == 1);
    CHECK(echo(tok, eos) == offsets{0, 19});  // the old search gave {0, 0}
    CHECK(echo(tok, "a" + eos) == offsets{0, 1, 20});
  }
  SUBCASE("both, and neither") {
    const auto both = deepseek_tokenizer_with(config(true, true));
    CHECK(tokens_added_around_text(both).num_before == 1);
    CHECK(tokens_added_around_text(both).num_after == 1);
    CHECK(echo(both, bos + "x" + eos) == offsets{0, 0, 21, 22, 41});
    const auto neither = deepseek_tokenizer_with(config(false, false));
    CHECK(tokens_added_around_text(neither).num_before == 0);
    CHECK(tokens_added_around_text(neither).num_after == 0);
    CHECK(echo(neither, bos + "x") == offsets{0, 21});
  }
  SUBCASE("a token-id prompt is echoed as it decodes") {
    const auto tok = deepseek_tokenizer_with(config(true, false));
    const std::vector<std::int32_t> ids = tok.encode(bos + "a" + eos + "b");  // [BOS, a, EOS, b]
    REQUIRE(ids.size() == 4);
    CHECK(echo_text_offsets(tok, ids, false, true) == offsets{0, 0, 1, 1});
    CHECK(echo_text_offsets(tok, ids, false, false) == offsets{0, 21, 22, 41});
  }
}

TEST_CASE("a body that is not JSON gets the parser's reason") {
  const server_settings s;
  CHECK_THROWS_WITH_AS(
      parse_body(R"({"prompt": "x", "temperature": 1e400})", s),
      doctest::Contains("the body is not valid JSON: number overflow parsing '1e400'"), api_error);
  CHECK_THROWS_WITH_AS(parse_body("{\"prompt\": \"\xff\"}", s),
                       doctest::Contains("ill-formed UTF-8"), api_error);
  CHECK_THROWS_WITH_AS(parse_body("[1]", s), doctest::Contains("must be a JSON object"), api_error);
}

TEST_CASE("completions top_logprobs hold their token; of equal texts the likelier's value") {
  const auto tok = di::tok::tokenizer::from_dir(
      di::test::shared_path("models/deepseek-v3-tokenizer").string(), {});
  auto id_of_byte = [&](unsigned char b) { return single_byte_token(tok, b); };
  const std::int32_t a = id_of_byte('a'), b = id_of_byte('b'), c = id_of_byte('c');
  // Two lone continuation bytes: both show as U+FFFD.
  const std::int32_t f1 = id_of_byte(0x80), f2 = id_of_byte(0x81);
  using di::runtime::position_logprobs;
  // sampled 'c', not among the top 2: it is added after them (OpenAI: up to logprobs + 1)
  const position_logprobs outside{.id = c, .logprob = -5.f, .top = {{a, -0.5f}, {b, -1.f}}};
  // logprobs 0: the sampled token alone
  const position_logprobs alone{.id = b, .logprob = -1.f, .top = {}};
  // the sampled token among the top: no second entry
  const position_logprobs inside{.id = a, .logprob = -0.5f, .top = {{a, -0.5f}, {b, -1.f}}};
  // two tokens of the same text: the first (likelier) value stays, in its place
  const position_logprobs same{
      .id = f2, .logprob = -3.f, .top = {{a, -1.f}, {f1, -2.f}, {b, -2.5f}, {f2, -3.f}}};
  const json lp =
      completion_logprobs(tok, {c, b, a, f2}, {&outside, &alone, &inside, &same}, {0, 1, 2, 3});
  const json& top = lp["top_logprobs"];
  CHECK(top[0].dump() == R"({"a":-0.5,"b":-1.0,"c":-5.0})");
  CHECK(top[1].dump() == R"({"b":-1.0})");
  CHECK(top[2].dump() == R"({"a":-0.5,"b":-1.0})");
  CHECK(top[3].dump() == "{\"a\":-1.0,\"\xEF\xBF\xBD\":-2.0,\"b\":-2.5}");
  CHECK(lp["tokens"][3] == "\xEF\xBF\xBD");
}

/// The token whose bytes are `bytes`.
static di::tok::token_id token_of_bytes(const di::tok::tokenizer& tok, std::string_view bytes) {
  for (di::tok::token_id id = 0; id < di::tok::token_id(tok.vocab_size()); ++id)
    if (tok.id_to_token(id) && tok.token_bytes(id) == bytes) return id;
  FAIL("no token with these bytes");
  return di::tok::token_id(-1);
}

TEST_CASE("logprob token names: one U+FFFD per maximal invalid subpart, as Python decodes") {
  const auto tok = di::tok::tokenizer::from_dir(
      di::test::shared_path("models/deepseek-v3-tokenizer").string(), {});
  const std::string fffd = "\xEF\xBF\xBD";
  // Expected texts are Python's bytes(b).decode("utf-8", "replace"). Each invalid byte was one
  // U+FFFD: [236, 149] (a 3-byte character cut short) was named U+FFFD U+FFFD.
  const std::pair<std::string, std::string> cases[] = {
      {"\xEC\x95", fffd},                   // 3-byte lead + continuation: one subpart
      {"\xE4\xB8", fffd},                   // another, the same name
      {"\xD0\xBE\xD0", "\xD0\xBE" + fffd},  // "о", then a 2-byte lead alone
      {"\x94\xD7", fffd + fffd},            // a stray continuation, then a lead alone
      {"\x80", fffd},
      {"\xC3\xBF", "\xC3\xBF"}};  // valid: as is
  for (const auto& [bytes, text] : cases) {
    CAPTURE(bytes);
    CHECK(token_text(tok, token_of_bytes(tok, bytes)) == text);
  }
  // Two such tokens in one top_logprobs dict share a name: the likelier keeps the key, and the
  // other is not in the dict (as in vLLM, whose dict keeps the later one's value under it);
  // return_tokens_as_token_ids keeps both.
  const std::int32_t x = token_of_bytes(tok, "\xEC\x95"), y = token_of_bytes(tok, "\xE4\xB8");
  const di::runtime::position_logprobs e{.id = y, .logprob = -2.f, .top = {{x, -1.f}, {y, -2.f}}};
  CHECK(completion_logprobs(tok, {y}, {&e}, {0})["top_logprobs"][0].dump() ==
        "{\"" + fffd + "\":-1.0}");
  CHECK(completion_logprobs(tok, {y}, {&e}, {0}, true)["top_logprobs"][0].size() == 2);
}

TEST_CASE("return_tokens_as_token_ids names logprobs' tokens by id, as vLLM does") {
  const auto tok = di::tok::tokenizer::from_dir(
      di::test::shared_path("models/deepseek-v3-tokenizer").string(), {});
  const std::int32_t a = *tok.token_to_id("a"), b = *tok.token_to_id("b");
  const di::runtime::position_logprobs e{.id = b, .logprob = -2.f, .top = {{a, -0.5f}}};
  const json c = completion_logprobs(tok, {b}, {&e}, {0}, true);
  CHECK(c["tokens"][0] == fmt::format("token_id:{}", b));
  CHECK(c["top_logprobs"][0].dump() ==
        fmt::format(R"({{"token_id:{}":-0.5,"token_id:{}":-2.0}})", a, b));
  const json ch = chat_logprobs(tok, {e}, true);
  CHECK(ch["content"][0]["token"] == fmt::format("token_id:{}", b));
  CHECK(ch["content"][0]["bytes"] == json::array({int('b')}));  // the token's own bytes
  CHECK(ch["content"][0]["top_logprobs"][0]["token"] == fmt::format("token_id:{}", a));
  CHECK(chat_logprobs(tok, {e})["content"][0]["token"] == "b");
}

/// The DeepSeek tokenizer with one more special token at id 128900: ids 128815..128899 are a
/// gap (no token), as tokenizers whose added tokens skip ids have.
static di::tok::tokenizer deepseek_tokenizer_with_gap() {
  std::ifstream in(di::test::shared_path("models/deepseek-v3-tokenizer/tokenizer.json"),
                   std::ios::binary);
  json t = json::parse(
      std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
  t["added_tokens"].push_back({{"id", 128900},
                               {"content", "<gap_probe>"},
                               {"single_word", false},
                               {"lstrip", false},
                               {"rstrip", false},
                               {"normalized", false},
                               {"special", true}});
  return di::tok::tokenizer::from_json(t.dump(), "{}");
}

TEST_CASE("a token-id prompt with an id the tokenizer has no token for is a 400 naming it") {
  // The router checks the range only: an id in a gap of the tokenizer's ids passed, and its
  // echo was "" and its logprobs named it "" (prompt_text, token_text and text_offsets caught
  // the tokenizer's error and went on).
  const auto tok = deepseek_tokenizer_with_gap();
  REQUIRE(tok.vocab_size() == 128901);
  REQUIRE_FALSE(tok.id_to_token(128850).has_value());
  const server_settings s;
  const auto request = [&](const std::string& prompt) {
    return parse_completion_request(parse_body(R"({"prompt": )" + prompt + "}", s), s);
  };
  CHECK_NOTHROW(check_prompt_ids(request("[1, 2, 128900]"), tok));
  CHECK_NOTHROW(check_prompt_ids(request(R"("text")"), tok));
  const auto refused = [&](const std::string& prompt, const std::string& message) {
    CAPTURE(prompt);
    try {
      check_prompt_ids(request(prompt), tok);
      FAIL("no error");
    } catch (const api_error& e) {
      CHECK(e.status == 400);
      CHECK(e.param == "prompt");
      CHECK(std::string(e.what()) == message);
    }
  };
  refused("[1, 128850, 2]",
          "prompt token 128850 (position 1) is not in the vocabulary: the tokenizer has no token "
          "with that id (a gap in its ids)");
  refused("[[1], [5, 6, 128899]]",
          "prompt token 128899 (prompt 1, position 2) is not in the vocabulary: the tokenizer "
          "has no token with that id (a gap in its ids)");
  refused("[3, 128901]", "prompt token 128901 (position 1) is outside the vocabulary [0, 128901)");
  // The tokenizer's own decode refuses such an id: what the echo would have needed.
  CHECK_THROWS_AS(tok.decode(std::vector<std::int32_t>{1, 128850}), di::error);
}

TEST_CASE("logprobs name an id without a token by its id, with null bytes; never as \"\"") {
  // The model's head scores ids in the tokenizer's gaps, so one can be among the top logprobs:
  // it was named "" (with bytes []), as if it were an empty token.
  const auto tok = deepseek_tokenizer_with_gap();
  const std::int32_t a = *tok.token_to_id("a"), gap = 128850;
  const di::runtime::position_logprobs e{
      .id = a, .logprob = -0.5f, .top = {{a, -0.5f}, {gap, -1.f}}};
  const json c = completion_logprobs(tok, {a}, {&e}, {0});
  CHECK(c["top_logprobs"][0].dump() == R"({"a":-0.5,"token_id:128850":-1.0})");
  const json ch = chat_logprobs(tok, {e});
  CHECK(ch["content"][0]["token"] == "a");
  CHECK(ch["content"][0]["bytes"] == json::array({int('a')}));
  CHECK(ch["content"][0]["top_logprobs"][1]["token"] == "token_id:128850");
  CHECK(ch["content"][0]["top_logprobs"][1]["bytes"].is_null());
  // token_text and text_offsets, which only ever get ids with a token, now say so loudly.
  CHECK_THROWS_WITH_AS(token_text(tok, gap), doctest::Contains("not in the vocabulary"), di::error);
  text_offsets offsets(tok, true);
  CHECK(offsets.push(a) == 0);
  CHECK_THROWS_AS(offsets.push(gap), di::error);
}

TEST_CASE("vLLM fields that would change the output are honoured or refused, never ignored") {
  const char* msgs = R"("messages": [{"role": "user", "content": "q"}])";
  const auto chat = [&](const std::string& more) {
    return param_of(fmt::format("{{{}, {}}}", msgs, more), true);
  };
  const auto completion = [](const std::string& more) {
    return param_of(fmt::format(R"({{"prompt": "x", {}}})", more));
  };
  // a template from the request: refused (the model's own template answered)
  CHECK(chat(R"("chat_template": "{{ 'zzz' }}")") == "chat_template");
  CHECK(chat(R"("chat_template_kwargs": {"chat_template": "{{ 'zzz' }}"})") ==
        "chat_template_kwargs.chat_template");
  CHECK(chat(R"("chat_template_kwargs": {"chat_template": null, "x": 1})").empty());
  // documents reach the template; their shape is checked
  const server_settings s;
  const generation_request r = parse_chat_request(
      json::parse(fmt::format(R"({{{}, "documents": [{{"title": "a", "text": "b"}}]}})", msgs)), s);
  CHECK(r.documents.dump() == R"([{"title":"a","text":"b"}])");
  CHECK(chat(R"("documents": "x")") == "documents");
  CHECK(chat(R"("documents": [1])") == "documents");
  const std::function<std::string(const std::string&)> endpoints[] = {completion, chat};
  for (const auto& ask : endpoints) {
    // accepted at their defaults, refused otherwise
    CHECK(ask(R"("priority": 0)").empty());
    CHECK(ask(R"("priority": 5)") == "priority");
    CHECK(ask(R"("priority": "high")") == "priority");
    CHECK(ask(R"("length_penalty": 1.0)").empty());
    CHECK(ask(R"("length_penalty": 0.5)") == "length_penalty");
    CHECK(ask(R"("spaces_between_special_tokens": true)").empty());
    CHECK(ask(R"("spaces_between_special_tokens": false)") == "spaces_between_special_tokens");
    CHECK(ask(R"("spaces_between_special_tokens": "no")") == "spaces_between_special_tokens");
    // prompt_embeds: the engine takes no embeddings as input, so any value is a 400
    CHECK(ask(R"("prompt_embeds": "AAAA")") == "prompt_embeds");
    CHECK(ask(R"("cache_salt": "tenant-a")").empty());  // honoured: the prefix cache's chain
    CHECK(ask(R"("cache_salt": "")") == "cache_salt");
    CHECK(ask(R"("cache_salt": 5)") == "cache_salt");
    CHECK(ask(R"("cache_salt": null, "prompt_embeds": null, "priority": null)").empty());
    // honoured
    CHECK(ask(R"("return_tokens_as_token_ids": 1)") == "return_tokens_as_token_ids");
    // fields that change nothing are still type-checked (they passed with any type)
    CHECK(ask(R"("store": false, "metadata": {"a": "b"})").empty());
    CHECK(ask(R"("store": "x")") == "store");
    CHECK(ask(R"("metadata": "x")") == "metadata");
    CHECK(ask(R"("metadata": {"a": 1})") == "metadata");
  }
  CHECK(parse_completion_request(
            json::parse(R"({"prompt": "x", "return_tokens_as_token_ids": true})"), s)
            .return_tokens_as_token_ids);
  CHECK(parse_chat_request(json::parse(fmt::format(R"({{{}, "cache_salt": "t"}})", msgs)), s)
            .params.cache_salt == "t");
}
