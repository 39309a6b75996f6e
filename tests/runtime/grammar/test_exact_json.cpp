// parse_json_exact: numbers a double cannot hold are found, with their path, and a JSON Schema
// holding one is refused by name (its outputs broke the schema: a const of 30 digits came out
// as 1.2345678901234568e+29, a maximum of 2^64 as 18446744073709552000).
#include "common/error.hpp"
#include "runtime/grammar/exact_json.hpp"
#include "runtime/grammar/json_schema.hpp"

#include <doctest/doctest.h>

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
