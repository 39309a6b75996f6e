// JSON Schema keywords enforced through complements and counting (schema_negate.cpp,
// array_schema.cpp): not, if/then/else, overlapping oneOf, unevaluated*, maxContains,
// uniqueItems over finite item sets, and the clear errors where a complement is not expressible.
#include "common/error.hpp"
#include "runtime/grammar/compiled_grammar.hpp"
#include "runtime/grammar/json_instance.hpp"
#include "runtime/grammar/json_schema.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>

using namespace di::grammar;

namespace {

std::shared_ptr<const compiled_grammar> compile(const std::string& schema, bool lenient = false) {
  json_schema_options o;
  o.lenient = lenient;
  compile_options co;
  co.allow_empty_language = true;
  return compiled_grammar::compile(compile_json_schema_text(schema, o).g, co);
}

bool accepts(const compiled_grammar& g, const std::string& instance) {
  return accepts_instance(g, nlohmann::ordered_json::parse(instance));
}

std::string error_of(const std::string& schema) {
  try {
    compile(schema);
  } catch (const di::error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("not: complements of strings, numbers, objects and combinations") {
  auto g = compile(R"({"not":{"type":"string","pattern":"^a","maxLength":3}})");
  CHECK(accepts(*g, R"("abcd")"));   // fails maxLength
  CHECK(accepts(*g, R"("bc")"));     // fails pattern
  CHECK_FALSE(accepts(*g, R"("ab")"));
  CHECK(accepts(*g, "3"));
  auto e = compile(R"({"type":"number","not":{"enum":[1,2.5]}})");
  CHECK(accepts(*e, "2"));
  CHECK_FALSE(accepts(*e, "1"));
  CHECK_FALSE(accepts(*e, "2.5"));
  auto o = compile(R"({"not":{"required":["a"],"properties":{"b":{"type":"integer"}}}})");
  CHECK(accepts(*o, R"({"b":1})"));
  CHECK(accepts(*o, R"({"a":1,"b":"x"})"));
  CHECK_FALSE(accepts(*o, R"({"a":1,"b":2})"));
  auto s = compile(R"({"type":"string","not":{"enum":["x","yz"]}})");
  CHECK(accepts(*s, R"("y")"));
  CHECK_FALSE(accepts(*s, R"("yz")"));
}

TEST_CASE("if/then/else and overlapping oneOf") {
  auto g = compile(R"({"if":{"type":"integer"},"then":{"minimum":10},"else":{"type":"string"}})");
  CHECK(accepts(*g, "12"));
  CHECK_FALSE(accepts(*g, "3"));
  CHECK(accepts(*g, R"("s")"));
  CHECK_FALSE(accepts(*g, "true"));
  auto o = compile(R"({"oneOf":[{"type":"integer"},{"minimum":2}]})");
  CHECK(accepts(*o, "1"));
  CHECK(accepts(*o, "2.5"));
  CHECK_FALSE(accepts(*o, "3"));  // both match
  CHECK_FALSE(accepts(*o, "1.5"));
}

TEST_CASE("unevaluatedProperties sees the properties of matching anyOf alternatives") {
  auto g = compile(R"({"type":"object","properties":{"a":true},"anyOf":[{"properties":{"b":{"type":"integer"}}},)"
                   R"({"properties":{"c":true},"required":["c"]}],"unevaluatedProperties":false})");
  CHECK(accepts(*g, R"({"a":1,"b":2})"));
  CHECK(accepts(*g, R"({"b":2,"c":1})"));       // both alternatives match: b and c evaluated
  CHECK_FALSE(accepts(*g, R"({"b":"x","c":1})"));  // only the second matches: b is unevaluated
  CHECK_FALSE(accepts(*g, R"({"a":1,"d":2})"));
}

TEST_CASE("unevaluated* inside a recursive $ref compiles (one rule per level, not an unrolling)") {
  // The rewrite of unevaluatedProperties made a new synthetic schema at each level, so the
  // compiler never met the same subschema twice and gave up "nested more than 400 levels".
  auto o = compile(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},)"
                   R"("next":{"$ref":"#/$defs/node"}},"unevaluatedProperties":false}},)"
                   R"("$ref":"#/$defs/node"})");
  CHECK(accepts(*o, R"({"v":1,"next":{"v":2,"next":{"next":{}}}})"));
  CHECK_FALSE(accepts(*o, R"({"v":1,"next":{"v":2,"x":3}})"));
  CHECK_FALSE(accepts(*o, R"({"next":{"next":{"next":{"q":1}}}})"));
  auto a = compile(R"({"$defs":{"list":{"type":"array","prefixItems":[{"type":"integer"}],)"
                   R"("items":{"$ref":"#/$defs/list"},"unevaluatedItems":false}},)"
                   R"("$ref":"#/$defs/list"})");
  CHECK(accepts(*a, "[1,[2,[3]]]"));
  CHECK_FALSE(accepts(*a, R"([1,[2,["a"]]])"));
  auto g = compile(
      R"({"$defs":{"node":{"type":"object","properties":{"next":{"$ref":"#/$defs/node"}},)"
      R"("anyOf":[{"properties":{"a":{"type":"integer"}}},{"properties":{"b":{"type":"string"}}}],)"
      R"("unevaluatedProperties":false}},"$ref":"#/$defs/node"})");
  CHECK(accepts(*g, R"({"next":{"next":{"b":"x"},"a":2},"a":1})"));
  CHECK_FALSE(accepts(*g, R"({"next":{"c":2},"a":1})"));
}

TEST_CASE("content-equal subschemas share one rule") {
  // 300 properties with the same value schema: one value rule, not 300 (it was 533 rules and
  // 384703 automaton states; compiling it for a request took 7.8 s of the step loop).
  std::string props;
  for (int i = 0; i < 300; ++i)
    props += fmt::format(R"({}"p{}":{{"type":"string","maxLength":50}})", i ? "," : "", i);
  auto g = compile(R"({"type":"object","properties":{)" + props + "}}");
  CHECK(g->num_rules() < 40);
  CHECK(accepts(*g, R"({"p0":"a","p150":"b","p299":""})"));
  CHECK_FALSE(accepts(*g, R"({"p0":1})"));
  CHECK_FALSE(accepts(*g, fmt::format(R"({{"p7":"{}"}})", std::string(51, 'x'))));
  // The same text under different bases is not merged: each {"$ref":"#/$defs/x"} resolves
  // against its own resource's $defs.
  auto r = compile(R"({"type":"object","properties":{"a":{"$ref":"#/$defs/x"},)"
                   R"("b":{"$id":"https://example.com/other","$defs":{"x":{"type":"integer"}},)"
                   R"("properties":{"c":{"$ref":"#/$defs/x"}}}},)"
                   R"("$defs":{"x":{"type":"string"}}})");
  CHECK(accepts(*r, R"({"a":"s","b":{"c":1}})"));
  CHECK_FALSE(accepts(*r, R"({"a":"s","b":{"c":"s"}})"));
  CHECK_FALSE(accepts(*r, R"({"a":1})"));
}

TEST_CASE("maxContains and uniqueItems over finite sets") {
  auto c = compile(R"({"contains":{"const":1},"minContains":1,"maxContains":2})");
  CHECK(accepts(*c, "[1,2,1]"));
  CHECK_FALSE(accepts(*c, "[1,1,1]"));
  CHECK_FALSE(accepts(*c, "[2]"));
  auto u = compile(R"({"type":"array","uniqueItems":true,"items":{"enum":["GET","POST","PUT"]},"minItems":1})");
  CHECK(accepts(*u, R"(["PUT","GET"])"));
  CHECK_FALSE(accepts(*u, R"(["GET","GET"])"));
  CHECK_FALSE(accepts(*u, "[]"));
  auto t = compile(R"({"prefixItems":[{"type":"boolean"},{"type":"boolean"}],"items":false,"uniqueItems":true})");
  CHECK(accepts(*t, "[true,false]"));
  CHECK_FALSE(accepts(*t, "[true,true]"));
}

TEST_CASE("complements that cannot be expressed are errors naming the keyword") {
  CHECK(error_of(R"({"not":{"type":"object","additionalProperties":false}})").find("'additionalProperties'") != std::string::npos);
  CHECK(error_of(R"({"type":"array","uniqueItems":true})").find("'uniqueItems'") != std::string::npos);
  CHECK(error_of(R"({"not":{"multipleOf":3}})").find("'multipleOf'") != std::string::npos);
  // Pruned: an array can never be the object that fails additionalProperties.
  CHECK(error_of(R"({"type":"array","not":{"additionalProperties":false}})").empty());
  // Lenient: uniqueItems is skipped, the array still compiles.
  auto l = compile(R"({"type":"array","uniqueItems":true,"items":{"type":"string"}})", true);
  CHECK(accepts(*l, R"(["a","a"])"));
}

TEST_CASE("format date: February 29 only in leap years") {
  auto d = compile(R"({"type":"string","format":"date"})");
  for (const char* leap : {"2024", "2000", "1600", "0000", "1996"})
    CHECK_MESSAGE(accepts(*d, fmt::format("\"{}-02-29\"", leap)), leap);
  for (const char* common : {"2023", "1900", "2100", "1800", "0001", "2026"})
    CHECK_MESSAGE(!accepts(*d, fmt::format("\"{}-02-29\"", common)), common);
  CHECK(accepts(*d, "\"2023-02-28\""));
  CHECK(!accepts(*d, "\"2024-02-30\""));
  CHECK(!accepts(*d, "\"2023-04-31\""));
  auto dt = compile(R"({"type":"string","format":"date-time"})");
  CHECK(accepts(*dt, "\"2024-02-29T12:00:00Z\""));
  CHECK(!accepts(*dt, "\"2023-02-29T12:00:00Z\""));
}

TEST_CASE("format date-time / time: RFC 3339's T separator and leap seconds at 23:59:60 UTC") {
  auto dt = compile(R"({"type":"string","format":"date-time"})");
  CHECK(accepts(*dt, "\"1998-12-31t23:59:60z\""));
  CHECK(accepts(*dt, "\"1998-12-31T23:59:60.25+00:00\""));
  CHECK(accepts(*dt, "\"1963-06-19T08:30:06.283185Z\""));
  CHECK(!accepts(*dt, "\"1963-06-19 08:30:06Z\""));       // a space is not RFC 3339's separator
  CHECK(!accepts(*dt, "\"1998-12-31T23:58:60Z\""));       // leap second on a wrong minute
  CHECK(!accepts(*dt, "\"1998-12-31T22:59:60Z\""));       // on a wrong hour
  CHECK(!accepts(*dt, "\"1998-12-31T23:59:60+01:00\""));  // 22:59:60 UTC
  auto t = compile(R"({"type":"string","format":"time"})");
  CHECK(accepts(*t, "\"23:59:60Z\""));
  CHECK(accepts(*t, "\"08:30:06-05:30\""));
  CHECK(!accepts(*t, "\"12:59:60Z\""));
  CHECK(!accepts(*t, "\"08:30:06\""));  // an offset is required
}

TEST_CASE("formats JSON Schema defines but we do not enforce are refused, not left unconstrained") {
  // idn-email, idn-hostname and regex compiled as any string ("a b" passed as an idn-hostname)
  for (const char* f : {"idn-email", "idn-hostname", "regex"}) {
    const std::string schema = fmt::format(R"({{"type":"string","format":"{}"}})", f);
    const std::string e = error_of(schema);
    CHECK_MESSAGE(e.find("'format'") != std::string::npos, e);
    CHECK_MESSAGE(e.find(f) != std::string::npos, e);
    CHECK(accepts(*compile(schema, true), R"("ab")"));  // lenient: skipped
  }
  // Formats JSON Schema does not define stay annotations (jsonschemabench: "color", "csv").
  CHECK(accepts(*compile(R"({"type":"string","format":"color"})"), R"("anything")"));
  CHECK(!accepts(*compile(R"({"type":"string","format":"ipv4"})"), R"("1.2.3")"));
}

TEST_CASE(
    "propertyNames: false allows only the empty object; a propertyNames enum binds declared keys") {
  auto none = compile(R"({"propertyNames":false})");
  CHECK(accepts(*none, "{}"));
  CHECK(accepts(*none, "1"));  // no type: anything that is not an object is valid
  CHECK(!accepts(*none, R"({"a":1})"));
  CHECK(!accepts(*none, R"({"":1})"));
  auto declared = compile(R"({"type":"object","propertyNames":false,"properties":{"a":{}}})");
  CHECK(accepts(*declared, "{}"));
  CHECK(!accepts(*declared, R"({"a":1})"));
  // A declared key outside the propertyNames enum may not be written.
  auto listed = compile(
      R"({"type":"object","propertyNames":{"enum":["a","b"]},"properties":{"a":{},"c":{}}})");
  CHECK(accepts(*listed, R"({"a":1})"));
  CHECK(accepts(*listed, R"({"b":1})"));
  CHECK(!accepts(*listed, R"({"c":1})"));
}
