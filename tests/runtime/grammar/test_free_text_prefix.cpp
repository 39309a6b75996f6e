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
