// parse_json_exact: numbers a double cannot hold are found, with their path, and a JSON Schema
// holding one is refused by name (its outputs broke the schema: a const of 30 digits came out
// as 1.2345678901234568e+29, a maximum of 2^64 as 18446744073709552000); numbers in one text for
// generation (json_schema_use), every spelling for validation.
#include "common/error.hpp"
#include "grammar_test_util.hpp"
#include "runtime/grammar/exact_json.hpp"
#include "runtime/grammar/json_schema.hpp"
#include "runtime/grammar/response_format.hpp"
#include "runtime/grammar/token_vocabulary.hpp"

#include <doctest/doctest.h>

#include <sstream>
#include <string>
#include <vector>

using namespace di::grammar;

TEST_CASE("exact JSON: literals a double holds pass, others are named with their path") {
  for (const char* ok : {R"({"a": 0.1, "b": [1e20, -0.0, 2.5e-3, 123456789012345.6]})",
                         R"([18446744073709551615, -9223372036854775808, 1.0, 100.000])",
                         R"({"x": 0.30000000000000004})"}) {
    CAPTURE(ok);
    const exact_json_result r = parse_json_exact(ok);
    CHECK(r.error.empty());
    CHECK_FALSE(r.inexact.has_value());
  }
  const exact_json_result big = parse_json_exact(R"({"a": [1, {"b": 18446744073709551616}]})");
  REQUIRE(big.inexact.has_value());
  CHECK(big.inexact->path == "a[1].b");
  CHECK(big.inexact->literal == "18446744073709551616");
  CHECK(big.value["a"][0] == 1);  // the value is still built
  const exact_json_result digits = parse_json_exact("[0.12345678901234567890123]");
  REQUIRE(digits.inexact.has_value());
  CHECK(digits.inexact->path == "[0]");
  CHECK(parse_json_exact("{\"a\": }").error.find("parse error") != std::string::npos);
  CHECK(parse_json_exact("{\"a\": }").value.is_discarded());
  CHECK(is_inexact_literal("123456789012345678901234567890", 1.2345678901234568e29));
  CHECK_FALSE(is_inexact_literal("1.2345678901234568e+29", 1.2345678901234568e29));
}

TEST_CASE("a JSON Schema with a number a double cannot hold is refused by name") {
  CHECK_THROWS_WITH_AS(compile_json_schema_text(R"({"const": 123456789012345678901234567890})"),
                       doctest::Contains("the number 123456789012345678901234567890 at const"),
                       di::error);
  CHECK_THROWS_WITH_AS(
      compile_json_schema_text(
          R"({"type": "integer", "minimum": 18446744073709551615, "maximum": 18446744073709551616})"),
      doctest::Contains("18446744073709551616 at maximum cannot be held exactly"), di::error);
  CHECK_NOTHROW(compile_json_schema_text(
      R"({"type": "integer", "minimum": -9223372036854775808, "maximum": 18446744073709551615})"));
}

namespace {

bool accepts(const std::string& schema, json_schema_use use, const std::string& text) {
  json_schema_options o;
  o.use = use;
  return di::grammar::test::accepts(
      *compiled_grammar::compile(compile_json_schema_text(schema, o).g), text);
}

}  // namespace

TEST_CASE(
    "generation writes integers and enum/const numbers in one text; validation takes every "
    "spelling") {
  // Generation wrote "2.000" for an integer and "12345678901234567.0" for that enum: valid JSON
  // Schema, refused by typed clients (serde, Go, pydantic's strict ints).
  const auto gen = json_schema_use::generation, val = json_schema_use::validation;
  for (const char* schema : {R"({"type":"integer","minimum":0,"maximum":9})",
                             R"({"type":"integer"})", R"({"type":"integer","multipleOf":2})",
                             R"({"type":"integer","minimum":-4,"maximum":9,"multipleOf":2})"}) {
    CAPTURE(schema);
    CHECK(accepts(schema, gen, "2"));
    CHECK(accepts(schema, gen, "0"));
    for (const char* text : {"2.0", "2.000", "2e0", "2E0", "20e-1", "0.0"})
      CHECK_FALSE(accepts(schema, gen, text));
    for (const char* text : {"2", "2.0", "2.000", "0.0"}) CHECK(accepts(schema, val, text));
  }
  const char* big = R"({"enum":[12345678901234567,7]})";
  CHECK(accepts(big, gen, "12345678901234567"));
  CHECK(accepts(big, gen, "7"));
  for (const char* text : {"12345678901234567.0", "1.2345678901234568e+16", "7.0", "7e0"})
    CHECK_FALSE(accepts(big, gen, text));
  CHECK(accepts(big, val, "12345678901234567.0"));
  CHECK(accepts(big, val, "7.00"));
  // number consts in plain decimal: as written when it is, the integer's digits when integral
  CHECK(accepts(R"({"const":1.5})", gen, "1.5"));
  CHECK_FALSE(accepts(R"({"const":1.5})", gen, "1.50"));
  CHECK(accepts(R"({"const":2.0})", gen, "2"));
  CHECK_FALSE(accepts(R"({"const":2.0})", gen, "2.0"));
  CHECK(accepts(R"({"const":2.0})", val, "2.0"));
  CHECK(accepts(R"({"const":1e20})", gen, "100000000000000000000"));
  CHECK_FALSE(accepts(R"({"const":1e20})", gen, "1e+20"));
  CHECK(accepts(R"({"const":-2.5e-3})", gen, "-0.0025"));
  CHECK(accepts(R"({"enum":[[1,{"a":3.0}]]})", gen, R"([1,{"a":3}])"));
  CHECK_FALSE(accepts(R"({"enum":[[1,{"a":3.0}]]})", gen, R"([1,{"a":3.0}])"));
  // "number" keeps its spellings; what is not an integer still excludes 2.0 (an integer's value)
  CHECK(accepts(R"({"type":"number","minimum":0,"maximum":9})", gen, "2.0"));
  CHECK(accepts(R"({"type":"number"})", gen, "2e0"));
  CHECK_FALSE(accepts(R"({"type":"number","not":{"type":"integer"}})", gen, "2.0"));
  CHECK(accepts(R"({"type":"number","not":{"type":"integer"}})", gen, "2.5"));
}

TEST_CASE("validation takes an integer in every spelling JSON Schema counts, exponents too") {
  // Draft 6+: an integer is any number with a zero fractional part. `grammar check` refused
  // 2e0, 1.5e1 and 10e-1; exactness is on the digits (no double: 1e400 is an integer).
  const auto val = json_schema_use::validation;
  const char* integer = R"({"type":"integer"})";
  const auto words = [](const std::string& s) {
    std::istringstream in(s);
    std::vector<std::string> out;
    for (std::string w; in >> w;) out.push_back(w);
    return out;
  };
  for (const std::string& text :
       words("2 -0 1.0 -0.000 2e0 2E+0 2e-0 -2e00 1.5e1 10e-1 100e-2 1.250E+002 0e-7 -0.0e-30 "
             "0.0e5 1e400 10.0e-1 -1000.00e-3 1.2345678901234567e+16 1.00000000000000000001e20 "
             "1.5e0001"))
    CHECK_MESSAGE(accepts(integer, val, text), text);
  for (const std::string& text :
       words("1.5 1.0e-1 1e-1 1.25e1 100e-3 10.5e-1 0.5e-0 1.5e00 1.2345678901234567e+15 "
             "1.00000000000000000001e19 01e1 1.e1 1e e1 - --1 +1 1e+-1 .5e1"))
    CHECK_FALSE_MESSAGE(accepts(integer, val, text), text);
  // The documented bound: a fraction's last nonzero digit past the 20th (and a negative exponent
  // past -20) is refused even where the value is an integer.
  CHECK_FALSE(accepts(integer, val, "1.000000000000000000001e21"));
  CHECK_FALSE(accepts(integer, val, "1000000000000000000000e-21"));
  CHECK(accepts(integer, val, "100000000000000000000e-20"));
  // "number" and "not integer" are unchanged: an exponent integer is not a non-integer.
  CHECK(accepts(R"({"type":"number"})", val, "1.5e1"));
  CHECK_FALSE(accepts(R"({"type":"number","not":{"type":"integer"}})", val, "1.5e1"));
  CHECK_FALSE(accepts(R"({"oneOf":[{"type":"integer"},{"type":"number"}]})", val, "2e0"));
  CHECK(accepts(R"({"oneOf":[{"type":"integer"},{"type":"number"}]})", val, "2.5"));
  CHECK(accepts(R"({"type":"object","properties":{"n":{"type":"integer"}}})", val, R"({"n":3e2})"));
  // Bounded and multipleOf integers take exponent spellings too (test_number_spellings).
  CHECK(accepts(R"({"type":"integer","minimum":0})", val, "2e0"));
  CHECK_FALSE(accepts(R"({"type":"integer","minimum":0})", val, "-2e0"));
}

TEST_CASE("generation never writes -0: integers are 0|-?[1-9][0-9]*, enum/const zero is 0") {
  const auto gen = json_schema_use::generation, val = json_schema_use::validation;
  for (const char* schema :
       {R"({"type":"integer"})", R"({"type":"integer","minimum":-5,"maximum":5})",
        R"({"type":"integer","maximum":0})", R"({"type":"integer","minimum":0,"maximum":0})",
        R"({"type":"integer","multipleOf":3})",
        R"({"type":"integer","minimum":-9,"maximum":9,"multipleOf":3})", R"({"const":-0.0})",
        R"({"const":0})", R"({"enum":[-0.0,1]})", R"({"const":[0.0,-0]})"}) {
    CAPTURE(schema);
    const bool list = std::string(schema).find(":[0.0") != std::string::npos;
    CHECK(accepts(schema, gen, list ? "[0,0]" : "0"));
    CHECK_FALSE(accepts(schema, gen, list ? "[0,-0]" : "-0"));
    CHECK_FALSE(accepts(schema, gen, list ? "[-0,0]" : "-0.0"));
    CHECK(accepts(schema, val, list ? "[-0,0.0]" : "-0"));  // validation: -0 is 0
  }
  CHECK(accepts(R"({"type":"integer","minimum":-5,"maximum":5})", gen, "-5"));
  CHECK(accepts(R"({"type":"integer","maximum":0})", gen, "-10"));
  CHECK(accepts(R"({"type":"integer","multipleOf":3})", gen, "-3"));
  CHECK_FALSE(accepts(R"({"type":"integer","multipleOf":3})", gen, "-4"));
  CHECK(accepts(R"({"type":"integer"})", gen, "-1"));
  CHECK_FALSE(accepts(R"({"type":"integer"})", gen, "-01"));
  CHECK(accepts(R"({"const":-0.5})", gen, "-0.5"));
}

TEST_CASE("response formats compile for generation, grammar check's use is part of the cache key") {
  const response_format f =
      parse_inline_response_format(R"(json_schema:{"type":"integer","minimum":0,"maximum":9})");
  CHECK(f.schema.use == json_schema_use::generation);
  CHECK(parse_response_format("json_object").schema.use == json_schema_use::generation);
  CHECK_FALSE(di::grammar::test::accepts(*compile_response_format(f), "2.0"));
  response_format v = f;
  v.schema.use = json_schema_use::validation;
  CHECK(di::grammar::test::accepts(*compile_response_format(v), "2.0"));
  // tool-call argument grammars take the format's options
  const response_format tools = parse_inline_response_format(
      R"(tool_calls:{"begin":"","end":"","separator":"","calls":[{"begin":"<","end":">","schema":)"
      R"({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}}]})");
  CHECK(di::grammar::test::accepts(*compile_response_format(tools), R"(<{"n":12}>)"));
  CHECK_FALSE(di::grammar::test::accepts(*compile_response_format(tools), R"(<{"n":12.0}>)"));
}

TEST_CASE("a response format's warnings come from its one compile") {
  // `grammar check` compiled a JSON Schema, then ran its front end again for the warnings --
  // every number automaton (multipleOf, bounds, exponent spellings) built twice.
  response_format f = parse_inline_response_format(
      R"(json_schema+lenient:{"type":"object","properties":{"n":{"type":"integer","multipleOf":86400},"s":{"type":"string","format":"no-such-format"}}})");
  f.schema.use = json_schema_use::validation;
  const compiled_format c = compile_response_format_with_warnings(f);
  CHECK_FALSE(c.warnings.empty());
  CHECK(c.warnings == compile_json_schema_text(f.text, f.schema).warnings);
  CHECK(di::grammar::test::accepts(*c.grammar, R"({"n":172800,"s":"x"})"));
  CHECK_FALSE(di::grammar::test::accepts(*c.grammar, R"({"n":1000})"));
  CHECK(compile_response_format_with_warnings(parse_inline_response_format("regex:a+"))
            .warnings.empty());
}

TEST_CASE("grammar_cache keeps a compile's warnings: one front end per schema, not two") {
  // `generate --response-format` compiled through the grammar cache (which kept no warnings),
  // then ran the schema's front end again for them: two front ends per schema, every number
  // automaton built twice. The cache now keeps a compile's warnings with its grammar.
  const response_format f = parse_inline_response_format(
      R"(json_schema+lenient:{"type":"object","properties":{"n":{"type":"integer","multipleOf":86400},"s":{"type":"string","format":"no-such-format"}}})");
  const std::vector<std::string> expected = compile_json_schema_text(f.text, f.schema).warnings;
  REQUIRE_FALSE(expected.empty());
  std::vector<std::string> tokens = {"{", "}", "\"", "n", "s", ":", ",", "0", "1", "x", ""};
  auto vocab = token_vocabulary::from_tokens(tokens, {std::int32_t(tokens.size())},
                                             std::int32_t(tokens.size()) + 1);
  grammar_cache cache(4);
  const std::uint64_t front_ends = num_json_schema_compiles_on_this_thread();
  const std::uint64_t compiles = compiled_grammar::num_compiles_on_this_thread();
  const auto first = cache.get_with_warnings(f, vocab);
  CHECK(num_json_schema_compiles_on_this_thread() - front_ends == 1);
  const std::uint64_t compiled = compiled_grammar::num_compiles_on_this_thread() - compiles;
  CHECK(compiled > 0);  // (a format may call compile() more than once)
  CHECK(first.warnings == expected);
  REQUIRE(first.grammar != nullptr);
  // A hit: the same grammar, the same warnings, nothing run again.
  const auto again = cache.get_with_warnings(f, vocab);
  CHECK(again.grammar == first.grammar);
  CHECK(again.warnings == expected);
  CHECK(cache.get(f, vocab) == first.grammar);
  CHECK(num_json_schema_compiles_on_this_thread() - front_ends == 1);
  CHECK(compiled_grammar::num_compiles_on_this_thread() - compiles == compiled);
  // Other kinds have none, compiled or cached.
  const response_format regex = parse_inline_response_format("regex:[01]+");
  CHECK(cache.get_with_warnings(regex, vocab).warnings.empty());
  CHECK(cache.get_with_warnings(regex, vocab).warnings.empty());
}
