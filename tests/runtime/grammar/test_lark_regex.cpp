// Lark terminals are Python regexes: `/.../` reads as CPython's `re` reads it, where that differs
// from the Rust syntax of `regex:` response formats (class set operations, nested classes,
// POSIX classes, `{,n}`, \w and \s, the (?a) flag). `regex:` keeps Rust's reading.
#include "common/error.hpp"
#include "runtime/grammar/response_format.hpp"
#include "tests/runtime/grammar/grammar_test_util.hpp"

#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

using namespace di::grammar;
using di::grammar::test::accepts;
using di::grammar::test::compile_re;

namespace {

std::shared_ptr<const compiled_grammar> lark_terminal(const std::string& pattern) {
  return compiled_grammar::compile(parse_lark("start: /" + pattern + "/\n"));
}

struct python_case {
  const char* pattern;
  std::vector<std::pair<const char*, bool>> strings;  ///< re.fullmatch(pattern, s) is not None
};

// Expected answers from CPython 3.11.7's re (re.fullmatch on str, Unicode 14.0), recorded here so
// that the test needs no Python; CPython warns "Possible nested set" / "Possible set
// intersection/difference/symmetric difference" on some of these and reads them literally.
const std::vector<python_case> k_python_cases = {
    {R"re([a-z&&[aeiou]])re",
     {{"a]", true},
      {"&]", true},
      {"[]", true},
      {"x]", true},
      {"a", false},
      {"x", false},
      {"x&[", false}}},
    {R"re([a-z&&]+)re", {{"a&&b", true}, {"&", true}, {"ab", true}}},
    {R"re([a-z--[aeiou]])re",
     {{"b]", true},
      {"a]", true},
      {"-]", true},
      {"5]", true},
      {"A]", true},
      {"[]", true},
      {"b", false},
      {"\x5C\x5D", false}}},
    {R"re([a-z--aeiou])re",
     {{"b", true}, {"a", true}, {"-", true}, {"A", true}, {"5", true}, {"~", false}}},
    {R"re([a-f~~c-h])re", {{"a", true}, {"c", true}, {"g", true}, {"~", true}, {"z", false}}},
    {R"re([\w&&[^_]])re",
     {{"&]", true}, {"[]", true}, {"^]", true}, {"_]", true}, {"a", false}, {"_", false}}},
    {R"re([[a]])re", {{"a]", true}, {"[]", true}, {"a", false}, {"]", false}}},
    {R"re([^[a]])re", {{"b]", true}, {"a]", false}, {"[]", false}}},
    {R"re([[:alpha:]])re", {{":]", true}, {"p]", true}, {"[]", true}, {"a", false}, {"b", false}}},
    {R"re([[:digit:]]+)re", {{"5", false}, {":]", true}}},
    {R"re([+--])re", {{",", true}, {"+", true}, {"-", true}}},
    {R"re([--0])re", {{".", true}, {"-", true}, {"0", true}}},
    {R"re([a-c||x])re", {{"|", true}, {"a", true}, {"x", true}}},
    {R"re(a{,2})re", {{"", true}, {"aa", true}, {"aaa", false}, {"a{,2}", false}}},
    {R"re(a{,})re", {{"aaaa", true}, {"", true}}},
    {R"re(a{1, 2})re", {{"a{1, 2}", true}, {"a", false}, {"aa", false}}},
    {R"re(a{ 2})re", {{"a{ 2}", true}, {"aa", false}}},
    {R"re(a{})re", {{"a{}", true}}},
    {R"re(\w)re",
     {{"_", true},
      {"\xC3\xA9", true},
      {"\xC2\xB2", true},
      {"\xCC\x81", false},
      {"\xE2\x80\xBF", false},
      {"\xE2\x80\x8C", false},
      {"\xE2\x85\xA0", true}}},
    {R"re(\W)re", {{"\xCC\x81", true}, {"\xC2\xB2", false}}},
    {R"re([\w])re", {{"\xC2\xB2", true}, {"\xCC\x81", false}}},
    {R"re(\s)re",
     {{"\x1C", true},
      {"\x1F", true},
      {"\xC2\x85", true},
      {"\xC2\xA0", true},
      {"\xE3\x80\x80", true},
      {"\xEF\xBB\xBF", false}}},
    {R"re(\S)re", {{"\x1C", false}}},
    {R"re(\d)re", {{"5", true}, {"\xD9\xA5", true}, {"\xC2\xB2", false}}},
    {R"re((?a)\w)re", {{"a", true}, {"_", true}, {"\xC3\xA9", false}}},
    {R"re((?a)\s)re", {{"\x0B", true}, {"\x1C", false}, {"\xC2\xA0", false}}},
    {R"re((?a)\d)re", {{"5", true}, {"\xD9\xA5", false}}},
    {R"re((?a)[\W])re", {{"\xC3\xA9", true}, {"a", false}}},
    {R"re((?i)k)re", {{"K", true}, {"\xE2\x84\xAA", true}}},
    {R"re((?i)s)re", {{"S", true}, {"\xC5\xBF", true}}},
    {R"re((?ai)k)re", {{"K", true}, {"\xE2\x84\xAA", false}}},
    {R"re((?a)(?i)[a-z]+)re", {{"AbC", true}, {"\xE2\x84\xAA", false}}},
    {R"re((?i)i)re", {{"I", true}, {"\xC4\xB0", true}, {"\xC4\xB1", true}}},
    {R"re((?i)[^i])re", {{"\xC4\xB0", false}, {"j", true}}},
    {R"re((?i)\u0131)re", {{"i", true}, {"I", true}}},
    {R"re((?i)\u0130)re", {{"\xC4\xB1", true}, {"i", true}}},
    {R"re((?i)\u0390)re", {{"\xE1\xBF\x93", true}}},
    {R"re((?i)[\u1fe3])re", {{"\xCE\xB0", true}}},
    {R"re((?ai)i)re", {{"I", true}, {"\xC4\xB0", false}}},
    {R"re(\101)re", {{"A", true}}},
    {R"re([\101])re", {{"A", true}}},
    {R"re([\1])re", {{"\x01", true}, {"1", false}}},
    {R"re(\1010)re", {{"A0", true}}},
    {R"re(\377)re", {{"\xC3\xBF", true}}},
    {R"re((?#a(b)c)re", {{"c", true}}},
    {R"re(a(?#x)*)re", {{"aa", true}, {"", true}}},
    {R"re(a\Z)re", {{"a", true}}},
    {R"re((?P<n>a)b)re", {{"ab", true}}},
    {R"re([a-z-0])re", {{"-", true}, {"0", true}, {"q", true}}},
    // Atomic groups and possessive quantifiers (3.11) where no match of their text can end in
    // two places: their only match is kept, the language of the plain group.
    {R"re((?>abc))re", {{"abc", true}, {"ab", false}, {"abcc", false}}},
    {R"re((?>"[^"]*"))re", {{"\"ab\"", true}, {"\"a\"b\"", false}, {"\"\"", true}}},
    {R"re((?>a$))re", {{"a", true}}},
    {R"re((?:ab){2}+)re", {{"abab", true}, {"ab", false}, {"ababab", false}}},
    {R"re(\d{3}+-)re", {{"123-", true}, {"12-", false}}},
    {R"re(a{0}+b)re", {{"b", true}, {"ab", false}}},
    // An escaped non-ASCII character is itself; \u escapes of a surrogate pair are two lone
    // surrogates (no UTF-8 text holds one), not the character they encode in UTF-16.
    {R"re(\é)re", {{"\xC3\xA9", true}, {"e", false}}},
    {R"re([\é-\ë])re", {{"\xC3\xAA", true}, {"e", false}}},
    {R"re(a|\ud83d\ude00)re", {{"a", true}, {"\xF0\x9F\x98\x80", false}}},
    // Global flags after comments, (?x) space or other global flags; scoped flags anywhere.
    {R"re((?x) (?i)a)re", {{"A", true}, {" a", false}}},
    {R"re((?i)(?#c)(?s)a.)re", {{"A\x0A", true}}},
    {R"re((?s-i:a))re", {{"a", true}, {"A", false}}},
    {R"re((?a:(?u:\w)))re", {{"\xC3\xA9", true}}},
    {R"re((?P<n>a)|(?P<m>b))re", {{"a", true}, {"b", true}}},
};

struct python_refusal {
  const char* pattern;
  const char* cpython;  ///< CPython 3.11.7's answer: its re.error, or what fullmatch gives
  const char* ours;     ///< the part of our error that names the construct
};

// Patterns CPython 3.11.7's re.compile refuses (its message recorded): ours refuse them too,
// naming the construct. Before, all but [\z], [\A] and a{2}+? (refused as possessive) compiled
// (\e as ESC, \z as the end, \x{41} and \u{41} as A, (?<n>...) and (?'n'...) as named groups,
// a** as (a*)*, \cA as U+0001, \p{L} as letters, a(?i)b as a then (?i)b, (?U) as a no-op, ...).
const std::vector<python_refusal> k_python_errors = {
    {R"re(\e)re", "bad escape \\e at position 0", "bad escape \\e"},
    {R"re([\e])re", "bad escape \\e at position 1", "bad escape \\e"},
    {R"re(\z)re", "bad escape \\z at position 0", "bad escape \\z"},
    {R"re(a\z)re", "bad escape \\z at position 1", "bad escape \\z"},
    {R"re([\z])re", "bad escape \\z at position 1", "bad escape \\z"},
    {R"re(\x{41})re", "incomplete escape \\x at position 0", "incomplete escape \\x"},
    {R"re([\x{41}])re", "incomplete escape \\x at position 1", "incomplete escape \\x"},
    {R"re(\u{41})re", "incomplete escape \\u at position 0", "incomplete escape \\u"},
    {R"re((?<n>a))re", "unknown extension ?<n at position 1",
     "(?<name...) is not Python 3.11's syntax"},
    {R"re((?'n'a))re", "unknown extension ?' at position 1",
     "(?'name...) is not Python 3.11's syntax"},
    {R"re((?P<1>a))re", "bad character in group name '1' at position 4",
     "bad character in group name '1'"},
    {R"re((?P<>a))re", "missing group name at position 4", "missing group name"},
    {R"re((?P<n>a)(?P<n>b))re",
     "redefinition of group name 'n' as group 2; was group 1 at position 12",
     "redefinition of group name 'n'"},
    {R"re(a*?+)re", "multiple repeat at position 3", "multiple repeat"},
    {R"re(a**)re", "multiple repeat at position 2", "multiple repeat"},
    {R"re(a{2}*)re", "multiple repeat at position 4", "multiple repeat"},
    {R"re(a{2}+?)re", "multiple repeat at position 5", "multiple repeat"},
    {R"re(\cA)re", "bad escape \\c at position 0", "bad escape \\c"},
    {R"re(\p{L})re", "bad escape \\p at position 0", "bad escape \\p"},
    {R"re([\p{L}])re", "bad escape \\p at position 1", "bad escape \\p"},
    {R"re([\A])re", "bad escape \\A at position 1", "bad escape \\A"},
    {R"re(a(?i)b)re", "global flags not at the start of the expression at position 1",
     "global flags not at the start of the expression"},
    {R"re(x|(?i)a)re", "global flags not at the start of the expression at position 2",
     "global flags not at the start of the expression"},
    {R"re(((?i)a))re", "global flags not at the start of the expression at position 1",
     "global flags not at the start of the expression"},
    {R"re((?-i)a)re", "missing : at position 4", "(?-...) needs a ':'"},
    {R"re((?-a:a))re", "bad inline flags: cannot turn off flags 'a', 'u' and 'L' at position 4",
     "flag 'a' cannot be turned off"},
    {R"re((?au)a)re", "bad inline flags: flags 'a', 'u' and 'L' are incompatible at position 4",
     "flags 'a' and 'u' are incompatible"},
    {R"re((?a)(?u)a)re", "ValueError: ASCII and UNICODE flags are incompatible",
     "flags 'a' and 'u' are incompatible"},
    {R"re((?U)a)re", "unknown extension ?U at position 1", "unknown flag 'U'"},
    {R"re((?i-i:a))re", "bad inline flags: flag turned on and off at position 5",
     "flag 'i' is turned on and off"},
    {R"re((?-:a))re", "missing flag at position 3", "missing flag after '-'"},
    {R"re((?))re", "unknown extension ?) at position 1", "unknown extension '(?)'"},
};

// Patterns CPython 3.11.7 compiles that ours refuse, naming the construct: atomic groups and
// possessive quantifiers whose text can end in two places (there backtracking decides the
// language), names of characters (\N{...}: no name table here), non-ASCII group names and
// conditional groups. Never accepted with another language.
const std::vector<python_refusal> k_python_refusals = {
    {R"re((?>a*)a)re", "fullmatch 'aa': None", "atomic groups (?>...) are not supported where"},
    {R"re((?>a|ab))re", "fullmatch 'ab': None", "atomic groups (?>...) are not supported where"},
    {R"re(a*+a)re", "fullmatch 'aa': None", "possessive quantifiers"},
    {R"re(a++)re", "fullmatch 'aa': match", "possessive quantifiers"},
    {R"re(a{1,2}+)re", "fullmatch 'aa': match", "possessive quantifiers"},
    {R"re(\N{LATIN SMALL LETTER A})re", "fullmatch 'a': match",
     "\\N{...} (a character by its Unicode name) is not supported"},
    {R"re((?P<ñ>x))re", "fullmatch 'x': match", "non-ASCII group names are not supported"},
    {R"re((a)(?(1)a|b))re", "fullmatch 'aa': match", "conditional groups"},
};

}  // namespace

TEST_CASE("Lark terminals read regexes as CPython's re does") {
  for (const python_case& c : k_python_cases) {
    std::string where = "/";  // appended: GCC 12 warns (-Wrestrict) on "/" + std::string
    where.append(c.pattern).append("/");
    std::shared_ptr<const compiled_grammar> g;
    try {
      g = lark_terminal(c.pattern);
    } catch (const di::error& e) {
      FAIL_CHECK(where, " does not compile: ", std::string(e.what()));
      continue;
    }
    for (const auto& [s, expected] : c.strings)
      CHECK_MESSAGE(accepts(*g, s) == expected, where, " on \"", std::string(s), "\"");
  }
  // A Lark grammar as a response format (the `ebnf:` / `grammar` path of the server and CLI).
  auto f = compile_response_format(parse_inline_response_format("ebnf:start: /[a-z&&]+/\n"));
  CHECK(accepts(*f, "a&&b"));
}

TEST_CASE("Lark terminals: what CPython's re refuses stays an error") {
  // re.error "bad character range a-- at position 1": no Rust difference to fall back to.
  CHECK_THROWS_AS(lark_terminal("[a--z]"), di::error);
  CHECK_THROWS_AS(lark_terminal("a{2,1}"), di::error);  // min repeat greater than max repeat
  CHECK_THROWS_AS(lark_terminal(R"(\400)"), di::error);    // octal escape value outside of range
  CHECK_THROWS_AS(lark_terminal(R"([\400])"), di::error);  // the same in a class
  CHECK_THROWS_AS(lark_terminal(R"(\12)"), di::error);     // invalid group reference 12
  CHECK_THROWS_AS(lark_terminal(R"([\8])"), di::error);    // bad escape \8
  CHECK_THROWS_AS(lark_terminal("(?#x"), di::error);       // missing ), unterminated comment
}

TEST_CASE("Lark terminals: CPython's refusals, and what ours refuse by name") {
  for (const auto* table : {&k_python_errors, &k_python_refusals}) {
    for (const python_refusal& c : *table) {
      std::string where = "/";
      where.append(c.pattern).append("/ (CPython: ").append(c.cpython).append(")");
      CHECK_THROWS_WITH_AS_MESSAGE(lark_terminal(c.pattern), doctest::Contains(c.ours), di::error,
                                   where);
    }
  }
}

TEST_CASE("regex: keeps Rust's set operations, POSIX classes and counted repetitions") {
  // The same texts as above in the `regex:` flavour (Rust's regex crate).
  auto intersect = compile_re("[a-z&&[aeiou]]");
  CHECK(accepts(*intersect, "a"));
  CHECK_FALSE(accepts(*intersect, "x"));
  CHECK_FALSE(accepts(*intersect, "a]"));
  auto minus = compile_re("[a-z--[aeiou]]");
  CHECK(accepts(*minus, "b"));
  CHECK_FALSE(accepts(*minus, "-]"));
  CHECK_FALSE(accepts(*compile_re("[a-f~~c-h]"), "c"));
  CHECK(accepts(*compile_re("[[:alpha:]]"), "a"));
  CHECK(accepts(*compile_re("a{1, 2}"), "aa"));
  CHECK_THROWS_AS(compile_re("a{,2}"), di::error);
  CHECK_THROWS_AS(compile_re("(?a)x"), di::error);  // Python's flag only
  auto w = compile_re(R"(\w)");
  CHECK(accepts(*w, "\xCC\x81"));        // Rust's \w has marks (COMBINING ACUTE ACCENT)
  CHECK_FALSE(accepts(*w, "\xC2\xB2"));  // and no other numbers (SUPERSCRIPT TWO)
  CHECK_FALSE(accepts(*compile_re(R"(\s)"), "\x1C"));
  // Through the response format as the server and CLI build it.
  auto f = compile_response_format(parse_inline_response_format("regex:[a-z&&[aeiou]]+"));
  CHECK(accepts(*f, "aei"));
  CHECK_FALSE(accepts(*f, "b"));
}

TEST_CASE("Lark terminal flags wrap the pattern as Lark does, so a global flag inside is refused") {
  // Lark 1.3.1 compiles /P/i as (?i:P): CPython 3.11.7 then refuses a global flag in P, "global
  // flags not at the start of the expression at position 4" for /(?i)a/i and /(?s)a/i (position
  // 9 for /(?#c)(?i)a/s). These compiled before, as if the flag were at the start.
  for (const char* terminal : {"/(?i)a/i", "/(?s)a/i", "/(?#c)(?i)a/s", "/(?x) (?i)a/u"}) {
    CHECK_THROWS_WITH_AS_MESSAGE(parse_lark(std::string("start: ") + terminal + "\n"),
                                 doctest::Contains("global flags not at the start"), di::error,
                                 terminal);
  }
  // Without flags the global flag is at the start (Lark and CPython take /(?i)a/), and a scoped
  // one is taken inside the wrapping.
  CHECK(accepts(*lark_terminal("(?i)a"), "A"));
  auto scoped = compiled_grammar::compile(parse_lark("start: /(?a:b)c/i\n"));
  CHECK(accepts(*scoped, "bC"));
  // Lark wraps the text as it is: /a)(b/i is (?i:a)(b), which Lark takes: "Ab", not "aB".
  auto wrapped = compiled_grammar::compile(parse_lark("start: /a)(b/i\n"));
  CHECK(accepts(*wrapped, "Ab"));
  CHECK_FALSE(accepts(*wrapped, "aB"));
  CHECK_THROWS_AS(lark_terminal("a)(b"), di::error);  // unflagged: unbalanced, as in CPython
}

TEST_CASE("Lark terminals of lone surrogates say that UTF-8 cannot hold them") {
  // CPython takes /\ud800/ (a str may hold a lone surrogate); UTF-8 text cannot, so the terminal
  // matches nothing here. It said only "the grammar matches no string at all (rule '__start'
  // never ends)".
  for (const char* pattern : {R"(\ud800)", R"([\ud800-\udfff])", R"(x\ud800)", R"(\ud83d\ude00)"}) {
    CHECK_THROWS_WITH_AS_MESSAGE(lark_terminal(pattern),
                                 doctest::Contains("lone surrogate (U+D800..U+DFFF"), di::error,
                                 pattern);
  }
  // Where something else can match, the terminal stays (its surrogate part matches nothing).
  auto either = lark_terminal(R"(a|\ud800)");
  CHECK(accepts(*either, "a"));
  CHECK(accepts(*lark_terminal(R"([a\ud800])"), "a"));
  // A class with no character at all keeps the generic error.
  CHECK_THROWS_WITH_AS(lark_terminal(R"([^\s\S])"), doctest::Contains("matches no string"),
                       di::error);
}
