// A JSON Schema judges a number by its value, not its spelling: bounds, multipleOf, enum/const
// and `not: {type: integer}` take exponent spellings (2e0, 15e-1, 0.5e1) when validating, decided
// exactly on the digits; generation never writes a negative zero. Expected verdicts were checked
// with Python's jsonschema 4.26 (numbers parsed as Decimal).
#include "grammar_test_util.hpp"
#include "runtime/grammar/json_schema.hpp"

#include <doctest/doctest.h>

#include <sstream>
#include <string>
#include <vector>

using namespace di::grammar;

namespace {

bool accepts(const std::string& schema, json_schema_use use, const std::string& text) {
  json_schema_options o;
  o.use = use;
  return di::grammar::test::accepts(
      *compiled_grammar::compile(compile_json_schema_text(schema, o).g), text);
}

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

struct spelling_case {
  const char* schema;
  const char* valid;    ///< spellings of values the schema allows, space-separated
  const char* invalid;  ///< spellings of values it does not allow
};

void check_validation(const spelling_case& c) {
  const std::string schema = c.schema;
  CAPTURE(schema);
  for (const std::string& text : words(c.valid))
    CHECK_MESSAGE(accepts(c.schema, json_schema_use::validation, text), text);
  for (const std::string& text : words(c.invalid))
    CHECK_FALSE_MESSAGE(accepts(c.schema, json_schema_use::validation, text), text);
}

}  // namespace

TEST_CASE("integers with bounds or multipleOf take exponent spellings by value") {
  // They took none: {"type":"integer","minimum":0} refused 2e0 while {"type":"integer"} took it.
  for (const spelling_case& c : std::vector<spelling_case>{
           {R"({"type":"integer","minimum":0})", "2 2e0 1e1 2.0 0e-5 -0e3 150e-1 1.5e1 1e400 1E+20",
            "-1e0 -1 1.5e0 -1e400 15e-2 1e-1"},
           {R"({"type":"integer","maximum":-3})", "-3e0 -0.3e1 -1e400 -30e-1",
            "3e0 -2e0 0e0 -3.5e0"},
           {R"({"type":"integer","minimum":-5,"maximum":5})", "5e0 -0.5e1 50e-1 0e9 -4E0",
            "6e0 1e1 -0.6e1 0.5e0 1e400"},
           {R"({"type":"integer","exclusiveMaximum":100})", "99e0 0.99e2 -1e5", "1e2 100e0 1e400"},
           {R"({"type":"integer","multipleOf":5})", "1e1 5e0 50e-1 0e9 -15e0 1e20 -0.0e-9",
            "7e0 1e0 0.5e0 5e-1 2.5e0 11e-1"},
           {R"({"type":"integer","minimum":-5,"maximum":9,"multipleOf":2})", "4e0 -4E0 80e-1",
            "6e1 0.3e1 -6e0 1e1"},
           {R"({"type":"number","multipleOf":3})", "3e0 300e-2 -9.0e0", "1e0 0.3e0 1e1"},
           {R"({"type":"number","multipleOf":0.01})", "1e-2 1.25e0 125e-2 1e5 0.5e-1",
            "1e-3 1.255e0 125e-3"},
       })
    check_validation(c);
  // Documented bounds: with a step other than 1 or 10^-s a mantissa with nonzero fraction digits
  // is not taken (0.5e1 is 5, a multiple of 5), nor an exponent past 20 (1e21); a bound of
  // more than 25 digits takes no exponent spelling. These are refusals, never wrong values.
  for (const char* text : {"0.5e1", "-1.5e1", "1e21"})
    CHECK_FALSE_MESSAGE(
        accepts(R"({"type":"integer","multipleOf":5})", json_schema_use::validation, text), text);
  CHECK_FALSE(accepts(R"({"type":"number","maximum":1.7976931348623157e308})",
                      json_schema_use::validation, "1e0"));
  CHECK(accepts(R"({"type":"number","maximum":1.7976931348623157e308})",
                json_schema_use::validation, "1"));
}

TEST_CASE("numbers in a range take exponent spellings by value") {
  for (const spelling_case& c : std::vector<spelling_case>{
           {R"({"type":"number","minimum":0,"maximum":1})", "1e-5 5e-1 1e0 0.1e1 10e-1 0e7",
            "1.1e0 2e0 -1e-5 1e1"},
           {R"({"type":"number","minimum":0})", "1e300 1e-300 2.5E+3 0e-400", "-1e-300 -2e0"},
           {R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":10})", "9.99e0 1e-20",
            "1e1 0e0 -0e5"},
           {R"({"type":"number","not":{"type":"integer"},"maximum":2})", "1.5e0 -25e-1",
            "2e0 3.5e0"},
       })
    check_validation(c);
}

TEST_CASE("enum and const numbers match every spelling of their value") {
  for (const spelling_case& c : std::vector<spelling_case>{
           {R"({"const":7})", "7 7e0 7.0 70e-1 0.7e1 7E+0 700.00e-2", "7.1 71e-1 7e1 -7e0"},
           {R"({"enum":[1.5]})", "1.5 15e-1 1.50 0.15e1 150E-2", "1.5e1 15 1.05"},
           {R"({"enum":[1.5,"a",-2]})", "15e-1 -2e0 -0.2e1", "2e0 -15e-1"},
           {R"({"const":0})", "0 -0 0.0 0e5 -0.0e-3", "1e0 1e-400"},
           {R"({"const":1e300})", "1e300 1E+300 10e299 0.1e301", "1e299 1e30"},
           {R"({"const":-2.5e-3})", "-2.5e-3 -0.0025 -25e-4 -0.25e-2", "2.5e-3 -2.5e-2"},
           {R"({"const":12345678901234567})", "12345678901234567 1.2345678901234567e16",
            "1.2345678901234568e16"},
       })
    check_validation(c);
}

TEST_CASE("not: {type: integer} and other numeric complements judge exponent spellings by value") {
  // {"not":{"type":"integer"}} refused 1.5e0, which is not an integer.
  for (const spelling_case& c : std::vector<spelling_case>{
           {R"({"not":{"type":"integer"}})", "1.5e0 15e-1 1.25e1 1e-1 -2.5E0 \"x\"",
            "2e0 1.5e1 10e-1 0e5 1e400"},
           {R"({"type":"number","not":{"type":"integer"}})", "1.5e0 1e-7", "2e0 -0e1"},
           {R"({"not":{"const":7}})", "8e0 71e-1 7.5 \"7\"", "7e0 70e-1 7.0"},
           {R"({"not":{"minimum":0}})", "-1e0 -1e-300", "1e0 0e0 1e300 \"a\""},
           {R"({"not":{"type":"integer","minimum":0}})", "1.5e0 -1e0", "1e1 0e3"},
       })
    check_validation(c);
}

TEST_CASE("generation never writes a negative zero for numbers; validation takes it") {
  // "type": "number" could be generated as -0, -0.0 or -0e5 (integers no longer could).
  const auto gen = json_schema_use::generation, val = json_schema_use::validation;
  for (const std::string schema :
       {R"({"type":"number"})", R"({"type":"number","minimum":-1,"maximum":1})",
        R"({"type":"number","maximum":0})", R"({"type":"number","multipleOf":0.1})",
        R"({"type":"number","minimum":-1,"maximum":1,"multipleOf":0.1})", R"({})",
        R"({"type":"array","items":{"type":"number"}})"}) {
    CAPTURE(schema);
    const bool array = schema.find("array") != std::string::npos;
    auto in = [&](const std::string& x) { return array ? "[" + x + "]" : x; };
    for (const std::string zero : {"-0", "-0.0", "-0e5", "-0.00E-3"}) {
      CHECK_FALSE_MESSAGE(accepts(schema, gen, in(zero)), zero);
      CHECK_MESSAGE(accepts(schema, val, in(zero)), zero);
    }
    CHECK(accepts(schema, gen, in("0")));
    CHECK(accepts(schema, gen, in("-0.5")));
    CHECK(accepts(schema, gen, in("0.0")));
  }
  CHECK(accepts(R"({"type":"number"})", gen, "-1e5"));
  CHECK(accepts(R"({"type":"number"})", gen, "0e5"));
  CHECK(accepts(R"({"type":"number"})", gen, "-0.001"));
  // Generation keeps bounded numbers without an exponent.
  CHECK_FALSE(accepts(R"({"type":"number","minimum":0})", gen, "1e1"));
  CHECK_FALSE(accepts(R"({"type":"integer","minimum":0})", gen, "1e1"));
}

TEST_CASE("integer exponents at most -b: a whole mantissa, then zeros and the exponent") {
  // One automaton of scaled multiples for every exponent up to -b (step a x 10^-b) replaced a
  // scaled range per exponent: the same verdicts at the window's edge (e = -20) and around it.
  for (const spelling_case& c : std::vector<spelling_case>{
           {R"({"type":"integer","minimum":-5,"maximum":5})",
            "500000000000000000000e-20 -50E-1 50.00e-1 5e0 -0.0e-20 40e-001",
            "600000000000000000000e-20 50000000000000000000e-20 55e-1 -60e-1 5.0e-1"},
           {R"({"type":"integer","exclusiveMinimum":-7.5,"exclusiveMaximum":1234.5})",
            "-70e-1 12340e-1 1234e0 0e-7", "-80e-1 12350e-1 -75e-1 1235e0"},
           {R"({"type":"integer","multipleOf":25,"exclusiveMaximum":1000})",
            "9750e-1 -25e0 250.0e-1 0.0e0", "1000e0 10000e-1 260e-1 25e-1"},
           {R"({"type":"number","multipleOf":0.01,"minimum":-10,"maximum":10})",
            "1000e-2 -999e-2 1250e-3 10e-1 5e-2", "1001e-2 125e-4 5e-3 -1001e-2"},
       })
    check_validation(c);
}

TEST_CASE("large multipleOf steps compile, factor by factor") {
  // multipleOf 86400 (seconds per day) failed with "grammar too large: more than 1000000
  // automaton states in total" (one rule per remainder), 999 within [0, 100000] with
  // "regular-language intersection needs more than 20000 states", and 3600 under a maximum as
  // "not a regular language (it needs 3601 rules)". A step whose significant part is 26..1000
  // takes exponent spellings whose mantissa is a whole multiple (864e2), not 8.64e4.
  for (const spelling_case& c : std::vector<spelling_case>{
           {R"({"type":"integer","multipleOf":86400})",
            "0 86400 -86400 172800 86400.0 -0 864e2 8640e1 86400e0 1728e2 864000000e-2",
            "43200 86401 864e1 1e5 8640 86400.5"},
           {R"({"type":"integer","multipleOf":999,"minimum":0,"maximum":100000})",
            "0 999 99900 1998 999e0 9990e-1 99900.00", "1000 100899 -999 998e0 1e2 100899e0"},
           {R"({"type":"integer","multipleOf":3600,"maximum":0})", "0 -3600 -36e2 -7200.0",
            "3600 -3601 36e2 -1800"},
           {R"({"type":"integer","multipleOf":4096})", "0 4096 -8192 4096.0 4096e0 40960e-1",
            "2048 4097 4097e0"},
           // 10^6 = 2^6 x 5^6 was refused ("its factor 15625 would need a remainder automaton
           // of 15625 states (at most 5000)"), as were 65536 and 10^12; divisibility by
           // 2^a x 5^b is a condition on the last digits (7 states for 10^6).
           {R"({"type":"integer","multipleOf":1000000})",
            "0 -0 1000000 -2000000 3000000.0 1e6 10e5 1000000e0 0.1e7 2e12 1E+7 20000000e-1",
            "500000 1000001 999999 100000 1e5 1.5e6 2.5e6 1000000e-1"},
           {R"({"type":"integer","multipleOf":1000000,"minimum":0,"maximum":100000})",
            "0 0.0 -0 0e5", "1000000 100000 -1000000 1e6"},
           {R"({"type":"integer","multipleOf":1000000,"minimum":-5000000,"maximum":5000000})",
            "5000000 -5000000 0 3e6 -30e5 4000000.00", "6000000 5000001 4500000 6e6 -6e6"},
           {R"({"type":"number","multipleOf":1000000})", "2000000 2000000.0 2e6 -0.0",
            "2000000.5 1 1e5"},
           {R"({"type":"integer","multipleOf":15625})",
            "0 15625 31250 -15625 1000000 15625.0 15625e0 -156250e-1",
            "15624 15626 5 25 3125 1000001 15626e0"},
           {R"({"type":"integer","multipleOf":65536,"minimum":0})", "0 65536 131072 4294967296",
            "-65536 32768 65537 4294967295"},
           {R"({"type":"integer","multipleOf":1000000000000})",  // the largest step taken
            "0 2000000000000 1e12 -3e12", "1e11 1000000000001"},
       })
    check_validation(c);
  // Refused though valid (documented): a mantissa with fraction digits under such a step, and
  // any exponent under a step whose significant part has a digit automaton of more than 1000
  // states (65536: 2829; 4096, 412 states, takes 4096e0 now).
  CHECK_FALSE(
      accepts(R"({"type":"integer","multipleOf":86400})", json_schema_use::validation, "8.64e4"));
  CHECK_FALSE(
      accepts(R"({"type":"integer","multipleOf":65536})", json_schema_use::validation, "65536e0"));
  const auto gen = json_schema_use::generation;
  CHECK(accepts(R"({"type":"integer","multipleOf":86400})", gen, "172800"));
  CHECK(accepts(R"({"type":"integer","multipleOf":86400})", gen, "-86400"));
  CHECK_FALSE(accepts(R"({"type":"integer","multipleOf":86400})", gen, "43200"));
  CHECK_FALSE(accepts(R"({"type":"integer","multipleOf":86400})", gen, "864e2"));
  CHECK(
      accepts(R"({"type":"integer","multipleOf":999,"minimum":0,"maximum":100000})", gen, "99900"));
  CHECK(accepts(R"({"type":"integer","multipleOf":1000000})", gen, "-3000000"));
  CHECK_FALSE(accepts(R"({"type":"integer","multipleOf":1000000})", gen, "3000000.0"));
  CHECK_FALSE(accepts(R"({"type":"integer","multipleOf":1000000})", gen, "1e6"));
  CHECK_FALSE(accepts(R"({"type":"integer","multipleOf":1000000})", gen, "1000"));
}

TEST_CASE("a multipleOf whose automaton is too large is refused naming the keyword") {
  auto error_of = [](const char* schema) {
    try {
      accepts(schema, json_schema_use::validation, "0");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // 2^20: its last 20 digits decide, in 20290 classes (more than max_string_states, 20000).
  std::string message = error_of(R"({"type":"integer","multipleOf":1048576})");
  CHECK(message.find("'multipleOf'") != std::string::npos);
  CHECK(message.find("20000 states") != std::string::npos);
  // The prime 9973 within bounds: 9973 states are more than a bounded step may take.
  message = error_of(R"({"type":"integer","multipleOf":9973,"minimum":0,"maximum":100000})");
  CHECK(message.find("'multipleOf'") != std::string::npos);
  CHECK(message.find("9973 states (at most 5000)") != std::string::npos);
}
