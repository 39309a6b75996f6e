// The token matcher against a brute-force reference: at every step of random walks through
// several grammars, the mask must equal "accept each token, then roll it back". Also
// rollback, stop tokens, termination and forced continuations.
#include "common/error.hpp"
#include "runtime/grammar/grammar_matcher.hpp"
#include "runtime/grammar/json_schema.hpp"
#include "runtime/grammar/response_format.hpp"
#include "runtime/grammar/state_signature.hpp"
#include "runtime/grammar/token_class_cache.hpp"
#include "tests/runtime/grammar/conformance_util.hpp"
#include "tests/runtime/grammar/grammar_test_util.hpp"
#include "tests/test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>

using namespace di::grammar;

namespace {

const char* k_json_ebnf = R"(
root ::= basic_array | basic_object
basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object
basic_number ::= ("0" | "-"? [1-9] [0-9]*) ("." [0-9]+)? ([eE] [+-]? [0-9]+)?
basic_string ::= (([\"] basic_string_1 [\"]))
basic_string_1 ::= "" | [^"\\\x00-\x1F] basic_string_1 | "\\" escape basic_string_1
escape ::= ["\\/bfnrt] | "u" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]
basic_boolean ::= "true" | "false"
basic_null ::= "null"
basic_array ::= "[" ("" | ws basic_any (ws "," ws basic_any)*) ws "]"
basic_object ::= "{" ("" | ws basic_string ws ":" ws basic_any ( ws "," ws basic_string ws ":" ws basic_any)*) ws "}"
ws ::= [ \n\t]*
)";

/// A small vocabulary: every byte of `alphabet` alone, plus random strings over it.
std::vector<std::string> random_vocab(const std::string& alphabet, std::size_t n,
                                      std::mt19937& rng) {
  std::vector<std::string> v;
  for (char c : alphabet) v.push_back(std::string(1, c));
  v.push_back("\xC3\xA9");  // é
  v.push_back("\xE4\xB8");  // the first two bytes of a CJK character
  v.push_back("\xAD");      // a lone continuation byte
  std::uniform_int_distribution<std::size_t> len(2, 6), pick(0, alphabet.size() - 1);
  while (v.size() < n) {
    std::string s;
    for (std::size_t k = len(rng); k > 0; --k) s.push_back(alphabet[pick(rng)]);
    v.push_back(s);
  }
  v.push_back("");  // id with no text (like a special token)
  return v;
}

std::vector<std::uint32_t> brute_mask(grammar_matcher& m, const token_vocabulary& v) {
  std::vector<std::uint32_t> mask(v.mask_words(), 0);
  for (std::size_t id = 0; id < v.mask_size(); ++id) {
    if (m.accept_token(token_id(id))) {
      mask[id >> 5] |= 1u << (id & 31);
      m.rollback(1);
    }
  }
  return mask;
}

/// Random walk: at each step compare masks, then take a random allowed token.
void check_walks(const std::shared_ptr<const token_grammar>& tg, int walks, int steps, std::mt19937& rng) {
  const auto* vocab = &tg->vocabulary();
  for (int w = 0; w < walks; ++w) {
    grammar_matcher m(tg);
    for (int s = 0; s < steps; ++s) {
      std::vector<std::uint32_t> mask(vocab->mask_words());
      m.fill_next_token_mask(mask);
      auto ref = brute_mask(m, *vocab);
      REQUIRE(mask == ref);
      std::vector<token_id> allowed;
      for (std::size_t id = 0; id < vocab->mask_size(); ++id)
        if ((mask[id >> 5] >> (id & 31)) & 1) allowed.push_back(token_id(id));
      if (allowed.empty() || m.is_terminated()) break;
      token_id pick =
          allowed[std::uniform_int_distribution<std::size_t>(0, allowed.size() - 1)(rng)];
      REQUIRE(m.accept_token(pick));
    }
  }
}

void check_walks(const std::string& grammar_text, const std::string& alphabet, int walks,
                 int steps) {
  std::mt19937 rng(1234);
  auto vocab = token_vocabulary::from_tokens(random_vocab(alphabet, 400, rng), {401}, 403);
  auto tg = token_grammar::create(test::compile_ebnf(grammar_text), vocab, /*precompute=*/false);
  check_walks(tg, walks, steps, rng);
}

}  // namespace

TEST_CASE("masks equal the brute-force reference on a recursive JSON grammar") {
  check_walks(k_json_ebnf, "{}[],: \"\\ntu0123456789.-eEabcfl/", 12, 40);
}

TEST_CASE("token classes shared between JSON Schema grammars give the brute-force masks") {
  // Equivalent states (state_signature) share one classification, within a grammar and across
  // grammars through the token_class_cache: every mask must still be exact.
  std::mt19937 rng(99);
  auto vocab = token_vocabulary::from_tokens(random_vocab("{}[],:\"\\ab0123456789.-tfnrue", 400, rng), {401}, 403);
  auto shared = std::make_shared<token_class_cache>();
  const char* schemas[] = {
      R"({"type":"object","properties":{"a":{"type":"string","maxLength":40},"b":{"type":"integer","minimum":-5,"maximum":300}},"required":["a"]})",
      R"({"type":"object","properties":{"a":{"type":"string","maxLength":40},"c":{"enum":["ab","ba",1,true]}}})",
      R"({"type":"array","items":{"type":"string","minLength":2,"maxLength":300},"maxItems":4})",
      R"({"anyOf":[{"type":"number"},{"type":"array","items":{"$ref":"#"}}]})"};
  for (const char* text : schemas) {
    auto tg = token_grammar::create(compiled_grammar::compile(compile_json_schema_text(text).g), vocab,
                                    /*precompute=*/false, shared);
    CHECK(tg->num_distinct_states() <= tg->automaton().num_states());
    check_walks(tg, 6, 60, rng);
  }
  CHECK(shared->size() > 0);
}

TEST_CASE("grammars whose states agree for a few rounds only do not share token classes") {
  // Refinement settles after two rounds in both grammars, with equal signatures for their
  // start states, yet "aab" is allowed only by the first and "aaa" only by the second: a
  // cross-grammar key that is only a bisimulation signature would hand the second grammar the
  // first one's classes. The same pairs with longer prefixes and other alphabets too.
  std::vector<std::string> tokens = {"a", "b", "c", "aa", "ab", "aab", "aaa", "aabb", "aaaa",
                                     "aaab", "abc", "aac", "aaac", "ccc", "cc"};
  tokens.push_back("");
  auto vocab = token_vocabulary::from_tokens(tokens, {std::int32_t(tokens.size())},
                                             std::int32_t(tokens.size()) + 2);
  const std::pair<const char*, const char*> pairs[] = {
      {R"(root ::= "aa" "b"*)", R"(root ::= "aa" "a"*)"},
      {R"(root ::= "aaa" "b"*)", R"(root ::= "aaa" "c"*)"},
      {R"(root ::= "a" x
x ::= "a" "b"*)", R"(root ::= "a" y
y ::= "a" "a"*)"}};
  std::mt19937 rng(7);
  for (const auto& [first, second] : pairs) {
    auto shared = std::make_shared<token_class_cache>();
    auto g1 = token_grammar::create(test::compile_ebnf(first), vocab, /*precompute=*/true, shared);
    auto g2 = token_grammar::create(test::compile_ebnf(second), vocab, /*precompute=*/true, shared);
    for (const auto& tg : {g1, g2}) check_walks(tg, 8, 8, rng);
    grammar_matcher m1(g1), m2(g2);
    std::vector<std::uint32_t> mask1(vocab->mask_words()), mask2(vocab->mask_words());
    m1.fill_next_token_mask(mask1);
    m2.fill_next_token_mask(mask2);
    CHECK(mask1 != mask2);
  }
}

TEST_CASE("precomputed masks with token-bounded state classes equal the reference on jsonschemabench") {
  // The fast path (token classes of every state computed at compile time, states merged when
  // they agree for inputs as long as the longest token, uncertain tokens checked against the
  // stack) against the plain reference mask (accept each token, roll back), bit for bit, at
  // every step of random walks. Tokens of at most 6 bytes make the merging aggressive: a
  // string with 20 characters left and one with 200 left share one classification.
  std::mt19937 rng(2024);
  auto vocab = token_vocabulary::from_tokens(random_vocab("{}[],:\"\\ab0123456789.-+eEtfnrulsx ", 400, rng), {401}, 403);
  REQUIRE(vocab->max_depth() <= 6);
  std::size_t schemas = 0, merged = 0;
  for (const auto& row : test::read_jsonl_ordered(di::test::shared_path("testdata/jsonschema/jsonschemabench_public.jsonl"))) {
    if (schemas == 40) break;
    std::shared_ptr<const compiled_grammar> cg;
    try {
      cg = compiled_grammar::compile(compile_json_schema(row["schema"], {}).g);
    } catch (const di::error&) {
      continue;
    }
    if (cg->num_states() > 20'000) continue;
    ++schemas;
    auto tg = token_grammar::create(cg, vocab, /*precompute=*/true);
    merged += tg->automaton().num_states() - tg->num_distinct_states();
    check_walks(tg, 3, 40, rng);
  }
  CHECK(schemas == 40);
  CHECK(merged > 0);
}

TEST_CASE("states counting string characters merge when no token can tell them apart") {
  std::mt19937 rng(5);
  auto vocab = token_vocabulary::from_tokens(random_vocab("\"ab\\u0", 200, rng), {201}, 203);
  auto tg = token_grammar::create(
      compiled_grammar::compile(compile_json_schema_text(R"({"type":"string","minLength":3,"maxLength":300})").g),
      vocab, /*precompute=*/true);
  // About 300 positions, but only those within a token's length of either bound differ.
  CHECK(tg->num_distinct_states() * 4 < tg->automaton().num_states());
  check_walks(tg, 4, 120, rng);
}

TEST_CASE("masks equal the brute-force reference on left recursion and ambiguity") {
  check_walks("root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]+ | \"(\" expr \")\"",
              "0123456789+()", 10, 30);
  check_walks("root ::= (a | b)* \"x\"\na ::= \"ab\" | \"a\"\nb ::= \"b\" | \"bb\"", "abx", 10, 20);
  check_walks("root ::= [a-z]{2,5} (\",\" [a-z]{2,5}){0,3}", "abz,", 10, 20);
}

TEST_CASE("rollback restores the exact state; stop tokens only at the end") {
  auto vocab = token_vocabulary::from_tokens({"a", "b", "ab", "c", ""}, {4});
  auto tg = token_grammar::create(test::compile_ebnf("root ::= \"a\" \"b\"+ \"c\"?"), vocab);
  grammar_matcher m(tg);
  CHECK_FALSE(m.accept_token(4));  // stop before the text is complete
  CHECK(m.accept_token(2));        // "ab"
  CHECK(m.is_accepting());
  CHECK_FALSE(m.is_terminated());  // "c" or more "b" may follow
  CHECK(m.accept_token(1));
  CHECK(m.accept_token(3));
  CHECK(m.is_terminated());
  m.rollback(2);
  CHECK(m.num_tokens() == 1);
  CHECK_FALSE(m.accept_token(0));
  CHECK(m.accept_token(4));
  CHECK(m.is_terminated());
  CHECK_FALSE(m.accept_token(1));
  m.rollback(1);
  CHECK(m.accept_token(1));
}

TEST_CASE("forced continuations stop where the grammar branches") {
  auto vocab = token_vocabulary::from_tokens({"x"}, {});
  auto tg =
      token_grammar::create(test::compile_ebnf(R"(root ::= "{\"name\": " ("1" | "2") "}")"), vocab);
  grammar_matcher m(tg);
  CHECK(m.forced_bytes() == "{\"name\": ");
  CHECK(m.accept_bytes("{\"name\": 2"));
  CHECK(m.forced_bytes() == "}");
  CHECK(m.num_tokens() == 1);
}

TEST_CASE("grammar_cache keeps the most recently used grammars up to its capacity") {
  std::vector<std::string> tokens = {"a", "b", "1", "2", "\"", "{", "}"};
  tokens.push_back("");
  auto vocab = token_vocabulary::from_tokens(tokens, {std::int32_t(tokens.size())},
                                             std::int32_t(tokens.size()) + 2);
  grammar_cache cache(2);
  auto regex = [](const char* pattern) {
    return parse_inline_response_format(std::string("regex:") + pattern);
  };
  auto a = cache.get(regex("a+"), vocab);
  CHECK(cache.get(regex("a+"), vocab) == a);  // a hit: the same compiled grammar
  auto b = cache.get(regex("b+"), vocab);
  CHECK(cache.size() == 2);
  CHECK(cache.get(regex("a+"), vocab) == a);  // a is now the most recent: b goes next
  auto c = cache.get(regex("[12]+"), vocab);
  CHECK(cache.size() == 2);
  CHECK(cache.get(regex("a+"), vocab) == a);
  CHECK(cache.get(regex("[12]+"), vocab) == c);
  CHECK(cache.get(regex("b+"), vocab) != b);  // evicted: compiled again
  CHECK(cache.size() == 2);
  // An evicted grammar stays usable by whoever holds it.
  grammar_matcher m(b);
  CHECK(m.accept_token(1));
}

TEST_CASE("classify_states: a lazy grammar classified ahead gives the precomputed classes") {
  std::mt19937 rng(77);
  auto vocab = token_vocabulary::from_tokens(random_vocab("{}[],:\"ab01 ", 300, rng), {301}, 303);
  auto eager = token_grammar::create(test::compile_ebnf(k_json_ebnf), vocab, /*precompute=*/true);
  const std::size_t all = eager->num_classified();
  REQUIRE(all > 1);
  auto lazy = token_grammar::create(test::compile_ebnf(k_json_ebnf), vocab, /*precompute=*/false);
  CHECK(lazy->num_classified() == 0);
  // A budget of 0 s stops after the first state it classifies.
  CHECK_FALSE(lazy->classify_states(0.0));
  CHECK(lazy->num_classified() == 1);
  CHECK(lazy->classify_states(60.0));
  CHECK(lazy->num_classified() == all);
  CHECK(lazy->classify_states(0.0));  // nothing left: done at once
  // The classes are the same: masks along random walks equal the brute-force reference.
  check_walks(lazy, 20, 30, rng);
}

TEST_CASE("grammar_cache::prepare classifies the grammar's states within its budget") {
  std::mt19937 rng(78);
  auto vocab = token_vocabulary::from_tokens(random_vocab("{}[],:\"ab01 ", 300, rng), {301}, 303);
  const response_format f = parse_inline_response_format(std::string("ebnf:") + k_json_ebnf);
  grammar_cache none(4, 0.0);
  CHECK(none.prepare(f, vocab)->num_classified() == 0);  // 0: all on first use
  grammar_cache ahead(4, 60.0);
  auto tg = ahead.prepare(f, vocab);
  CHECK(tg->num_classified() ==
        token_grammar::create(test::compile_ebnf(k_json_ebnf), vocab)->num_classified());
  CHECK(ahead.get(f, vocab) == tg);  // prepared into the cache that steps read
}

TEST_CASE("grammar_cache::find returns what get compiled, and never compiles") {
  std::vector<std::string> tokens = {"a", "b", ""};
  auto vocab = token_vocabulary::from_tokens(tokens, {3}, 5);
  grammar_cache cache(2);
  const response_format f = parse_inline_response_format("regex:a+");
  CHECK(cache.find(f, vocab) == nullptr);
  CHECK(cache.size() == 0);
  auto g = cache.get(f, vocab);
  CHECK(cache.find(f, vocab) == g);
  CHECK(cache.find(parse_inline_response_format("regex:b+"), vocab) == nullptr);
  CHECK(cache.size() == 1);
}

TEST_CASE("grammar_cache: what prepare's budget leaves is classified in the background") {
  std::mt19937 rng(79);
  auto vocab = token_vocabulary::from_tokens(random_vocab("{}[],:\"ab01 ", 300, rng), {301}, 303);
  const response_format f = parse_inline_response_format(std::string("ebnf:") + k_json_ebnf);
  const std::size_t all =
      token_grammar::create(test::compile_ebnf(k_json_ebnf), vocab)->num_classified();
  REQUIRE(all > 1);
  grammar_cache cache(4, 1e-9);  // a budget that ends after the first state
  auto tg = cache.prepare(f, vocab);
  for (int i = 0; i < 6000 && (tg->num_classified() < all || cache.num_warming() > 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(tg->num_classified() == all);
  CHECK(cache.num_warming() == 0);
  check_walks(tg, 10, 30, rng);  // the background's classes give the reference masks
}

namespace {

/// Moore's refinement written plainly, as the reference for token_equivalence_classes: round 0
/// splits states by finality, their rule's follow set and end flag, and their calls of nullable
/// rules (exact callee start, exact return target); each round then splits classes by the class
/// reached on each of the 256 bytes (or none) and by the calls of rules that read a byte (exact
/// callee start, class of the return target), for `rounds` rounds or until a round splits
/// nothing. Returns, per state, the first state of its class.
std::vector<state_id> moore_token_classes(const compiled_grammar& g,
                                          const std::vector<state_signature>& exact,
                                          std::uint32_t rounds) {
  const std::size_t n = g.num_states();
  auto id = [&](state_id s) {
    return exact.empty() ? std::pair<std::uint64_t, std::uint64_t>{s, ~std::uint64_t(s)}
                         : std::pair<std::uint64_t, std::uint64_t>{exact[s].a, exact[s].b};
  };
  auto number = [&](const std::vector<std::vector<std::uint64_t>>& keys) {
    std::map<std::vector<std::uint64_t>, std::uint32_t> ids;
    std::vector<std::uint32_t> cls(n);
    for (state_id s = 0; s < n; ++s)
      cls[s] = ids.emplace(keys[s], std::uint32_t(ids.size())).first->second;
    return std::pair{cls, ids.size()};
  };
  std::vector<std::vector<std::uint64_t>> keys(n);
  for (state_id s = 0; s < n; ++s) {
    const rule_id r = g.rule_of(s);
    std::vector<std::uint64_t>& k = keys[s];
    k = {g.is_final(s), g.follow_end(r)};
    k.insert(k.end(), g.follow(r).words.begin(), g.follow(r).words.end());
    std::vector<std::array<std::uint64_t, 4>> calls;
    for (const call_edge& c : g.calls(s))
      if (g.nullable(c.rule))
        calls.push_back({id(g.start(c.rule)).first, id(g.start(c.rule)).second, id(c.target).first,
                         id(c.target).second});
    std::sort(calls.begin(), calls.end());
    for (const auto& c : calls) k.insert(k.end(), c.begin(), c.end());
  }
  auto [cls, count] = number(keys);
  for (std::uint32_t round = 0; round < rounds; ++round) {
    for (state_id s = 0; s < n; ++s) {
      std::vector<std::uint64_t>& k = keys[s];
      k.assign(1, cls[s]);
      for (int b = 0; b < 256; ++b) {
        const state_id t = g.next(s, std::uint8_t(b));
        k.push_back(t == k_dead_state ? ~std::uint64_t(0) : cls[t]);
      }
      std::vector<std::array<std::uint64_t, 3>> calls;
      for (const call_edge& c : g.calls(s))
        if (!g.nullable(c.rule))
          calls.push_back({id(g.start(c.rule)).first, id(g.start(c.rule)).second, cls[c.target]});
      std::sort(calls.begin(), calls.end());
      for (const auto& c : calls) k.insert(k.end(), c.begin(), c.end());
    }
    auto [next, next_count] = number(keys);
    cls = next;
    if (next_count == count) break;
    count = next_count;
  }
  std::vector<state_id> first(count, k_dead_state), rep(n);
  for (state_id s = 0; s < n; ++s) {
    if (first[cls[s]] == k_dead_state) first[cls[s]] = s;
    rep[s] = first[cls[s]];
  }
  return rep;
}

/// Grammars for the state-class checks: unanchored word lists over small alphabets (the search
/// automaton, one rule, where states agree for a few bytes and split late), anchored ones, and
/// grammars with calls (recursive EBNF, a JSON Schema object).
std::vector<std::shared_ptr<const compiled_grammar>> varied_grammars() {
  std::mt19937 rng(106);
  std::vector<std::shared_ptr<const compiled_grammar>> grammars;
  for (int list = 0; list < 12; ++list) {
    const std::vector<std::string> alphabet =
        list % 3 == 0   ? std::vector<std::string>{"a", "b"}
        : list % 3 == 1 ? std::vector<std::string>{"a", "b", "c"}
                        : std::vector<std::string>{"a", "b", "c", "d", "x", "y", "\xC3\xA9"};
    std::uniform_int_distribution<std::size_t> len(1, 9), words(2, 60),
        pick(0, alphabet.size() - 1);
    std::string pattern = "(";
    for (std::size_t w = words(rng); w > 0; --w) {
      for (std::size_t k = len(rng); k > 0; --k) pattern += alphabet[pick(rng)];
      pattern += w > 1 ? "|" : ")";
    }
    if (list % 2 == 0) grammars.push_back(test::compile_re(pattern, {.search = true}));
    grammars.push_back(test::pattern_schema(list % 4 == 1 ? "^" + pattern + "x{2,7}$" : pattern));
  }
  grammars.push_back(test::compile_ebnf(k_json_ebnf));
  grammars.push_back(test::compile_ebnf(
      "root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]+ | \"(\" expr \")\""));
  grammars.push_back(compiled_grammar::compile(
      compile_json_schema_text(
          R"({"type":"object","properties":{"a":{"type":"string","maxLength":40},"b":{"type":"array","items":{"type":"integer"}}},"required":["a"]})")
          .g));
  return grammars;
}

}  // namespace

TEST_CASE("token-bounded state classes equal plain Moore refinement") {
  // token_equivalence_classes refines only the states a split can affect, with keys over the
  // grammar's byte classes; the reference looks at every state and every byte each round. Their
  // partitions must be equal (masks are classified once per class), for the exact signatures and
  // without them, and for round limits that cut the refinement short.
  const auto grammars = varied_grammars();
  std::size_t merged = 0, states = 0;
  for (const auto& g : grammars) {
    const std::vector<state_signature> exact = compute_state_signatures(*g);
    REQUIRE(exact.size() == g->num_states());
    for (std::uint32_t rounds : {1u, 3u, 6u, 40u}) {
      CAPTURE(rounds);
      CAPTURE(g->num_states());
      const std::vector<state_id> rep = token_equivalence_classes(*g, exact, rounds);
      REQUIRE(rep == moore_token_classes(*g, exact, rounds));
      REQUIRE(token_equivalence_classes(*g, {}, rounds) == moore_token_classes(*g, {}, rounds));
      for (state_id s = 0; s < g->num_states(); ++s) merged += rep[s] != s;
      states += g->num_states();
    }
  }
  MESSAGE(grammars.size() << " grammars, " << states << " states, " << merged << " merged");
  CHECK(merged > 0);
}

TEST_CASE("sharing keys: a state has one exactly when its reachable part is small enough") {
  // sharing_keys gives a state a key when the classes of exact signatures it reaches (through
  // bytes, callee starts and return targets) are at most max_classes, and stops a walk early at
  // a class already known to reach more. The reference counts the reached classes state by state.
  const auto grammars = varied_grammars();
  std::size_t with = 0, without = 0;
  for (const auto& g : grammars) {
    const std::size_t n = g->num_states();
    const std::vector<state_signature> exact = compute_state_signatures(*g);
    REQUIRE(exact.size() == n);
    std::vector<std::uint8_t> byte_of_class(std::size_t(g->num_byte_classes()));
    for (int b = 255; b >= 0; --b) byte_of_class[g->byte_class(std::uint8_t(b))] = std::uint8_t(b);
    // Whether the classes reached from `s` (itself included) are at most `limit`.
    auto small = [&](state_id s, std::size_t limit) {
      std::vector<bool> seen(n, false);
      std::unordered_set<state_signature, state_signature_hash> classes;
      std::vector<state_id> frontier{s};
      seen[s] = true;
      while (!frontier.empty()) {
        const state_id x = frontier.back();
        frontier.pop_back();
        classes.insert(exact[x]);
        if (classes.size() > limit) return false;
        auto go = [&](state_id t) {
          if (t != k_dead_state && !seen[t]) {
            seen[t] = true;
            frontier.push_back(t);
          }
        };
        for (std::uint8_t b : byte_of_class) go(g->next(x, b));
        for (const call_edge& c : g->calls(x)) {
          go(g->start(c.rule));
          go(c.target);
        }
      }
      return true;
    };
    for (std::size_t limit : {3u, 30u, 200u}) {
      CAPTURE(limit);
      CAPTURE(n);
      std::vector<bool> wanted(n);
      for (state_id s = 0; s < n; ++s) wanted[s] = s % 3 != 1;
      const auto keys = sharing_keys(*g, exact, wanted, limit);
      REQUIRE(keys.size() == n);
      for (state_id s = 0; s < n; ++s) {
        if (limit == 200 && s % 5 != 0) continue;  // the reference is slow at 200
        CAPTURE(s);
        REQUIRE(keys[s].has_value() == (wanted[s] && small(s, limit)));
        (keys[s] ? with : without) += wanted[s];
      }
    }
  }
  MESSAGE(with << " states with a key, " << without << " without");
  CHECK(with > 0);
  CHECK(without > 0);
}

TEST_CASE("state signatures are equal exactly for bisimilar states") {
  // compute_state_signatures hashes each state's finality, rule follow set, byte transitions and
  // calls, round after round; equal signatures must mean the same partition as plain refinement
  // to its fixpoint (over all 256 bytes, calls as (callee start, return target) classes).
  std::size_t merged = 0;
  for (const auto& g : varied_grammars()) {
    const std::size_t n = g->num_states();
    const std::vector<state_signature> exact = compute_state_signatures(*g);
    REQUIRE(exact.size() == n);
    std::vector<std::vector<std::uint64_t>> keys(n);
    for (state_id s = 0; s < n; ++s) {
      const rule_id r = g->rule_of(s);
      keys[s] = {g->is_final(s), g->follow_end(r)};
      keys[s].insert(keys[s].end(), g->follow(r).words.begin(), g->follow(r).words.end());
    }
    std::vector<std::uint32_t> cls(n);
    std::size_t count = 0;
    for (;;) {
      std::map<std::vector<std::uint64_t>, std::uint32_t> ids;
      for (state_id s = 0; s < n; ++s)
        cls[s] = ids.emplace(keys[s], std::uint32_t(ids.size())).first->second;
      if (ids.size() == count) break;
      count = ids.size();
      for (state_id s = 0; s < n; ++s) {
        std::vector<std::uint64_t>& k = keys[s];
        k.assign(1, cls[s]);
        for (int b = 0; b < 256; ++b) {
          const state_id t = g->next(s, std::uint8_t(b));
          k.push_back(t == k_dead_state ? ~std::uint64_t(0) : cls[t]);
        }
        std::vector<std::pair<std::uint64_t, std::uint64_t>> calls;
        for (const call_edge& c : g->calls(s))
          calls.push_back({cls[g->start(c.rule)], cls[c.target]});
        std::sort(calls.begin(), calls.end());
        for (const auto& [start, target] : calls) k.insert(k.end(), {start, target});
      }
    }
    // The same partition: each class of one is one class of the other.
    std::unordered_map<state_signature, std::uint32_t, state_signature_hash> class_of_signature;
    std::map<std::uint32_t, state_signature> signature_of_class;
    for (state_id s = 0; s < n; ++s) {
      CAPTURE(s);
      REQUIRE(class_of_signature.emplace(exact[s], cls[s]).first->second == cls[s]);
      REQUIRE(signature_of_class.emplace(cls[s], exact[s]).first->second == exact[s]);
    }
    merged += n - count;
  }
  CHECK(merged > 0);
}
