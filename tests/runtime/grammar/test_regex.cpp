// Regex front end: syntax coverage (classes, escapes, quantifiers, groups, flags), full-match
// and search semantics, Unicode, and the clear errors for what a grammar cannot express.
#include "common/error.hpp"
#include "runtime/grammar/json_schema.hpp"
#include "tests/runtime/grammar/grammar_test_util.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

using namespace di::grammar;
using di::grammar::test::accepts;
using di::grammar::test::compile_re;
using di::grammar::test::pattern_accepts;
using di::grammar::test::pattern_schema;

TEST_CASE("literals, classes and quantifiers match in full") {
  auto g = compile_re("a[bc]+d{2,3}e?");
  CHECK(accepts(*g, "abdd"));
  CHECK(accepts(*g, "acbcddde"));
  CHECK_FALSE(accepts(*g, "ad"));
  CHECK_FALSE(accepts(*g, "abdddd"));
  CHECK_FALSE(accepts(*g, "xabdd"));
}

TEST_CASE("alternation, groups and nested quantifiers") {
  auto g = compile_re("(ab|cd)*(?:x|y){2}");
  CHECK(accepts(*g, "xy"));
  CHECK(accepts(*g, "abcdabyy"));
  CHECK_FALSE(accepts(*g, "abx"));
  CHECK_FALSE(accepts(*g, "acxy"));
}

TEST_CASE("escapes and Unicode") {
  auto g = compile_re(R"(\u{20BB7}\u0300\x1F\cJ)");
  CHECK(accepts(*g, "\xF0\xA0\xAE\xB7\xCC\x80\x1F\n"));
  auto d = compile_re(R"(\d+)");
  CHECK(accepts(*d, "0123"));
  CHECK(accepts(*d, "\xD9\xA3"));  // ARABIC-INDIC DIGIT THREE (Unicode \d)
  auto ascii = compile_re(R"(\d+)", {.unicode_classes = false});
  CHECK_FALSE(accepts(*ascii, "\xD9\xA3"));
  auto l = compile_re(R"(\p{Lu}\p{Ll}*)");
  CHECK(accepts(*l, "\xC3\x89t\xC3\xA9"));  // Été
  CHECK_FALSE(accepts(*l, "\xC3\xA9t\xC3\xA9"));
  auto dot = compile_re("a.c");
  CHECK(accepts(*dot,
                "a\xE4\xB8\xAD"
                "c"));
  CHECK_FALSE(accepts(*dot, "a\nc"));
  CHECK_FALSE(accepts(*dot,
                      "a\xE4\xB8"
                      "c"));  // a truncated character is not a character
}

TEST_CASE("class set operations: Rust's nested classes and &&, ECMAScript's literals") {
  // Rust syntax: `&&` intersects, and its right operand may be a nested class. The nested class
  // was read as literal characters, so `[\w&&[^_]]` matched only "_]". Elsewhere `[` inside a
  // class stays a literal (Python's re, the xgrammar cases).
  auto word_no_underscore = compile_re(R"([\w&&[^_]]+)");
  CHECK(accepts(*word_no_underscore, "abc9"));
  CHECK_FALSE(accepts(*word_no_underscore, "a_b"));
  CHECK_FALSE(accepts(*word_no_underscore, "_]"));
  auto literal_bracket = compile_re(R"([a[]+)");
  CHECK(accepts(*literal_bracket, "a[a"));
  auto both = compile_re(R"([\w&&[^_]&&[^0-9]])");  // \w minus '_' minus digits
  CHECK(accepts(*both, "a"));
  CHECK_FALSE(accepts(*both, "5"));
  CHECK(accepts(*compile_re("[a-c&&b]"), "b"));
  CHECK_FALSE(accepts(*compile_re("[a-c&&b]"), "a"));
  CHECK_THROWS_AS(compile_re("[a&&[b]"), di::error);  // an unclosed nested class
  // ECMAScript (JSON Schema `pattern`, no v flag): `&&` and `[` are literal class members.
  auto ecma = compile_re("[a-c&&b]", {.unicode_classes = false});
  CHECK(accepts(*ecma, "a"));
  CHECK(accepts(*ecma, "&"));
  auto ecma_nested = compile_re(R"([\w&&[^_]])", {.unicode_classes = false});
  CHECK(accepts(*ecma_nested, "_]"));
  CHECK(accepts(*ecma_nested, "[]"));
  CHECK_FALSE(accepts(*ecma_nested, "a"));
  // ... and so is `[:`: `[[:alpha:]]` is the class {[, :, a, l, p, h} then a literal ']'
  // (node's RegExp: "a]" and "[]" match, "a" does not), where Rust reads a POSIX class.
  auto ecma_posix = compile_re("[[:alpha:]]", {.unicode_classes = false});
  CHECK(accepts(*ecma_posix, "a]"));
  CHECK(accepts(*ecma_posix, "[]"));
  CHECK(accepts(*ecma_posix, ":]"));
  CHECK_FALSE(accepts(*ecma_posix, "a"));
  CHECK_FALSE(accepts(*ecma_posix, "b]"));
  CHECK(accepts(*compile_re("[[:alpha:]]"), "b"));
  CHECK_FALSE(accepts(*compile_re("[[:alpha:]]"), "a]"));
}

TEST_CASE("class set operations: Rust's -- and ~~, left to right at &&'s precedence") {
  // `[a-z--[aeiou]]` read `--` as the range '-'..'[': digits, capitals and punctuation matched.
  auto consonants = compile_re(R"([a-z--[aeiou]]+)");
  CHECK(accepts(*consonants, "bcd"));
  for (const char* s : {"a", "e", "A", "5", "-", "["})
    CHECK_FALSE_MESSAGE(accepts(*consonants, s), s);
  CHECK(accepts(*compile_re("[a-z--x]"), "a"));
  CHECK_FALSE(accepts(*compile_re("[a-z--x]"), "x"));
  CHECK_FALSE(accepts(*compile_re("[a-z--x]"), "A"));
  auto symmetric = compile_re("[a-g~~b-h]");  // a and h
  CHECK(accepts(*symmetric, "a"));
  CHECK(accepts(*symmetric, "h"));
  CHECK_FALSE(accepts(*symmetric, "c"));
  auto left_to_right = compile_re("[a-d--c&&a-c]");  // ({a,b,d}) && a-c
  CHECK(accepts(*left_to_right, "b"));
  CHECK_FALSE(accepts(*left_to_right, "d"));
  CHECK_FALSE(accepts(*left_to_right, "c"));
  // A '-' before ']' or at the start stays literal; ECMAScript reads '--' as a range as before.
  CHECK(accepts(*compile_re("[+--]"), ","));
  CHECK(accepts(*compile_re("[--0]"), "."));
  CHECK(accepts(*compile_re("[a-z--x]", {.unicode_classes = false}), "A"));
}

TEST_CASE("case-insensitive flags scope to their group") {
  auto g = compile_re("(?i)ab(?-i:c)");
  CHECK(accepts(*g, "ABc"));
  CHECK_FALSE(accepts(*g, "ABC"));
  auto k = compile_re("(?i)k");
  CHECK(accepts(*k, "\xE2\x84\xAA"));  // KELVIN SIGN folds with k
  auto alt = compile_re("a(?i)b|c");
  CHECK(accepts(*alt, "aB"));
  CHECK(accepts(*alt, "C"));
  CHECK_FALSE(accepts(*alt, "aC"));
}

TEST_CASE("search mode matches anywhere unless anchored") {
  regex_options search{.search = true};
  auto any = compile_re("ab", search);
  CHECK(accepts(*any, "xxabyy"));
  CHECK_FALSE(accepts(*any, "xxayy"));
  auto start = compile_re("^ab", search);
  CHECK(accepts(*start, "abyy"));
  CHECK_FALSE(accepts(*start, "xab"));
  auto both = compile_re("^ab$|c", search);
  CHECK(accepts(*both, "ab"));
  CHECK(accepts(*both, "xcx"));
  CHECK_FALSE(accepts(*both, "abx"));
}

TEST_CASE("search mode: '$' in the middle ends the input, what follows may only match empty") {
  regex_options search{.search = true};
  auto dollar = compile_re("^$[a-zA-Z0-9$_]*$", search);  // a jsonschemabench pattern: only ""
  CHECK(accepts(*dollar, ""));
  CHECK_FALSE(accepts(*dollar, "a"));
  CHECK_FALSE(accepts(*dollar, "$a"));
  auto tail = compile_re("ab$c*", search);
  CHECK(accepts(*tail, "xab"));
  CHECK_FALSE(accepts(*tail, "abc"));
  CHECK_FALSE(accepts(*tail, "abx"));
  auto group = compile_re("(a$|b)c*", search);  // = a at the end, or any b
  CHECK(accepts(*group, "xa"));
  CHECK(accepts(*group, "bcx"));
  CHECK(accepts(*group, "xbx"));
  CHECK_FALSE(accepts(*group, "ax"));
  // Text that must follow '$' is refused in the pattern's terms (the message said "'$' or '\z'
  // in the middle of a pattern is not supported (only at its end)", as for full-match regexes).
  const char* never =
      "'b' cannot follow '$': in a JSON Schema pattern (ECMAScript, no m flag) "
      "'$' matches only at the end of the string, so this part of the pattern "
      "matches no string (a literal dollar sign is \\$) (at offset 2)";
  CHECK_THROWS_WITH_AS(compile_re("a$b", search), doctest::Contains(never), di::error);
  CHECK_THROWS_WITH_AS(compile_json_schema_text(R"({"type": "string", "pattern": "a$b"})"),
                       doctest::Contains(never), di::error);
  CHECK_THROWS_WITH_AS(compile_re("x|a$b?c", search),
                       doctest::Contains("'b?c' cannot follow '$': in a JSON Schema pattern"),
                       di::error);
  CHECK_THROWS_WITH_AS(compile_re("(a$|b$)c", search),
                       doctest::Contains("'c' cannot follow '(a$|b$)', which ends with '$' in "
                                         "every alternative: in a JSON Schema pattern"),
                       di::error);
  // Full match keeps refusing it: (a$|b)c* also matches "bc" there.
  CHECK_THROWS_WITH_AS(regex_grammar("(a$|b)c*"), doctest::Contains("middle"), di::error);
}

TEST_CASE("search mode: alternatives that '$' leaves no way through drop out") {
  regex_options search{.search = true};
  // Text must follow the group, so its '$' alternative matches nothing: (a$|c)b is cb (node:
  // /(a$|c)b/ matches "xcbx", not "ab"). It was refused.
  auto dead_end = compile_re("(a$|c)b", search);
  CHECK(accepts(*dead_end, "xcbx"));
  CHECK_FALSE(accepts(*dead_end, "ab"));
  CHECK_FALSE(accepts(*dead_end, "a"));
  CHECK_FALSE(accepts(*dead_end, "cxb"));
  auto nested = compile_re("^((a$|c)d?|e)f", search);  // = ^(cd?|e)f
  CHECK(accepts(*nested, "cdfx"));
  CHECK(accepts(*nested, "ef"));
  CHECK_FALSE(accepts(*nested, "af"));
  CHECK_FALSE(accepts(*nested, "xcf"));
  auto both = compile_re("(^a$|c)b", search);  // = cb anywhere
  CHECK(accepts(*both, "xcb"));
  CHECK_FALSE(accepts(*both, "xcxb"));
  CHECK_FALSE(accepts(*both, "a"));
}

TEST_CASE("search mode: what precedes '^' matched empty") {
  regex_options search{.search = true};
  // '^' after what may match empty: x*^a is ^a (node: matches "ab", not "xa"). It was refused.
  auto after_empty = compile_re("x*^a", search);
  CHECK(accepts(*after_empty, "ab"));
  CHECK_FALSE(accepts(*after_empty, "xa"));
  CHECK_FALSE(accepts(*after_empty, "ba"));
  auto group_before = compile_re("(b$|x*)^a", search);  // b$ then ^a: nothing; x* empty: ^a
  CHECK(accepts(*group_before, "a"));
  CHECK_FALSE(accepts(*group_before, "xa"));
  CHECK_THROWS_WITH_AS(compile_re("x+^a", search),
                       doctest::Contains("'^' cannot follow 'x+': in a JSON Schema pattern "
                                         "(ECMAScript, no m flag) '^' matches only at the start"),
                       di::error);
}

TEST_CASE("search mode: text after '$' that matches empty only at the end") {
  regex_options search{.search = true};
  // What follows a group may match empty only by ending the input: b must then be followed by
  // c* up to the end, or by d. Session 50 refused it (dropping the rest had accepted "bx"); each
  // path is now kept by the anchors it passes. node: /(a$|b)(c*$|d)/u matches "xa", "b", "bcc",
  // "xbd", "ab", not "bx", "bcx", "xac".
  auto group = compile_re("(a$|b)(c*$|d)", search);
  for (const char* s : {"xa", "b", "bcc", "xbd", "ab"})
    CHECK_MESSAGE(accepts(*group, s), std::string(s));
  for (const char* s : {"bx", "bcx", "xac"}) CHECK_MESSAGE(!accepts(*group, s), std::string(s));
  auto ends = compile_re("a$(c*$|d)", search);  // every path of a$ ends: c* is empty there
  CHECK(accepts(*ends, "xa"));
  CHECK_FALSE(accepts(*ends, "ad"));
}

TEST_CASE("search mode: alternatives that '^' leaves no way through drop out") {
  regex_options search{.search = true};
  struct anchor_case {
    const char* pattern;
    std::vector<std::pair<const char*, bool>> strings;  ///< node: new RegExp(p, "u").test(s)
  };
  // Recorded from node 20.20.2 (RegExp with the u flag). c(^a|b), x*(^a|b), (^x*|d)(^a|b) and
  // (^a|b$)(c|^) were refused ("'^' or '\A' in the middle of a pattern is not supported");
  // ^(^a|b) accepted "xb" and (b(?:|$|b))$ accepted "ba" (the alternatives' "any character"
  // padding survived the anchor before or after the group).
  const std::vector<anchor_case> cases = {
      {"c(^a|b)", {{"cb", true}, {"xcbx", true}, {"a", false}, {"ca", false}, {"cab", false}}},
      {"^(^a|b)", {{"ax", true}, {"bx", true}, {"xb", false}, {"xa", false}}},
      {"x*(^a|b)",
       {{"a", true}, {"xa", false}, {"ab", true}, {"zb", true}, {"xxb", true}, {"za", false}}},
      {"(^x*|d)(^a|b)",
       {{"a", true}, {"xb", true}, {"db", true}, {"yb", false}, {"b", true}, {"xxa", false}}},
      {"(b(?:|$|b))$", {{"b", true}, {"ab", true}, {"ba", false}, {"bb", true}}},
      {"(^a|b$)(c|^)",
       {{"ac", true}, {"a", false}, {"xb", false}, {"xbc", false}, {"bc", false}, {"xac", false}}},
  };
  for (const anchor_case& c : cases) {
    std::shared_ptr<const compiled_grammar> g;
    try {
      g = compile_re(c.pattern, search);
    } catch (const di::error& e) {
      FAIL_CHECK(std::string(c.pattern), " does not compile: ", std::string(e.what()));
      continue;
    }
    for (const auto& [s, expected] : c.strings)
      CHECK_MESSAGE(accepts(*g, s) == expected, std::string(c.pattern), " on \"", std::string(s),
                    "\"");
  }
  // A group whose every path passes '^' after text matches nothing there: refused, saying so.
  CHECK_THROWS_WITH_AS(compile_re("x(^a|^b)", search),
                       doctest::Contains("'(^a|^b)' cannot follow 'x', as it starts with '^' in "
                                         "every alternative: in a JSON Schema pattern"),
                       di::error);
  // Full match keeps refusing '^' after text.
  CHECK_THROWS_WITH_AS(regex_grammar("c(^a|b)"), doctest::Contains("middle"), di::error);
}

// Each answer below is node 20's (`new RegExp(p, "u")`, and without "u").
TEST_CASE("JSON Schema patterns: what ECMAScript with the u flag refuses is refused") {
  // \z \A \Z were anchors (PCRE's); ECMAScript refuses them with u, reads letters without.
  for (const char* p : {"a\\z", "\\Aa", "a\\Z"})
    CHECK_THROWS_WITH_AS(pattern_schema(p), doctest::Contains("is not an escape of ECMAScript"),
                         di::error);
  // Inline flags and Python's or .NET's named groups: "Invalid group" (they were taken).
  for (const char* p : {"(?i)a", "(?i:a)", "(?s).", "(?P<n>a)", "(?'n'a)"})
    CHECK_THROWS_WITH_AS(pattern_schema(p), doctest::Contains("invalid group"), di::error);
  // \a \e \x{41} \U... were BEL, ESC, A, A (without u: a, e, 41 x's, U00000041).
  for (const char* p : {"\\a", "\\e", "\\x{41}", "\\U00000041", "[\\e]"})
    CHECK_THROWS_WITH_AS(pattern_schema(p), doctest::Contains("is not an escape of ECMAScript"),
                         di::error);
  // A quantifier right after another is "Nothing to repeat" (a** was (a*)*).
  for (const char* p : {"a**", "a*??", "a{2}{3}"})
    CHECK_THROWS_WITH_AS(pattern_schema(p), doctest::Contains("nothing to repeat"), di::error);
  CHECK_THROWS_WITH_AS(pattern_schema("\\\u00e9"), doctest::Contains("unknown escape"), di::error);
  auto named = pattern_schema("^(?<n>a)b$");
  CHECK(pattern_accepts(*named, "ab"));
}

TEST_CASE("JSON Schema patterns: braces and brackets as ECMAScript reads them") {
  auto spaced = pattern_schema("^a{ 2 }$");  // not a count: literal text (Rust's a{2} matched aa)
  CHECK(pattern_accepts(*spaced, "a{ 2 }"));
  CHECK_FALSE(pattern_accepts(*spaced, "aa"));
  auto none = pattern_schema("^(?:[]a]|b)$");  // [] matches nothing (it was the class of ], a)
  CHECK(pattern_accepts(*none, "b"));
  CHECK_FALSE(pattern_accepts(*none, "a"));
  CHECK_FALSE(pattern_accepts(*none, "a]"));
  auto any = pattern_schema("^[^]]$");  // [^] is any character, then ] (it was [^\]])
  CHECK(pattern_accepts(*any, "x]"));
  CHECK(pattern_accepts(*any, "\n]"));
  CHECK_FALSE(pattern_accepts(*any, "x"));
}

TEST_CASE("what a grammar cannot express is a clear error") {
  CHECK_THROWS_WITH_AS(regex_grammar(R"((a)\1)"), doctest::Contains("backreferences"), di::error);
  CHECK_THROWS_WITH_AS(regex_grammar(R"(a\b)"), doctest::Contains("word boundary"), di::error);
  CHECK_THROWS_WITH_AS(regex_grammar("(?=a)a"), doctest::Contains("lookahead"), di::error);
  CHECK_THROWS_WITH_AS(regex_grammar("(?<=a)b"), doctest::Contains("lookbehind"), di::error);
  CHECK_THROWS_WITH_AS(regex_grammar("a^b"), doctest::Contains("middle"), di::error);
  CHECK_THROWS_WITH_AS(regex_grammar("[abc"), doctest::Contains("unterminated"), di::error);
  CHECK_THROWS_WITH_AS(regex_grammar("a{3,2}"), doctest::Contains("min > max"), di::error);
  CHECK_THROWS_WITH_AS(regex_grammar("*a"), doctest::Contains("nothing to repeat"), di::error);
  CHECK_THROWS_WITH_AS(regex_grammar("(ab"), doctest::Contains("missing ')'"), di::error);
  CHECK_THROWS_WITH_AS(regex_grammar(R"(\p{Greek})"), doctest::Contains("not supported"),
                       di::error);
}

TEST_CASE("a long literal pattern matches exactly itself, in full and in search mode") {
  // 4,000 characters: an overlapping run ("abab..", "aaa..": every prefix of it is a suffix of
  // the text read so far, the costly case of search mode's padded start), then pseudo-random
  // text over ASCII, two escaped metacharacters and two multi-byte characters.
  const std::vector<std::string> alphabet = {"a", "b", "c", " ",      "x",     "0",
                                             "9", ".", "+", "\u00e9", "\u65e5"};
  std::vector<std::string> chars;
  for (int i = 0; i < 300; ++i) chars.insert(chars.end(), {"a", "b"});
  for (int i = 0; i < 500; ++i) chars.push_back("a");
  std::uint32_t x = 12345;
  while (chars.size() < 4000) {
    x = x * 1103515245u + 12345u;
    chars.push_back(alphabet[(x >> 16) % alphabet.size()]);
  }
  auto join = [](const std::vector<std::string>& cs) {
    std::string out;
    for (const std::string& c : cs) out += c;
    return out;
  };
  const std::string text = join(chars);
  std::string pattern;
  for (const std::string& c : chars) pattern += (c == "." || c == "+") ? "\\" + c : c;
  // One character changed, added or removed (in the middle), and one less at either end; '#' is
  // not in the text, so no variant holds the whole literal anywhere.
  const std::size_t mid = chars.size() / 2;
  std::vector<std::string> changed = chars, added = chars, removed = chars;
  const std::string mark = "#";
  changed[mid] = mark;
  added.insert(added.begin() + std::ptrdiff_t(mid), mark);
  removed.erase(removed.begin() + std::ptrdiff_t(mid));
  const std::vector<std::string> variants = {
      join(changed), join(added), join(removed),
      join(std::vector<std::string>(chars.begin() + 1, chars.end())),
      join(std::vector<std::string>(chars.begin(), chars.end() - 1))};

  auto full = compile_re(pattern);
  CHECK(accepts(*full, text));
  for (const std::string& v : variants) CHECK_FALSE(accepts(*full, v));
  CHECK_FALSE(accepts(*full, text + "a"));
  CHECK_FALSE(accepts(*full, "a" + text));

  auto search = compile_re(pattern, regex_options{.search = true});
  CHECK(accepts(*search, text));
  CHECK(accepts(*search, "ab" + text + "\u00e9a"));
  CHECK(accepts(*search, text.substr(0, 100) + text));  // a partial match first, then the text
  for (const std::string& v : variants) {
    CHECK_FALSE(accepts(*search, v));
    CHECK_FALSE(accepts(*search, "#" + v + "#"));
  }

  auto unanchored = pattern_schema(pattern);
  auto anchored = pattern_schema("^" + pattern + "$");
  CHECK(pattern_accepts(*unanchored, text));
  CHECK(pattern_accepts(*unanchored, "aa" + text + " "));
  CHECK(pattern_accepts(*anchored, text));
  CHECK_FALSE(pattern_accepts(*anchored, text + " "));
  for (const std::string& v : variants) {
    CHECK_FALSE(pattern_accepts(*unanchored, v));
    CHECK_FALSE(pattern_accepts(*anchored, v));
  }
}
