// Keys and items a schema is silent about (json_extra_keys): generation writes no key an object
// schema with properties/patternProperties does not declare and no item after prefixItems,
// unless the schema says so or json_extra_keys::allow (`+extra_keys`) asks for JSON Schema's
// default, as xgrammar's strict_mode and llama.cpp do; validation keeps JSON Schema's default.
#include "common/error.hpp"
#include "grammar_test_util.hpp"
#include "runtime/grammar/json_instance.hpp"
#include "runtime/grammar/json_schema.hpp"
#include "runtime/grammar/response_format.hpp"
#include "tests/runtime/grammar/conformance_util.hpp"

#include <doctest/doctest.h>

using namespace di::grammar;

namespace {

enum class mode { generation, allow, validation };

json_schema_options options_of(mode m) {
  json_schema_options o;
  o.use = m == mode::validation ? json_schema_use::validation : json_schema_use::generation;
  o.extra_keys = m == mode::allow ? json_extra_keys::allow : json_extra_keys::forbid;
  return o;
}

std::shared_ptr<const compiled_grammar> compile(const nlohmann::ordered_json& schema, mode m) {
  return compiled_grammar::compile(compile_json_schema(schema, options_of(m)).g);
}

/// Whether the grammar of `schema` under `m` takes `instance` (in some key order).
bool takes(const char* schema, mode m, const char* instance) {
  return accepts_instance(*compile(nlohmann::ordered_json::parse(schema), m),
                          nlohmann::ordered_json::parse(instance));
}

/// `instance` is taken by validation and by generation with +extra_keys, refused by generation.
void only_with_extras(const char* schema, const char* instance) {
  const std::string schema_text = schema, instance_text = instance;
  CAPTURE(schema_text);
  CAPTURE(instance_text);
  CHECK_FALSE(takes(schema, mode::generation, instance));
  CHECK(takes(schema, mode::allow, instance));
  CHECK(takes(schema, mode::validation, instance));
}

/// `instance` is taken in every mode.
void always(const char* schema, const char* instance) {
  const std::string schema_text = schema, instance_text = instance;
  CAPTURE(schema_text);
  CAPTURE(instance_text);
  CHECK(takes(schema, mode::generation, instance));
  CHECK(takes(schema, mode::allow, instance));
  CHECK(takes(schema, mode::validation, instance));
}

}  // namespace

TEST_CASE(
    "generation writes no undeclared key and no item after prefixItems; +extra_keys and "
    "validation do") {
  const char* object = R"({"type": "object", "properties": {"a": {"type": "integer"}}})";
  always(object, R"({"a": 1})");
  always(object, "{}");
  only_with_extras(object, R"({"a": 1, "b": 2})");
  only_with_extras(object, R"({"b": "x"})");
  // Nested objects too, and properties without "type": "object".
  const char* nested = R"({"properties": {"p": {"properties": {"q": {"type": "null"}}}}})";
  always(nested, R"({"p": {"q": null}})");
  only_with_extras(nested, R"({"p": {"q": null, "r": 1}})");
  const char* tuple =
      R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]})";
  always(tuple, R"([1, "x"])");
  always(tuple, "[1]");
  only_with_extras(tuple, R"([1, "x", true])");
  // draft 7's tuple form: an items list without additionalItems
  const char* draft7 =
      R"({"$schema": "http://json-schema.org/draft-07/schema#", "items": [{"type": "integer"}]})";
  always(draft7, "[1]");
  only_with_extras(draft7, "[1, 2]");
}

TEST_CASE("what the schema says of other keys and items is kept") {
  always(R"({"properties": {"a": {}}, "additionalProperties": true})", R"({"a": 1, "b": 2})");
  const char* typed = R"({"properties": {"a": {}}, "additionalProperties": {"type": "string"}})";
  always(typed, R"({"a": 1, "b": "x"})");
  for (mode m : {mode::generation, mode::allow, mode::validation})
    CHECK_FALSE(takes(typed, m, R"({"a": 1, "b": 2})"));
  const char* closed = R"({"properties": {"a": {}}, "additionalProperties": false})";
  for (mode m : {mode::generation, mode::allow, mode::validation})
    CHECK_FALSE(takes(closed, m, R"({"a": 1, "b": 2})"));
  // unevaluatedProperties says it as well
  always(R"({"properties": {"a": {}}, "unevaluatedProperties": {"type": "string"}})",
         R"({"a": 1, "b": "x"})");
  always(R"({"allOf": [{"properties": {"a": {}}}], "unevaluatedProperties": true})",
         R"({"a": 1, "b": 2})");
  // Pattern properties are declared keys (as xgrammar's strict mode keeps them); keys matching
  // no pattern are not.
  const char* patterns = R"({"patternProperties": {"^x_": {"type": "integer"}}})";
  always(patterns, R"({"x_1": 1, "x_2": 2})");
  only_with_extras(patterns, R"({"x_1": 1, "y": 2})");
  const char* both = R"({"properties": {"a": {}}, "patternProperties": {"^x_": {}}})";
  always(both, R"({"a": 1, "x_1": 2})");
  only_with_extras(both, R"({"a": 1, "y": 2})");
  // Arrays: items, additionalItems (draft 7) and unevaluatedItems say it.
  always(R"({"prefixItems": [{"type": "integer"}], "items": {"type": "string"}})",
         R"([1, "a", "b"])");
  always(R"({"prefixItems": [{}], "items": true})", "[1, 2, 3]");
  always(R"({"prefixItems": [{}], "unevaluatedItems": {"type": "integer"}})", "[1, 2, 3]");
  always(
      R"({"$schema": "http://json-schema.org/draft-07/schema#", "items": [{}], "additionalItems": true})",
      "[1, 2]");
  // A plain item list has no positional items: nothing to close.
  always(R"({"type": "array", "items": {"type": "integer"}})", "[1, 2, 3]");
}

TEST_CASE("schemas that describe no shape stay open") {
  always(R"({"type": "object"})", R"({"a": 1})");
  always(R"({"type": "object", "minProperties": 1})", R"({"a": 1})");
  always(R"({"type": "object", "required": ["a"]})", R"({"a": 1, "b": 2})");
  always(R"({"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}})",
         R"({"ab": 1, "cd": 2})");
  always(R"({"type": "array"})", "[1, 2]");
  // Made-up parts do not close: not's complement ("required a, a: not S") and a dependency's
  // alternatives are rewritings, not the user's description of the object.
  always(R"({"type": "object", "not": {"properties": {"a": {"type": "string"}}}})",
         R"({"a": 1, "b": 2})");
  always(R"({"type": "object", "not": {"required": ["a"]}})", R"({"b": 2})");
  always(R"({"type": "object", "dependentRequired": {"a": ["b"]}})", R"({"a": 1, "b": 2, "c": 3})");
  always(R"({"not": {"prefixItems": [{"type": "string"}]}})", "[1, 2, 3]");
}

TEST_CASE("the strict default makes no satisfiable schema unsatisfiable") {
  // More keys asked for than declared: the object stays open (xgrammar refuses the schema).
  const char* more = R"({"properties": {"a": {}}, "required": ["a"], "minProperties": 2})";
  always(more, R"({"a": 1, "b": 2})");
  always(R"({"prefixItems": [{}], "minItems": 3})", "[1, 2, 3]");
  // allOf of objects each declaring different properties: a key declared by either member is
  // allowed (the conjunction's union, as llama.cpp merges allOf); others are not.
  const char* all_of = R"({"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                                     {"properties": {"b": {"type": "string"}}, "required": ["b"]}]})";
  always(all_of, R"({"a": 1, "b": "x"})");
  only_with_extras(all_of, R"({"a": 1, "b": "x", "c": null})");
  // One member saying what other keys may be decides for the conjunction.
  const char* all_of_open = R"({"allOf": [{"properties": {"a": {}}},
                                          {"additionalProperties": {"type": "integer"}}]})";
  always(all_of_open, R"({"a": 1, "c": 2})");
  // $ref merged with siblings (2020-12): the target's and the siblings' properties.
  const char* ref = R"({"$defs": {"base": {"properties": {"id": {"type": "integer"}}}},
                        "$ref": "#/$defs/base", "properties": {"name": {"type": "string"}}})";
  always(ref, R"({"id": 1, "name": "x"})");
  only_with_extras(ref, R"({"id": 1, "name": "x", "other": 0})");
  // anyOf alternatives are closed each with what is merged into it.
  const char* any_of = R"({"properties": {"kind": {"type": "string"}},
                           "anyOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]})";
  always(any_of, R"({"kind": "x", "a": 1})");
  always(any_of, R"({"kind": "x", "b": 1})");
  only_with_extras(any_of, R"({"kind": "x", "c": 1})");
  // if/then: the `if` schema's properties are declared in the branch where it holds.
  const char* cond = R"({"properties": {"kind": {"enum": ["a", "b"]}},
                         "if": {"properties": {"kind": {"const": "a"}}},
                         "then": {"properties": {"x": {"type": "integer"}}, "required": ["x"]}})";
  always(cond, R"({"kind": "a", "x": 1})");
  always(cond, R"({"kind": "b"})");
  only_with_extras(cond, R"({"kind": "b", "x": 1})");
}

TEST_CASE(
    "xgrammar's non-strict cases: +extra_keys agrees with them, the default with strict mode") {
  // Its test_non_strict compiles with strict_mode=False; its other cases use the default, True.
  int seen = 0;
  for (const auto& line : di::grammar::test::read_jsonl_ordered(
           di::test::shared_path("testdata/grammars/xgrammar_json_schema_cases.jsonl"))) {
    if (line["test"] != "test_non_strict") continue;
    ++seen;
    const auto& a = line["args"];
    CAPTURE(a["schema"].dump());
    const auto allow = compile(a["schema"], mode::allow);
    const auto strict = compile(a["schema"], mode::generation);
    const std::size_t declared = a["schema"].contains("prefixItems")
                                     ? a["schema"]["prefixItems"].size()
                                     : a["schema"]["properties"].size();
    for (const auto& v : a["accepted_instances"]) {
      CAPTURE(v.dump());
      CHECK(accepts_instance(*allow, v));
      CHECK(accepts_instance(*strict, v) == (v.size() <= declared));  // no extras in strict mode
    }
    for (const auto& v : a["rejected_instances"]) {
      CAPTURE(v.dump());
      // xgrammar requires every prefixItems position ([1] for two); JSON Schema does not, nor we.
      const bool short_tuple = v.is_array() && v.size() < declared;
      CHECK(accepts_instance(*allow, v) == short_tuple);
      CHECK(accepts_instance(*strict, v) == short_tuple);
    }
  }
  CHECK(seen == 2);
}

TEST_CASE("+extra_keys is a JSON formats' modifier, carried inline and part of the cache key") {
  const std::string schema = R"({"type":"object","properties":{"a":{"type":"integer"}}})";
  const response_format strict = parse_inline_response_format("json_schema:" + schema);
  CHECK(strict.schema.extra_keys == json_extra_keys::forbid);
  const response_format open =
      parse_inline_response_format("json_schema+compact+extra_keys:" + schema);
  CHECK(open.schema.extra_keys == json_extra_keys::allow);
  CHECK(open.schema.whitespace == json_whitespace::compact);
  CHECK(to_inline_spec(open) == "json_schema+compact+extra_keys:" + schema);
  CHECK(parse_inline_response_format(to_inline_spec(open)).schema.extra_keys ==
        json_extra_keys::allow);
  CHECK(parse_inline_response_format("json_object+extra_keys").schema.extra_keys ==
        json_extra_keys::allow);
  CHECK_THROWS_WITH_AS(parse_inline_response_format("regex+extra_keys:a"),
                       doctest::Contains("applies to JSON formats only"), di::error);
  CHECK_THROWS_WITH_AS(parse_inline_response_format("json_schema+extra:{}"),
                       doctest::Contains("(compact, pretty, any, lenient, extra_keys)"), di::error);
  // Formats that differ in extra_keys alone are cached apart.
  std::vector<std::string> tokens = {"{", "}", "\"", "a", "b", ":", ",", "1"};
  auto vocab =
      token_vocabulary::from_tokens(tokens, {std::int32_t(tokens.size())}, tokens.size() + 1);
  grammar_cache cache;
  response_format same_text = strict;
  same_text.schema.extra_keys = json_extra_keys::allow;
  CHECK(cache.get(strict, vocab) != cache.get(same_text, vocab));
  CHECK(cache.size() == 2);
  using di::grammar::test::accepts;
  CHECK(accepts(*compile_response_format(strict), R"({"a":1})"));
  CHECK_FALSE(accepts(*compile_response_format(strict), R"({"a":1,"b":2})"));
  CHECK(accepts(*compile_response_format(open), R"({"a":1,"b":2})"));
  // tool-call argument grammars take the modifier too
  const std::string tools =
      R"(:{"begin":"","end":"","separator":"","calls":[{"begin":"<","end":">","schema":)" + schema +
      "}]}";
  CHECK_FALSE(accepts(*compile_response_format(parse_inline_response_format("tool_calls" + tools)),
                      R"(<{"a":1,"b":2}>)"));
  CHECK(accepts(
      *compile_response_format(parse_inline_response_format("tool_calls+extra_keys" + tools)),
      R"(<{"a":1,"b":2}>)"));
}

TEST_CASE(
    "jsonschemabench: the default refuses no schema +extra_keys compiles, and refuses valid "
    "instances only for their undeclared keys") {
  // Per schema: the default's grammar; the +extra_keys one only where the default refuses the
  // schema or one of its valid instances (compiling both for all doubled the test's time).
  using di::grammar::test::tally;
  tally compiled{"jsonschemabench: schemas +extra_keys compiles that the default compiles too"};
  tally valid{"jsonschemabench: valid instances generation takes (default)"};
  tally extras{"jsonschemabench: valid instances the default refuses that +extra_keys takes"};
  tally invalid{"jsonschemabench: invalid instances generation refuses (default)"};
  for (const auto& row : di::grammar::test::read_jsonl_ordered(
           di::test::shared_path("testdata/jsonschema/jsonschemabench_public.jsonl"))) {
    const std::string id = row["id"];
    std::shared_ptr<const compiled_grammar> strict, open;
    auto compile_open = [&]() -> bool {
      try {
        if (!open) open = compile(row["schema"], mode::allow);
      } catch (const di::error&) {
      }
      return open != nullptr;
    };
    try {
      strict = compile(row["schema"], mode::generation);
    } catch (const di::error& e) {
      if (compile_open()) compiled.record(false, id + ": " + e.what());
      continue;  // else a schema generation refuses anyway
    }
    compiled.record(true, id);
    for (const auto& t : row["tests"]) {
      const bool taken = accepts_instance(*strict, t["data"]);
      const std::string text = id + ": " + t["data"].dump().substr(0, 160);
      if (!t["valid"].get<bool>()) {
        invalid.record(!taken, text);
        continue;
      }
      valid.record(taken, text);
      if (!taken) extras.record(compile_open() && accepts_instance(*open, t["data"]), text);
    }
  }
  for (const auto* t : {&compiled, &valid, &extras, &invalid}) t->print();
  CHECK(compiled.total > 100);
  CHECK(compiled.rate() == 1.0);
  CHECK(extras.rate() == 1.0);
  CHECK(invalid.rate() == 1.0);
}
