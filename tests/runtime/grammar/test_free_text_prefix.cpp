// Free text until a marker, then a format (response_format after_text, "after:N:MARKER"): the
// free text is anything without the marker and may end the output; after the marker only the
// format's sentences; checked against a direct definition on many strings made of the marker's
// pieces.
#include "common/error.hpp"
#include "runtime/grammar/free_text_prefix.hpp"
#include "runtime/grammar/response_format.hpp"
#include "tests/runtime/grammar/grammar_test_util.hpp"

#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

using namespace di::grammar;
using di::grammar::test::accepts;

namespace {

std::shared_ptr<const compiled_grammar> compile_inline(const std::string& spec) {
  return compile_response_format(parse_inline_response_format(spec));
}

/// What the grammar should accept: text without `</think>`, or such text, `</think>` and an
/// answer in {yes, no}.
bool expected(const std::string& s) {
  const std::size_t at = s.find("</think>");
  if (at == std::string::npos) return true;
  const std::string answer = s.substr(at + 8);
  return answer == "yes" || answer == "no";
}

}  // namespace

TEST_CASE("free text prefix: anything without the marker, then the format") {
  const auto g = compile_inline("after:8:</think>regex:(yes|no)");
  for (const char* ok : {"", "abc", "a<b</thi", "</think>yes", "thinking <think> x</think>no",
                         "<<</think>yes", "</t</think>no", "東京 </think>yes", "<", "</think"})
    CHECK_MESSAGE(accepts(*g, ok), ok);
  for (const char* bad : {"x</think>maybe", "x</think>", "x</think>yesno", "</think></think>yes",
                          "</think>", "<</think>"})
    CHECK_MESSAGE(!accepts(*g, bad), bad);
  // Strings made of the marker's pieces, against the definition.
  std::mt19937 rng(7);
  const std::vector<std::string> parts = {"<",       "/",        "t",   "h",  "i",
                                          "n",       "k",        ">",   "x",  "</",
                                          "</think", "</think>", "yes", "no", "<think>"};
  for (int i = 0; i < 4000; ++i) {
    std::string s;
    const int n = int(rng() % 7);
    for (int k = 0; k < n; ++k) s += parts[rng() % parts.size()];
    CAPTURE(s);
    CHECK(accepts(*g, s) == expected(s));
  }
}

TEST_CASE("free text prefix: the inline spec round-trips; bad ones are errors") {
  const response_format f =
      parse_inline_response_format(R"(after:8:</think>json_schema+compact:{"type": "integer"})");
  CHECK(f.after_text == "</think>");
  CHECK(f.kind == format_kind::json_schema);
  CHECK(f.schema.whitespace == json_whitespace::compact);
  CHECK(f.text == R"({"type": "integer"})");
  CHECK(to_inline_spec(f) == R"(after:8:</think>json_schema+compact:{"type": "integer"})");
  const auto g = compile_response_format(f);
  CHECK(accepts(*g, "hmm, 12?</think>12"));
  CHECK(!accepts(*g, "hmm</think>1 2"));
  CHECK(accepts(*compile_inline("after:1:|json_object"), R"(a|{"k": 1})"));
  for (const char* bad :
       {"after:0:regex:a", "after:x:regex:a", "after:99:</think>regex:a", "after:8",
        "after::regex:a", "after:8:</think>after:1:|regex:a", "after:8:</think>nope:a"})
    CHECK_THROWS_AS_MESSAGE(parse_inline_response_format(bad), di::error, bad);
  // A marker that repeats its first byte is refused; so is an answer nothing satisfies.
  CHECK_THROWS_AS(compile_inline("after:3:aba|regex:x"), di::error);
  CHECK_THROWS_WITH_AS(compile_inline(R"(after:8:</think>json_schema:{"enum": []})"),
                       doctest::Contains("allows no value"), di::error);
}

TEST_CASE("free text prefix: the answer's format is compiled once, with the free text") {
  // compiled_grammar::compile counts its calls per thread. A format after a marker costs the
  // compiles the format alone costs (a JSON Schema's front end compiles some parts of it, e.g.
  // its patterns, on its own): its own language is checked by an analysis, not by compiling it
  // a second time, and the front end runs once.
  const auto compiles = [](const std::string& spec) {
    const std::uint64_t before = compiled_grammar::num_compiles_on_this_thread();
    try {
      compile_inline(spec);
    } catch (const di::error&) {
    }
    return compiled_grammar::num_compiles_on_this_thread() - before;
  };
  const std::vector<std::string> specs = {
      R"(json_schema:{"type": "object", "properties": {"a": {"type": "integer"}}})",
      R"(json_schema:{"type": "string", "pattern": "^[a-z]+$"})",
      R"(json_schema:{"type": "object", "patternProperties": {"^x": {"type": "integer"}}})",
      "regex:(yes|no)",
      "json_object",
      "ebnf:root ::= \"a\"+",
      R"(tool_calls:{"begin": "", "separator": "", "end": "", "max_calls": 1,)"
      R"( "calls": [{"begin": "<call>", "schema": {"type": "object"}, "end": "</call>"}]})"};
  for (const std::string& spec : specs) {
    CAPTURE(spec);
    const std::uint64_t alone = compiles(spec);
    CHECK(alone >= 1);
    CHECK(compiles("after:8:</think>" + spec) == alone);
  }
  CHECK(compiles("regex:(yes|no)") == 1);
  CHECK(compiles("after:8:</think>regex:(yes|no)") == 1);
  // An answer nothing satisfies is still refused, in its own words -- found without the compile
  // that fails on it alone.
  for (const char* empty :
       {R"(json_schema:{"enum": []})",
        R"(json_schema:{"type": "integer", "minimum": 2, "maximum": 1})", "json_schema:false"}) {
    const std::string spec = empty;
    CAPTURE(spec);
    CHECK_THROWS_WITH_AS(compile_inline("after:8:</think>" + spec),
                         doctest::Contains("allows no value"), di::error);
    CHECK(compiles(spec) == 1);
    CHECK(compiles("after:8:</think>" + spec) == 0);
  }
  CHECK_THROWS_WITH_AS(compile_inline("after:8:</think>ebnf:root ::= root \"x\""),
                       doctest::Contains("matches no string at all"), di::error);
  // Compiling past an empty answer where asked to (grammar check's second try): the free text.
  compile_options allow;
  allow.allow_empty_language = true;
  const auto g = compile_response_format(
      parse_inline_response_format(R"(after:8:</think>json_schema:{"enum": []})"), allow);
  CHECK(accepts(*g, "still thinking"));
  CHECK(!accepts(*g, "done</think>1"));
}
