// Search mode (JSON Schema `pattern`): a path not tied to the start may begin anywhere, one not
// tied to the end may stop anywhere. A path that starts with literal text is matched by the
// text's KMP automaton instead of "any character"* then the text: subset construction over the
// padded form holds every border of the text read so far in one state set (aaaa...: the square
// of its length in time and memory), the KMP automaton one state.
#include "runtime/grammar/detail/regex_parser.hpp"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace di::grammar::detail {

namespace {

// Longer literals keep the padded form: their automaton would pass the 50,000 states a rule may
// have, and split into sub-rules it would be a chain of parser calls, one per character.
constexpr std::size_t k_max_search_literal = 40'000;

}  // namespace

void regex_parser::note_char(expr_id e, const codepoint_set& set) const {
  const auto& r = set.ranges();
  if (r.size() != 1 || r[0].lo != r[0].hi || (r[0].lo >= 0xD800 && r[0].lo <= 0xDFFF)) return;
  // A sequence's children are what a sequence around it keeps (it flattens them in).
  const std::uint32_t unit = num_units_++;
  const expr& x = g_.at(e);
  if (x.kind != expr_kind::sequence) {
    char_parts_[e] = {unit, 0, 1, r[0].lo};
    return;
  }
  const auto length = std::uint32_t(x.children.size());
  for (std::uint32_t k = 0; k < length; ++k)
    char_parts_[x.children[k]] = {unit, k, length, r[0].lo};
}

regex_parser::literal_start regex_parser::literal_prefix(const std::vector<expr_id>& items) const {
  literal_start out;
  const auto part = [&](std::size_t i) {
    auto it = char_parts_.find(items[i]);
    return it == char_parts_.end() ? nullptr : &it->second;
  };
  std::size_t i = 0;
  while (i < items.size() && out.text.size() <= k_max_search_literal) {
    if (const char_part* p = part(i); p && p->index == 0 && i + p->length <= items.size()) {
      std::uint32_t k = 1;
      for (; k < p->length; ++k) {
        const char_part* q = part(i + k);
        if (!q || q->unit != p->unit || q->index != k) break;
      }
      if (k < p->length) break;
      out.text.push_back(p->cp);
      i += p->length;
      continue;
    }
    // a{n}, (?:ab){n}: a fixed count of literal text
    const expr& x = g_.at(items[i]);
    if (x.kind != expr_kind::repeat || x.min != x.max) break;
    const expr& body = g_.at(x.children[0]);
    const std::vector<expr_id> inner =
        body.kind == expr_kind::sequence ? body.children : std::vector<expr_id>{x.children[0]};
    const literal_start once = literal_prefix(inner);
    if (once.num_items != inner.size() || once.text.size() * x.min > k_max_search_literal) break;
    for (std::uint32_t r = 0; r < x.min; ++r) out.text += once.text;
    ++i;
  }
  out.num_items = i;
  return out;
}

expr_id regex_parser::search(const piece& p) {
  const expr_id pad = g_.repeat(class_expr(codepoint_set::all()), 0, k_unbounded);
  std::vector<expr_id> alts;
  for (int s : {0, 1}) {
    for (int e : {0, 1}) {
      if (!p.cell[s][e]) continue;
      const expr_id x = *p.cell[s][e];
      if (!s) {
        const expr& xe = g_.at(x);
        const std::vector<expr_id> items =
            xe.kind == expr_kind::sequence ? xe.children : std::vector<expr_id>{x};
        const literal_start lit = literal_prefix(items);
        if (lit.text.size() >= 2 && lit.text.size() <= k_max_search_literal) {
          std::vector<expr_id> rest(items.begin() + std::ptrdiff_t(lit.num_items), items.end());
          const bool sink = rest.empty() && !e;  // text, then anything: its first match will do
          if (!e) rest.push_back(pad);
          alts.push_back(search_literal(lit.text, g_.sequence(std::move(rest)), sink));
          continue;
        }
      }
      std::vector<expr_id> items;
      if (!s) items.push_back(pad);
      items.push_back(x);
      if (!e) items.push_back(pad);
      alts.push_back(g_.sequence(std::move(items)));
    }
  }
  return g_.choice(std::move(alts));
}

expr_id regex_parser::search_literal(const std::u32string& w, expr_id tail, bool sink) {
  // State i: the longest prefix of `w` that ends the text read is w[0, i). border[i]: the
  // longest proper prefix of w[0, i) that is also its suffix.
  const std::size_t n = w.size();
  std::vector<std::uint32_t> border(n + 1, 0);
  for (std::size_t i = 2; i <= n; ++i) {
    std::uint32_t k = border[i - 1];
    while (k > 0 && w[i - 1] != w[k]) k = border[k];
    border[i] = w[i - 1] == w[k] ? k + 1 : k;
  }
  // Each state's transitions to a state other than 0 (the others go to 0): a state's are its
  // forward one and its border's, less the character it moves forward on. At most 2n in all
  // (Simon, 1993), so copying them is linear.
  const std::size_t num_states = sink ? n : n + 1;  // with `sink`, state n is `tail` alone
  std::vector<std::vector<std::pair<char32_t, std::uint32_t>>> moves(num_states);
  for (std::size_t i = 0; i < num_states; ++i) {
    if (i < n) moves[i].push_back({w[i], std::uint32_t(i + 1)});
    if (i == 0) continue;
    for (auto [c, t] : moves[border[i]])
      if (i == n || c != w[i]) moves[i].push_back({c, t});
  }
  std::vector<rule_id> states(n + 1);
  for (std::size_t i = 0; i <= n; ++i) states[i] = g_.fresh_rule("search_" + std::to_string(i));
  // One character, and "any other character, then state 0" per set of characters excluded (a
  // rule, so that its automaton is built once however many states use it).
  std::unordered_map<char32_t, expr_id> one;
  std::map<std::u32string, expr_id> restart;
  const auto char_of = [&](char32_t c) {
    auto [it, inserted] = one.emplace(c, 0);
    if (inserted) it->second = class_expr(codepoint_set::single(c));
    return it->second;
  };
  const auto restart_except = [&](const std::vector<std::pair<char32_t, std::uint32_t>>& m) {
    std::u32string key;
    codepoint_set others = codepoint_set::all();
    for (auto [c, t] : m) key.push_back(c), others = others.minus(codepoint_set::single(c));
    std::sort(key.begin(), key.end());
    auto [it, inserted] = restart.emplace(key, 0);
    if (inserted) {
      const rule_id r = g_.fresh_rule("search_restart");
      g_.define_rule(r, g_.sequence({class_expr(others), g_.ref(states[0])}));
      it->second = g_.ref(r);
    }
    return it->second;
  };
  for (std::size_t i = 0; i < num_states; ++i) {
    std::vector<expr_id> alts;
    for (auto [c, t] : moves[i]) alts.push_back(g_.sequence({char_of(c), g_.ref(states[t])}));
    alts.push_back(restart_except(moves[i]));
    if (i == n) alts.push_back(tail);
    g_.define_rule(states[i], g_.choice(std::move(alts)));
  }
  if (sink) g_.define_rule(states[n], tail);
  return g_.ref(states[0]);
}

}  // namespace di::grammar::detail
