// Search mode's automata: a pattern that starts with literal text is matched through the text's
// KMP automaton (the same language as "any text", the literal, the rest: checked against plain
// substring search on random strings), in work linear in its length; and subset construction's
// memory and work budgets, which refuse what stays quadratic with an error naming the problem;
// optional text at an unanchored end cut (X{m,n} as X{m}, X* as nothing), the same language.
#include "common/error.hpp"
#include "runtime/grammar/detail/search_automaton.hpp"
#include "runtime/grammar/regular_language.hpp"
#include "tests/runtime/grammar/grammar_test_util.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
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
  // After '.*' the text is no literal searched from the start of the input: x.*aaa... keeps the
  // padded form, whose state sets stay quadratic (after x and n a's, each a read may have
  // started the a's: about 300^2 / 2 NFA states kept and visited). ((?i) literals and [aA]
  // classes were the examples here until their literal automaton made them linear.)
  const std::string dotted = "x.*" + std::string(300, 'a');
  compile_options small_memory;
  small_memory.max_subset_size = 10'000;
  compile_options small_work;
  small_work.max_subset_work = 10'000;
  const std::vector<std::pair<compile_options, std::string>> budgets = {
      {small_memory, "keeps more than 10000 NFA states in its distinct state sets (memory)"},
      {small_work, "visits more than 10000 NFA states summed over the state sets it forms"}};
  for (const auto& [o, says] : budgets) {
    for (const auto& compile : {std::function<void()>([&, o = o] { search_re(dotted, o); }),
                                std::function<void()>([&, o = o] { pattern_schema(dotted, o); })}) {
      CHECK_THROWS_WITH_AS(compile(), doctest::Contains("grammar too complex"), di::error);
      CHECK_THROWS_WITH_AS(compile(), doctest::Contains(says.c_str()), di::error);
      CHECK_THROWS_WITH_AS(compile(), doctest::Contains("anchor it with ^ and $"), di::error);
    }
  }
  // Within the default budgets both compile, and mean what they say.
  std::string matching = "yx";  // appended: GCC 12 warns (-Wrestrict) on "x" + std::string
  matching += std::string(301, 'a');
  auto g = search_re(dotted);
  CHECK(accepts(*g, matching));
  CHECK_FALSE(accepts(*g, matching.substr(0, 301)));
  CHECK_FALSE(accepts(*g, std::string(301, 'a')));
  auto s = pattern_schema(dotted);
  CHECK(pattern_accepts(*s, matching));
  CHECK_FALSE(pattern_accepts(*s, matching.substr(0, 301)));
  CHECK_FALSE(pattern_accepts(*s, std::string(301, 'a')));
}

namespace {

/// Whether `g` searches with the literal automaton: a rule built as it (search_literals) or
/// written as rules (search_any, their "any text" rule).
bool took_automaton(const grammar& g) {
  const std::optional<rule_id> built = g.find_rule("search_literals");
  return (built && g.automaton(*built)) || g.find_rule("search_any").has_value();
}

/// The automaton of `pattern` (rust flavor), searched or matched in full.
byte_dfa regex_dfa(const std::string& pattern, bool search, bool& took_literals) {
  grammar g;
  regex_options o;
  o.search = search;
  const expr_id e = compile_regex(g, pattern, o);
  took_literals = took_automaton(g);
  return byte_dfa::from_expr(g, e, 20'000);
}

/// The automaton of a JSON Schema string with `pattern`.
byte_dfa pattern_dfa(const std::string& pattern, bool& took_literals) {
  const nlohmann::ordered_json schema = {{"type", "string"}, {"pattern", pattern}};
  const grammar g = compile_json_schema_text(schema.dump()).g;
  took_literals = took_automaton(g);
  return byte_dfa::from_expr(g, *g.rule_at(g.root()).body, 20'000);
}

bool same_language(const byte_dfa& a, const byte_dfa& b) {
  return a.intersect(b.complement()).empty() && b.intersect(a.complement()).empty();
}

/// A random alternation: alternatives that start with literal text (characters and classes from
/// `positions`, some counted), then maybe more, maybe tied to the end; some that start
/// otherwise or at the start. `padded` gets the same language as a full match: what comes
/// before and after an alternative spelled out with `any`.
std::string random_alternation(lcg& r, const std::vector<std::string>& positions,
                               const std::vector<std::string>& tails,
                               const std::vector<std::string>& non_literal, const std::string& any,
                               std::string& padded) {
  std::string search;
  padded.clear();
  for (std::uint32_t k = 0, n = 1 + r.next(3); k < n; ++k) {
    std::string alt;
    bool at_start = false;
    if (r.next(8) == 0) {
      alt = non_literal[r.next(non_literal.size())];
    } else {
      at_start = r.next(10) == 0;
      bool counted = false;  // once: counts of counts make the padded form's automaton huge
      for (std::uint32_t i = 0, m = 1 + r.next(5); i < m; ++i) {
        alt += positions[r.next(positions.size())];
        if (!counted && r.next(8) == 0)
          alt = "(?:" + alt + "){" + std::to_string(2 + r.next(2)) + "}", counted = true;
      }
      alt += tails[r.next(tails.size())];
    }
    const bool at_end = r.next(4) == 0;
    // appended piece by piece: GCC 12 warns (-Wrestrict) on "|" + std::string
    if (k) search += '|', padded += '|';
    if (at_start) search += '^';
    if (!at_start) padded += any;
    search += alt;
    padded += "(?:";
    padded += alt;
    padded += ')';
    if (at_end) search += '$';
    if (!at_end) padded += any;
  }
  return search;
}

}  // namespace

TEST_CASE("search mode: literal alternatives, (?i) and classes keep the padded form's language") {
  // Differential: each random pattern searched (through the literal automaton wherever its
  // alternatives start with literal text) against the same alternatives padded with "any
  // text" and matched in full (subset construction), compared as DFAs: neither accepts a byte
  // string the other refuses. Small alphabets overlap the literals with each
  // other and themselves; classes that overlap a symbol ([a-c] beside a, [^a] beside b) cut
  // a literal short, a class equal to another ([aA], (?i:a)) is one symbol.
  lcg r{11};
  const std::vector<std::string> positions = {"a",    "b",     "a",    "b",      "\u00e9",
                                              "[ab]", "[aA]",  "A",    "(?i:a)", "(?i:b)",
                                              "\\d",  "[a-c]", "[^a]", "\\.",    "\u65e5"};
  const std::vector<std::string> tails = {"", "", "", "b+", "[0-9]*x", "(?:c|d)", "\\d", "a?"};
  const std::vector<std::string> non_literal = {"\\d+", "[ab]*c", "b?a", "(?:x|yy)+"};
  int num_literal = 0;
  for (int k = 0; k < 80; ++k) {
    std::string padded;
    const std::string pattern =
        random_alternation(r, positions, tails, non_literal, "[\\s\\S]*", padded);
    INFO("pattern ", pattern, " vs ", padded);
    bool took = false, unused = false;
    const byte_dfa searched = regex_dfa(pattern, true, took);
    CHECK(same_language(searched, regex_dfa(padded, false, unused)));
    num_literal += took;
  }
  // Most go through the automaton (others: one character, or cut to none).
  CHECK(num_literal > 30);
  // The same in JSON Schema patterns, whose characters are written escaped in a JSON string.
  const std::vector<std::string> json_positions = {"a",    "b",   "\"",    "\n",     "[ab]",
                                                   "[aA]", "\\d", "[a-c]", "\u65e5", "\\\\"};
  int num_json_literal = 0;
  for (int k = 0; k < 30; ++k) {
    std::string padded;
    const std::string pattern =
        random_alternation(r, json_positions, tails, non_literal, "[\\s\\S]*", padded);
    INFO("pattern ", pattern, " vs ", padded);
    bool took = false, unused = false;
    const byte_dfa searched = pattern_dfa(pattern, took);
    CHECK(same_language(searched, pattern_dfa("^(?:" + padded + ")$", unused)));
    num_json_literal += took;
  }
  CHECK(num_json_literal > 15);
}

TEST_CASE("search mode: hundreds of literal alternatives keep the padded form's language") {
  // The automaton's states take their failure state's moves through a shared tree of moves
  // per state: word lists deep enough for long failure chains (4 letters), wide alphabets
  // (26 letters, multi-byte characters, a class), some tied to the end, against the padded
  // form's DFA as in the differential above.
  lcg r{13};
  const std::vector<std::string> narrow = {"a", "b", "c", "d"};
  std::vector<std::string> wide = {"\u00e9", "\u65e5", "[0-9]"};
  for (char c = 'a'; c <= 'z'; ++c) wide.push_back(std::string(1, c));
  for (int k = 0; k < 6; ++k) {
    const std::vector<std::string>& letters = k < 3 ? narrow : wide;
    std::string search, inside = "(?:", at_end = "(?:";  // padded: the words by where they end
    for (std::uint32_t w = 0, n = 100 + r.next(100); w < n; ++w) {
      std::string word;
      for (std::uint32_t i = 0, len = 2 + r.next(k < 3 ? 6 : 3); i < len; ++i)
        word += letters[r.next(letters.size())];
      const bool to_end = r.next(6) == 0;
      if (w) search += '|';
      search += word + (to_end ? "$" : "");
      (to_end ? at_end : inside) += word + "|";
    }
    inside.back() = ')', at_end.back() = ')';
    const std::string padded = "[\\s\\S]*" + inside + "[\\s\\S]*|[\\s\\S]*" + at_end;
    INFO("pattern ", search);
    bool took = false, unused = false;
    const byte_dfa searched = regex_dfa(search, true, took);
    CHECK(took);
    CHECK(same_language(searched, regex_dfa(padded, false, unused)));
  }
}

TEST_CASE("search automaton: the Aho-Corasick moves are the longest suffix that is a prefix") {
  // Reference by definition: from the state of prefix p, symbol c leads to the longest suffix of
  // p + c that is a prefix of a literal (state 0: none), over random small literal sets.
  lcg r{5};
  for (int k = 0; k < 200; ++k) {
    std::vector<std::vector<std::uint32_t>> literals(1 + r.next(5));
    for (auto& l : literals)
      for (std::uint32_t i = 0, n = 1 + r.next(6); i < n; ++i) l.push_back(r.next(3));
    const detail::search_automaton a = detail::build_search_automaton(literals, 3);
    // Each prefix's state, found along the moves (a prefix's next symbol leads to its child).
    std::map<std::vector<std::uint32_t>, std::uint32_t> state_of{{{}, 0}};
    for (const auto& l : literals) {
      std::vector<std::uint32_t> p;
      for (std::uint32_t c : l) {
        const std::uint32_t t = a.move(state_of.at(p), c);
        p.push_back(c);
        if (!state_of.count(p)) state_of[p] = t;
        CHECK(state_of[p] == t);
        CHECK(a.states[t].depth == p.size());
      }
    }
    CHECK(a.states.size() == state_of.size());
    CHECK(a.order.size() == state_of.size());
    // The longest suffix of `p` (proper: not `p` itself) that is a state, and the longest where
    // a literal ends.
    const auto longest_suffix = [&](const std::vector<std::uint32_t>& p, bool proper, bool ending) {
      for (std::size_t drop = proper ? 1 : 0; drop <= p.size(); ++drop) {
        const std::vector<std::uint32_t> suffix(p.begin() + std::ptrdiff_t(drop), p.end());
        const bool ends = std::find(literals.begin(), literals.end(), suffix) != literals.end();
        if (state_of.count(suffix) && (!ending || ends)) return state_of.at(suffix);
      }
      return ending ? detail::search_automaton::k_none : 0;
    };
    for (const auto& [p, s] : state_of) {
      INFO("literal set ", k, ", prefix of length ", p.size());
      for (std::uint32_t c = 0; c < 3; ++c) {
        std::vector<std::uint32_t> next = p;
        next.push_back(c);
        CHECK(a.move(s, c) == longest_suffix(next, false, false));
      }
      if (s != 0) CHECK(a.states[s].fail == longest_suffix(p, true, false));
      CHECK(a.states[s].suffix_end == longest_suffix(p, true, true));
      std::size_t num_ends = 0;
      for (const auto& l : literals) num_ends += l == p;
      CHECK(a.states[s].ends.size() == num_ends);
    }
  }
}

TEST_CASE("search mode: (?i) literals, classes and 2,000 alternatives take linear work") {
  // Each was refused by subset construction's budgets (16 million NFA states kept, 100 million
  // formed) after 1-5 s, or built slowly: under (?i) or as [aA] classes a^n held every a read in
  // one state set, 2,000 words searched at once the words any text read may be in. Their
  // literal automaton has a state per prefix: a budget of 100 formed NFA states per character,
  // a hundredth of the padded form's, and a bound on the states prove it.
  const std::size_t n = 20000;
  compile_options linear;
  linear.max_subset_work = 100 * n;
  std::string classes;
  for (std::size_t i = 0; i < n; ++i) classes += "[aA]";
  std::string mixed = "b";
  for (std::size_t i = 0; i < n; ++i) mixed += i % 3 ? 'a' : 'A';
  for (const std::string& pattern : {"(?i)" + std::string(n, 'a'), classes}) {
    INFO("pattern ", pattern.substr(0, 12), "...");
    std::shared_ptr<const compiled_grammar> g;
    REQUIRE_NOTHROW(g = search_re(pattern, linear));
    CHECK(g->num_states() <= n + 64);
    CHECK(accepts(*g, mixed + "b"));
    CHECK_FALSE(accepts(*g, mixed.substr(0, n / 2) + "b" + mixed.substr(n / 2 + 1)));
  }
  // 2,000 random words of 10 letters, each searched for (a JSON Schema "pattern": "w1|w2|..."):
  // refused after 5 s by the work budget. The automaton's rules are more than a regular
  // component built as one loop may hold, so it is built rule by rule; 600 (or 1,000) fit.
  lcg r{3};
  std::vector<std::string> words;
  std::string alternation;
  for (int k = 0; k < 2000; ++k) {
    std::string w;
    for (int i = 0; i < 10; ++i) w += char('a' + r.next(26));
    if (k == 600) {
      std::shared_ptr<const compiled_grammar> half;
      REQUIRE_NOTHROW(half = search_re(alternation));
      CHECK(half->num_rules() == 1);
      CHECK(half->num_states() <= 6000 + 64);
    }
    alternation += (k ? "|" : "") + w;
    words.push_back(w);
  }
  std::shared_ptr<const compiled_grammar> g;
  REQUIRE_NOTHROW(g = search_re(alternation));
  for (int t = 0; t < 200; ++t) {
    std::string text;
    for (std::uint32_t i = 0, len = r.next(40); i < len; ++i) text += char('a' + r.next(26));
    if (t % 2) text.insert(r.next(std::uint32_t(text.size()) + 1), words[r.next(2000)]);
    bool found = false;
    for (const std::string& w : words) found = found || text.find(w) != std::string::npos;
    INFO("text ", text);
    CHECK(accepts(*g, text) == found);
  }
  // Inside a JSON string (escapes, UTF-8: more NFA states per character).
  compile_options json_linear;
  json_linear.max_subset_work = 2000 * n;
  std::shared_ptr<const compiled_grammar> schema;
  REQUIRE_NOTHROW(schema = pattern_schema(classes, json_linear));
  CHECK(pattern_accepts(*schema, mixed));
  CHECK_FALSE(pattern_accepts(*schema, mixed.substr(1, n - 1)));
}

namespace {

/// A random small regex for the trimming differential: characters and classes (one multi-byte),
/// groups of them and alternations of those, each maybe under *, +, ? or a count. Small: the
/// padded form's automaton stays a few thousand states.
std::string random_quantified(lcg& r, bool in_group = false) {
  const std::vector<std::string> atoms = {"a", "b", "[ab]", "[a-c]", "[0-9]", "\u00e9", "."};
  const std::vector<std::string> quantifiers = {"",    "",      "",      "*",     "+",   "?",
                                                "{2}", "{1,3}", "{2,4}", "{0,2}", "{2,}"};
  std::string s;
  for (std::uint32_t i = 0, n = 1 + r.next(in_group ? 2 : 3); i < n; ++i) {
    std::string atom;
    if (!in_group && r.next(4) == 0) {
      atom = r.next(2) ? "(?:" : "(";
      atom += random_quantified(r, true);
      if (r.next(2)) atom += "|" + random_quantified(r, true);
      atom += ")";
    } else {
      atom = atoms[r.next(atoms.size())];
    }
    s += atom + quantifiers[r.next(quantifiers.size())];
  }
  return s;
}

}  // namespace

TEST_CASE("search mode: optional text at a pattern's unanchored ends is cut, same language") {
  // Beside the "any text" padding, X{m,n} at an end is X{m} and X*, X? or a path that may match
  // empty are nothing: [0-9]{2}[A-Z0-9]{11,30} is searched as [0-9]{2}[A-Z0-9]{11}.
  // Differential: random patterns searched (cut) against their alternatives padded with "any
  // text" where not anchored and matched in full (nothing cut), compared as DFAs.
  lcg r{17};
  const std::string any = "[\\s\\S]*";
  for (int k = 0; k < 150; ++k) {
    std::string search, padded;
    for (std::uint32_t a = 0, n = 1 + r.next(3); a < n; ++a) {
      const std::string alt = random_quantified(r);
      const bool at_start = r.next(5) == 0, at_end = r.next(4) == 0;
      if (a) search += '|', padded += '|';
      if (at_start) search += '^';
      search += alt;
      if (at_end) search += '$';
      if (!at_start) padded += any;
      padded += "(?:";
      padded += alt;
      padded += ')';
      if (!at_end) padded += any;
    }
    INFO("pattern ", search, " vs ", padded);
    bool unused = false;
    CHECK(same_language(regex_dfa(search, true, unused), regex_dfa(padded, false, unused)));
  }
  // Anchors inside groups: each path is cut only at the ends it is padded at.
  const std::vector<std::pair<std::string, std::string>> anchored = {
      {"(?:^a|b)c{1,3}", "ac{1,3}" + any + "|" + any + "bc{1,3}" + any},
      {"a{1,3}(?:b|c$)", any + "a{1,3}b" + any + "|" + any + "a{1,3}c"},
      {"(?:^|x)a{2,3}", "a{2,3}" + any + "|" + any + "xa{2,3}" + any},
      {"b*(?:a{1,2}$|c+)", any + "b*a{1,2}|" + any + "b*c+" + any},
      {"^a{1,3}$", "a{1,3}"},
      {"^a{1,3}b?", "a{1,3}b?" + any},
      {"a?b{2,4}$", any + "a?b{2,4}"},
      {"(?:a{2,3}|^b{1,2})(?:c{1,2}$|d*)",
       any + "a{2,3}c{1,2}|" + any + "a{2,3}d*" + any + "|b{1,2}c{1,2}|b{1,2}d*" + any},
  };
  for (const auto& [search, padded] : anchored) {
    INFO("pattern ", search, " vs ", padded);
    bool unused = false;
    CHECK(same_language(regex_dfa(search, true, unused), regex_dfa(padded, false, unused)));
  }
  // A pattern that may match empty matches every text.
  for (const char* nullable : {"a*", "(?:a|b?)c{0,3}", "x?|^y"}) {
    INFO("pattern ", nullable);
    bool unused = false;
    CHECK(same_language(regex_dfa(nullable, true, unused), regex_dfa(any, false, unused)));
    auto s = pattern_schema(nullable);
    CHECK(pattern_accepts(*s, ""));
    CHECK(pattern_accepts(*s, "zzz \u00e9\n\""));
  }
}

TEST_CASE("search mode: an IBAN pattern (counted ranges at its end) compiles and matches") {
  // Refused after 3.7 s by the work budget (more than 100,000,000 NFA states formed) before
  // its end was cut; [0-9]{2}[A-Z0-9]{11,30} took 16 s.
  for (const char* iban : {"[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}", "[A-Z]{2}\\d{2}[A-Z0-9]{11,30}",
                           "[0-9]{2}[A-Z0-9]{11,30}"}) {
    INFO("pattern ", iban);
    std::shared_ptr<const compiled_grammar> s;
    REQUIRE_NOTHROW(s = pattern_schema(iban));
    CHECK(pattern_accepts(*s, "DE89370400440532013000"));
    CHECK(pattern_accepts(*s, "IBAN: DE89370400440532013000, thanks"));
    CHECK(pattern_accepts(*s, "DE8937040044053"));       // 11 after the digits
    CHECK_FALSE(pattern_accepts(*s, "DE893704004405"));  // 10
    CHECK_FALSE(pattern_accepts(*s, "DE8"));
    CHECK_FALSE(pattern_accepts(*s, "DE89 3704 0044 0532 0130 00"));
    CHECK_FALSE(pattern_accepts(*s, "de89 3704 0044 0532 0130 00"));
    CHECK_FALSE(pattern_accepts(*s, ""));
  }
  std::shared_ptr<const compiled_grammar> anchored;
  REQUIRE_NOTHROW(anchored = pattern_schema("^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$"));
  CHECK(pattern_accepts(*anchored, "DE89370400440532013000"));
  CHECK_FALSE(pattern_accepts(*anchored, "IBAN: DE89370400440532013000"));
  CHECK_FALSE(pattern_accepts(*anchored, "DE89370400440532013000!"));
  CHECK_FALSE(pattern_accepts(*pattern_schema("[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}"),
                              "de89370400440532013000"));
}

namespace {

/// `text` as a regex that matches it literally (escaped: the characters special in both Rust's
/// syntax and ECMAScript's with the u flag).
std::string escape_regex(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (std::string_view("\\.+*?()|[]{}^$").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

/// A random word list over `letters`: new words, and words that are a prefix, a suffix or the
/// middle of an earlier one, or an earlier one again, or one extended; each tied to the end
/// (`$`) or not (second).
std::vector<std::pair<std::string, bool>> random_word_list(lcg& r,
                                                           const std::vector<std::string>& letters,
                                                           std::uint32_t num_words) {
  std::vector<std::vector<std::uint32_t>> words;  // letters by index: cut whole characters
  std::vector<std::pair<std::string, bool>> out;
  for (std::uint32_t w = 0; w < num_words; ++w) {
    std::vector<std::uint32_t> word;
    const std::uint32_t how = words.empty() ? 0 : r.next(6);
    if (how >= 1) word = words[r.next(std::uint32_t(words.size()))];  // 5: the same again
    if (how == 1 || how == 3) word.resize(1 + r.next(std::uint32_t(word.size())));  // prefix
    if (how == 2 || how == 3)
      word.erase(word.begin(), word.begin() + r.next(std::uint32_t(word.size())));
    if (how == 0 || how == 4)  // the first word has 2 letters or more: one alone is padded
      for (std::uint32_t i = 0, n = 2 + r.next(4); i < n; ++i)
        word.push_back(r.next(std::uint32_t(letters.size())));
    words.push_back(word);
    std::string text;
    for (std::uint32_t i : word) text += letters[i];
    out.push_back({text, r.next(5) == 0});
  }
  return out;
}

/// The search pattern of `words`, and the same language padded with "any text" (`padded`).
std::string word_pattern(const std::vector<std::pair<std::string, bool>>& words,
                         std::string& padded) {
  std::string pattern, inside, at_end;
  for (const auto& [w, to_end] : words) {
    if (!pattern.empty()) pattern += '|';
    pattern += escape_regex(w);
    if (to_end) pattern += '$';
    std::string& part = to_end ? at_end : inside;
    part += (part.empty() ? "" : "|") + escape_regex(w);
  }
  const std::string any = "[\\s\\S]*";
  padded.clear();
  if (!inside.empty()) padded = any + "(?:" + inside + ")" + any;
  if (!at_end.empty()) padded += (padded.empty() ? "" : "|") + any + "(?:" + at_end + ")";
  return pattern;
}

bool built_automaton(const grammar& g) {
  const std::optional<rule_id> r = g.find_rule("search_literals");
  return r && g.automaton(*r) != nullptr;
}

/// Whether `text` holds one of `words` (the second: tied to the end), by brute force.
bool has_word(const std::string& text, const std::vector<std::pair<std::string, bool>>& words) {
  for (const auto& [w, to_end] : words)
    if (to_end ? ends_with(text, w) : text.find(w) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("search mode: word lists built as one automaton rule keep the padded form's language") {
  // Differential: random word lists -- words that are prefixes, suffixes and middles of others,
  // repeated, overlapping; regex-special, multi-byte and case-variant characters; some tied to
  // the end, some lists under (?i) -- searched through the automaton rule (its moves written
  // out, built without subset construction's state sets) against the words padded with "any
  // text" and matched in full, compared as byte DFAs. Then the same as JSON Schema patterns.
  lcg r{19};
  const std::vector<std::vector<std::string>> alphabets = {
      {"a", "b"},
      {"a", "b", "c", "A"},
      {"a", ".", "(", "$", "|", "+", "\\", "b"},
      {"\u00e9", "\u00c9", "e", "\u65e5", "\U0001F600", "x"},
      {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", " ", "-"},
  };
  for (int k = 0; k < 60; ++k) {
    const auto& letters = alphabets[k % alphabets.size()];
    const auto words = random_word_list(r, letters, 1 + r.next(40));
    std::string padded;
    std::string pattern = word_pattern(words, padded);
    if (k % 7 == 3) pattern = "(?i)(?:" + pattern + ")", padded = "(?i)(?:" + padded + ")";
    INFO("pattern ", pattern, " vs ", padded);
    grammar g;
    const expr_id e = compile_regex(g, pattern, {.search = true});
    CHECK(built_automaton(g));
    bool unused = false;
    CHECK(same_language(byte_dfa::from_expr(g, e, 20'000), regex_dfa(padded, false, unused)));
  }
  for (int k = 0; k < 25; ++k) {
    const auto& letters = alphabets[k % alphabets.size()];
    const auto words = random_word_list(r, letters, 1 + r.next(30));
    std::string padded;
    const std::string pattern = word_pattern(words, padded);
    INFO("pattern ", pattern, " vs ", padded);
    const nlohmann::ordered_json schema = {{"type", "string"}, {"pattern", pattern}};
    const grammar g = compile_json_schema_text(schema.dump()).g;
    CHECK(built_automaton(g));
    bool unused = false;
    CHECK(same_language(byte_dfa::from_expr(g, *g.rule_at(g.root()).body, 20'000),
                        pattern_dfa("^(?:" + padded + ")$", unused)));
  }
}

TEST_CASE("search mode: a word list takes exactly the texts that hold one of its words") {
  // Against substring search: words at the start, middle and end of a text, overlapping
  // (she/he/hers), prefixes and suffixes of each other, one inside another's prefix (a state's
  // suffix chain), regex-special characters, non-ASCII UTF-8, case variants (case-sensitive),
  // and one tied to the end.
  // clang-format off
  const std::vector<std::pair<std::string, bool>> words = {
      {"he", false},    {"she", false},         {"his", false},   {"hers", false},
      {"a.b", false},   {"(x)", false},         {"c+d", false},   {"[y]", false},
      {"q$", false},    {"caf\u00e9", false},   {"\u65e5\u672c", false},
      {"Word", false},  {"na\u00efve", false},  {"zz", true},     {"\\n", false},
      {"scale", false}, {"cal", false},  // inside a longer word's prefix: "scal" holds "cal"
      {"tally", false}, {"all", true},   // "tall" ends with "all": its suffix chain's exit
  };
  std::string pattern;
  for (const auto& [w, to_end] : words)
    pattern += (pattern.empty() ? "" : "|") + escape_regex(w) + (to_end ? "$" : "");
  const std::vector<std::string> texts = {
      "he", "xhe", "hex", "ushers", "sh", "h", "hi", "this", "hrs", "a.b", "axb", "a.", "(x)", "(x",
      "x)", "c+d", "ccd", "cd", "[y]", "y]", "q$", "q", "$q", "caf\u00e9", "cafe", "caf\u00c9",
      "CAF\u00c9", "\u65e5\u672c\u8a9e", "\u65e5", "\u672c\u65e5", "Word", "word", "WORD", "Words",
      "sWord", "na\u00efve", "naive", "zz", "zzx", "xzz", "z", "\\n", "\n", "", "w\u00f6rd",
      "\"\"", "\\", "Wor", "ord", "scal", "xscaly", "scalx", "sca", "scale", "ca",
      "tall", "talls", "tally", "xall", "alls", "al"};
  // clang-format on
  std::shared_ptr<const compiled_grammar> searched, schema;
  REQUIRE_NOTHROW(searched = search_re(pattern));
  REQUIRE_NOTHROW(schema = pattern_schema(pattern));
  const std::vector<std::string> pieces = {"h", "e", "s",      "r",   "i",      "x",      "a",
                                           ".", "b", "z",      "W",   "ord",    "l",      "sca",
                                           "t", "y", "\u00e9", "caf", "\u65e5", "\u672c", "\""};
  std::vector<std::string> all = texts;
  lcg r{23};
  for (int t = 0; t < 300; ++t) all.push_back(random_text(r, pieces, 8));
  for (const std::string& text : all) {
    INFO("text '", text, "'");
    const bool expected = has_word(text, words);
    CHECK(accepts(*searched, text) == expected);
    CHECK(pattern_accepts(*schema, text) == expected);
  }
}

TEST_CASE("search mode: 10,000 words (100,000 characters) compile to one loop in linear work") {
  // Refused before: past 40,000 characters the words left were padded with "any text", which
  // subset construction refused by its memory budget (16 million NFA states kept, after 3.4 s);
  // 1,200-5,000 words compiled rule by rule (3,000: 35,621 rules) or were refused by the work
  // budget. The automaton rule's states are the words' prefixes, each one state set of one NFA
  // state: a budget of 100 formed NFA states per character proves the work linear, and its
  // states are at most one per character.
  lcg r{29};
  std::vector<std::pair<std::string, bool>> words;
  std::string alternation;
  std::size_t length = 0;
  for (int k = 0; k < 10'000; ++k) {
    std::string w;
    for (int i = 0; i < 10; ++i) w += char('a' + r.next(26));
    alternation += (k ? "|" : "") + w;
    length += w.size();
    words.push_back({w, false});
  }
  compile_options linear;
  linear.max_subset_work = 100 * length;
  linear.max_subset_size = 10 * length;
  std::shared_ptr<const compiled_grammar> g, schema;
  REQUIRE_NOTHROW(g = search_re("(" + alternation + ")", linear));
  CHECK(g->num_rules() == 1);
  CHECK(g->num_states() <= length + 64);
  REQUIRE_NOTHROW(schema = pattern_schema("(" + alternation + ")", linear));
  CHECK(schema->num_states() <= length + 256);
  for (int t = 0; t < 300; ++t) {
    std::string text;
    for (std::uint32_t i = 0, len = r.next(40); i < len; ++i) text += char('a' + r.next(26));
    if (t % 2) {
      const std::string& w = words[r.next(std::uint32_t(words.size()))].first;
      // a whole word, or one cut by a letter (then only by chance a word)
      text.insert(r.next(std::uint32_t(text.size()) + 1),
                  t % 4 == 1 ? w : w.substr(0, 5) + "-" + w.substr(5));
    }
    INFO("text ", text);
    const bool expected = has_word(text, words);
    CHECK(accepts(*g, text) == expected);
    CHECK(pattern_accepts(*schema, text) == expected);
  }
  // The words tied to the end: taken only where a text ends with one.
  std::shared_ptr<const compiled_grammar> at_end;
  REQUIRE_NOTHROW(at_end = search_re("(?:" + alternation + ")$", linear));
  CHECK(accepts(*at_end, "xyz" + words[17].first));
  CHECK_FALSE(accepts(*at_end, "xyz" + words[17].first + "a"));
  CHECK_FALSE(accepts(*at_end, words[17].first.substr(1)));
}
