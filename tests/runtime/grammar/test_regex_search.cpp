// Search mode's automata: a pattern that starts with literal text is matched through the text's
// KMP automaton (the same language as "any text", the literal, the rest: checked against plain
// substring search on random strings), in work linear in its length; and subset construction's
// memory and work budgets, which refuse what stays quadratic with an error naming the problem.
#include "common/error.hpp"
#include "tests/runtime/grammar/grammar_test_util.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

using namespace di::grammar;
using di::grammar::test::accepts;
using di::grammar::test::pattern_accepts;
using di::grammar::test::pattern_schema;

namespace {

/// A regex in search mode, compiled with `o`.
std::shared_ptr<const compiled_grammar> search_re(const std::string& pattern,
                                                  const compile_options& o = {}) {
  return compiled_grammar::compile(regex_grammar(pattern, {.search = true}), o);
}

struct lcg {
  std::uint32_t x;
  std::uint32_t next(std::uint32_t n) {
    x = x * 1103515245u + 12345u;
    return (x >> 16) % n;
  }
};

std::string random_text(lcg& r, const std::vector<std::string>& alphabet, std::uint32_t max_len) {
  std::string s;
  for (std::uint32_t k = r.next(max_len + 1); k > 0; --k) s += alphabet[r.next(alphabet.size())];
  return s;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Whether `text` ends with `w` then one `b` or more (the pattern w b+ $).
bool ends_with_b_run(const std::string& text, const std::string& w) {
  for (std::string run = "b"; run.size() <= text.size(); run += "b")
    if (ends_with(text, w + run)) return true;
  return false;
}

/// Checks literal patterns (w, w$, wb+, wb+$) over `alphabet` against substring search:
/// `compile` builds a search-mode grammar from a pattern, `matches` asks it about a text.
template <class Compile, class Matches>
void check_literals(const std::vector<std::string>& alphabet, int num_patterns, Compile compile,
                    Matches matches) {
  lcg r{7};
  for (int p = 0; p < num_patterns; ++p) {
    std::string w = random_text(r, alphabet, 7);
    while (w.size() < 2) w += alphabet[r.next(alphabet.size())];
    auto any = compile(w);
    auto to_end = compile(w + "$");
    auto then_b = compile(w + "b+");
    auto then_b_to_end = compile(w + "b+$");
    for (int t = 0; t < 40; ++t) {
      std::string text = random_text(r, alphabet, 12);
      if (t % 3 == 0) text = random_text(r, alphabet, 4) + w + random_text(r, alphabet, 4);
      INFO("pattern '", w, "', text '", text, "'");
      CHECK(matches(*any, text) == (text.find(w) != std::string::npos));
      CHECK(matches(*to_end, text) == ends_with(text, w));
      CHECK(matches(*then_b, text) == (text.find(w + "b") != std::string::npos));
      CHECK(matches(*then_b_to_end, text) == ends_with_b_run(text, w));
    }
  }
}

}  // namespace

TEST_CASE("search mode: a pattern starting with literal text keeps its language") {
  // Small alphabets make texts overlap themselves (borders), the case the KMP automaton's
  // fallback transitions must get right; multi-byte characters and JSON escapes ("\"", "\n")
  // check that it steps by characters, not bytes.
  check_literals(
      {"a", "b", "\u00e9"}, 60, [](const std::string& p) { return search_re(p); },
      [](const compiled_grammar& g, const std::string& t) { return accepts(g, t); });
  check_literals(
      {"a", "b", "\"", "\n", "\u65e5"}, 40, [](const std::string& p) { return pattern_schema(p); },
      [](const compiled_grammar& g, const std::string& t) { return pattern_accepts(g, t); });
}

TEST_CASE("search mode: counted and grouped literal text, and what follows it") {
  auto counted = search_re("a{3}(?:ba){2}c");  // aaababac
  CHECK(accepts(*counted, "aaababac"));
  CHECK(accepts(*counted, "xaaaaababacx"));
  CHECK_FALSE(accepts(*counted, "aababac"));
  CHECK_FALSE(accepts(*counted, "aaababa"));
  auto classes = search_re("abab[0-9]+x");
  CHECK(accepts(*classes, "abababab12x"));
  CHECK(accepts(*classes, "ababab7x!"));
  CHECK_FALSE(accepts(*classes, "abab12"));
  CHECK_FALSE(accepts(*classes, "aba12x"));
  auto alternatives = search_re("aab|^ba|c$");  // one literal path, one anchored, one at the end
  CHECK(accepts(*alternatives, "xaab"));
  CHECK(accepts(*alternatives, "bax"));
  CHECK(accepts(*alternatives, "xc"));
  CHECK_FALSE(accepts(*alternatives, "xba"));
  CHECK_FALSE(accepts(*alternatives, "cx"));
  CHECK_FALSE(accepts(*alternatives, "aba"));
}

TEST_CASE("search mode: a 20,000-character literal overlapping itself takes linear work") {
  // Padded with "any character"* before it, "a" x n held n NFA states in one state set after n
  // a's: about n^2 / 2 = 2e8 steps of subset construction (10 s, 1.8 GB). Its KMP automaton
  // needs a few dozen per character (one state set per byte class); a budget of 100 per
  // character, 1% of the padded form's, proves it.
  const std::size_t n = 20000;
  compile_options linear;
  linear.max_subset_work = 100 * n;
  const std::string a(n, 'a');
  std::string abab;
  while (abab.size() < n) abab += "ab";
  for (const std::string& pattern :
       std::vector<std::string>{a, "a{20000}", abab, "(?:ab){10000}"}) {
    INFO("pattern ", pattern.substr(0, 12), "...");
    const std::string text = pattern[0] == '(' ? abab : pattern[1] == '{' ? a : pattern;
    std::shared_ptr<const compiled_grammar> g;
    REQUIRE_NOTHROW(g = search_re(pattern, linear));
    CHECK(accepts(*g, text));
    CHECK(accepts(*g, "ab" + text + "b"));
    CHECK_FALSE(accepts(*g, text.substr(1)));
    CHECK_FALSE(accepts(*g, text.substr(0, n / 2) + "x" + text.substr(n / 2 + 1)));
  }
  // Inside a JSON string each state's sets hold the dozens of ways a character is written
  // (escapes, UTF-8): ~1,500 steps per character; the padded form needs over n^2 / 2 = 2e8.
  compile_options json_linear;
  json_linear.max_subset_work = 2000 * n;
  std::shared_ptr<const compiled_grammar> schema;
  REQUIRE_NOTHROW(schema = pattern_schema(a, json_linear));
  CHECK(pattern_accepts(*schema, "\"" + a + "\n"));
  CHECK_FALSE(pattern_accepts(*schema, a.substr(1)));
}

TEST_CASE("subset construction stops at its memory and work budgets with an error that says why") {
  // (?i) and a class make each character a set, so no literal: the state sets stay quadratic
  // (about 300^2 / 2 NFA states kept and visited).
  const std::string folded = "(?i)" + std::string(300, 'a');
  std::string classes;
  for (int i = 0; i < 300; ++i) classes += "[aA]";
  compile_options small_memory;
  small_memory.max_subset_size = 10'000;
  compile_options small_work;
  small_work.max_subset_work = 10'000;
  const std::vector<std::pair<compile_options, std::string>> budgets = {
      {small_memory, "keeps more than 10000 NFA states in its distinct state sets (memory)"},
      {small_work, "visits more than 10000 NFA states summed over the state sets it forms"}};
  for (const auto& [o, says] : budgets) {
    for (const auto& compile :
         {std::function<void()>([&, o = o] { search_re(folded, o); }),
          std::function<void()>([&, o = o] { pattern_schema(classes, o); })}) {
      CHECK_THROWS_WITH_AS(compile(), doctest::Contains("grammar too complex"), di::error);
      CHECK_THROWS_WITH_AS(compile(), doctest::Contains(says.c_str()), di::error);
      CHECK_THROWS_WITH_AS(compile(), doctest::Contains("anchor it with ^ and $"), di::error);
    }
  }
  // Within the default budgets both compile, and mean what they say.
  auto g = search_re(folded);
  std::string mixed = "x";  // appended: GCC 12 warns (-Wrestrict) on "x" + std::string
  mixed += std::string(150, 'A') + std::string(150, 'a');
  CHECK(accepts(*g, mixed));
  CHECK_FALSE(accepts(*g, std::string(299, 'a')));
  auto s = pattern_schema(classes);
  CHECK(pattern_accepts(*s, std::string(300, 'A')));
  CHECK_FALSE(pattern_accepts(*s, std::string(299, 'A')));
}
