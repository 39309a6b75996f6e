// Search mode (JSON Schema `pattern`): a path not tied to the start may begin anywhere, one not
// tied to the end may stop anywhere. Alternatives that start with literal text -- characters,
// (?i) letters, classes such as \d or [aA], as long as the classes of all of them are pairwise
// equal or disjoint -- are matched by the texts' Aho-Corasick automaton (search_automaton.hpp)
// instead of "any character"* then the text: subset construction over the padded form holds
// every prefix of a text that ends the input read in one state set (aaaa..., [aA]...: the square
// of the length in time and memory; 2,000 words: thousands per set), the automaton one state.
#include "runtime/grammar/detail/regex_parser.hpp"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace di::grammar::detail {

namespace {

// Longer literals keep the padded form: their automaton would pass the 50,000 states a rule may
// have, and split into sub-rules it would be a chain of parser calls, one per character. The
// limit is on all alternatives' characters together (the automaton's states).
constexpr std::size_t k_max_search_literal = 40'000;
// The automaton's rules refer to states and to one another about this many times at most: a
// regular component of more is compiled rule by rule (calls), past 2,000,000 refused.
constexpr std::size_t k_max_search_refs = 400'000;
// Symbols in the keys of the rules that exclude some (16 MB).
constexpr std::size_t k_max_search_key_symbols = 4'000'000;

}  // namespace

void regex_parser::note_char(expr_id e, const codepoint_set& set) const {
  // Surrogates have no UTF-8 form: the expression is that of the set's other characters.
  codepoint_set chars = set.minus(codepoint_set::range(0xD800, 0xDFFF));
  if (chars.empty()) return;
  // A sequence's children are what a sequence around it keeps (it flattens them in).
  const auto unit = std::uint32_t(unit_sets_.size());
  unit_sets_.push_back(std::move(chars));
  const expr& x = g_.at(e);
  if (x.kind != expr_kind::sequence) {
    char_parts_[e] = {unit, 0, 1};
    return;
  }
  const auto length = std::uint32_t(x.children.size());
  for (std::uint32_t k = 0; k < length; ++k) char_parts_[x.children[k]] = {unit, k, length};
}

regex_parser::literal_start regex_parser::literal_prefix(const std::vector<expr_id>& items) const {
  literal_start out;
  const auto part = [&](std::size_t i) {
    auto it = char_parts_.find(items[i]);
    return it == char_parts_.end() ? nullptr : &it->second;
  };
  std::size_t i = 0;
  while (i < items.size() && out.units.size() < k_max_search_literal) {
    if (const char_part* p = part(i); p && p->index == 0 && i + p->length <= items.size()) {
      std::uint32_t k = 1;
      for (; k < p->length; ++k) {
        const char_part* q = part(i + k);
        if (!q || q->unit != p->unit || q->index != k) break;
      }
      if (k < p->length) break;
      out.units.push_back(p->unit);
      i += p->length;
      out.cuts.push_back({out.units.size(), i});
      continue;
    }
    // a{n}, (?:ab){n}, \d{4}: a fixed count of literal text
    const expr& x = g_.at(items[i]);
    if (x.kind != expr_kind::repeat || x.min != x.max) break;
    const expr& body = g_.at(x.children[0]);
    const std::vector<expr_id> inner =
        body.kind == expr_kind::sequence ? body.children : std::vector<expr_id>{x.children[0]};
    const literal_start once = literal_prefix(inner);
    if (once.cuts.empty() || once.cuts.back().second != inner.size() ||
        once.units.size() * x.min > k_max_search_literal)
      break;
    for (std::uint32_t r = 0; r < x.min; ++r)
      out.units.insert(out.units.end(), once.units.begin(), once.units.end());
    ++i;
    out.cuts.push_back({out.units.size(), i});
  }
  return out;
}

std::optional<regex_parser::literal_path> regex_parser::literal_path_of(
    const std::vector<expr_id>& items, search_alphabet& alphabet, std::size_t max_symbols) const {
  const literal_start lit = literal_prefix(items);
  literal_path out;
  for (std::uint32_t u : lit.units) {
    if (out.symbols.size() == max_symbols) break;
    const std::optional<std::uint32_t> symbol = alphabet.symbol_of(unit_sets_[u]);
    if (!symbol) break;
    out.symbols.push_back(*symbol);
  }
  std::size_t num_chars = 0, num_items = 0;
  for (auto [chars, after] : lit.cuts)
    if (chars <= out.symbols.size()) num_chars = chars, num_items = after;
  if (num_chars == 0) return std::nullopt;
  out.symbols.resize(num_chars);
  out.rest.assign(items.begin() + std::ptrdiff_t(num_items), items.end());
  return out;
}

expr_id regex_parser::search(const piece& p) {
  const expr_id pad = g_.repeat(class_expr(codepoint_set::all()), 0, k_unbounded);
  std::vector<expr_id> alts;
  // Paths not tied to the start, by whether they are tied to the end: their alternatives that
  // start with literal text, and the others, padded.
  search_alphabet alphabet;
  std::vector<literal_path> literals;
  std::size_t num_chars = 0;
  std::vector<expr_id> padded[2];
  std::size_t num_options[2] = {0, 0};
  for (int e : {0, 1}) {
    if (!p.cell[0][e]) continue;
    const expr_id x = *p.cell[0][e];
    const expr& xe = g_.at(x);
    const std::vector<expr_id> options =
        xe.kind == expr_kind::choice ? xe.children : std::vector<expr_id>{x};
    num_options[e] = options.size();
    for (expr_id a : options) {
      const expr& ae = g_.at(a);
      const std::vector<expr_id> items =
          ae.kind == expr_kind::sequence ? ae.children : std::vector<expr_id>{a};
      std::optional<literal_path> path =
          literal_path_of(items, alphabet, k_max_search_literal - num_chars);
      if (!path) {
        padded[e].push_back(a);
        continue;
      }
      num_chars += path->symbols.size();
      path->to_end = e;
      path->alternative = a;
      literals.push_back(std::move(*path));
    }
  }
  // One character alone is cheap padded (and was always built so).
  if (num_chars >= 2) {
    std::vector<std::vector<std::uint32_t>> texts;
    for (const literal_path& l : literals) texts.push_back(l.symbols);
    const search_automaton a =
        build_search_automaton(texts, std::uint32_t(alphabet.symbols().size()));
    if (std::optional<expr_id> e = search_literals(a, alphabet, literals, pad)) {
      alts.push_back(*e);
      literals.clear();
    }
  }
  for (const literal_path& l : literals) padded[l.to_end].push_back(l.alternative);
  for (int e : {0, 1}) {
    if (padded[e].empty()) continue;
    const expr_id x = padded[e].size() == num_options[e]
                          ? *p.cell[0][e]
                          : g_.choice(std::vector<expr_id>(padded[e]));
    alts.push_back(e ? g_.sequence({pad, x}) : g_.sequence({pad, x, pad}));
  }
  for (int e : {0, 1})
    if (p.cell[1][e]) alts.push_back(e ? *p.cell[1][e] : g_.sequence({*p.cell[1][e], pad}));
  return g_.choice(std::move(alts));
}

std::optional<expr_id> regex_parser::search_literals(const search_automaton& a,
                                                     const search_alphabet& alphabet,
                                                     const std::vector<literal_path>& paths,
                                                     expr_id pad) {
  constexpr std::uint32_t none = search_automaton::k_none;
  const std::size_t n = a.states.size();
  // A state is a sink where a path that nothing but padding follows ends there or at a suffix:
  // every text from there on matches.
  std::vector<std::uint8_t> sink(n, 0);
  for (std::uint32_t s : a.order) {
    const auto& st = a.states[s];
    for (std::uint32_t j : st.ends) sink[s] |= paths[j].rest.empty() && !paths[j].to_end;
    if (st.suffix_end != none) sink[s] |= sink[st.suffix_end];
  }
  const rule_id any = g_.fresh_rule("search_any");
  g_.define_rule(any, pad);
  const expr_id to_any = g_.ref(any);
  // Rules made as they are first referred to, so that states only sinks lead to never are.
  std::vector<rule_id> state_rule(n, none);
  std::vector<std::uint32_t> work;
  const auto state_ref = [&](std::uint32_t s) {
    if (state_rule[s] == none) {
      state_rule[s] = g_.fresh_rule("search_" + std::to_string(s));
      work.push_back(s);
    }
    return g_.ref(state_rule[s]);
  };
  // A symbol of single bytes is one byte set; entering a state on another is a rule shared by
  // every state that moves there, so that the bytes inside a character (UTF-8, JSON escapes)
  // are one path whichever state they start from.
  std::size_t num_refs = 0;         // references made, and symbols in the keys of `except`
  std::size_t num_key_symbols = 0;  // (its memory)
  std::vector<expr_id> symbol_expr(alphabet.symbols().size(), none);
  std::vector<expr_id> enter(n, none);
  const auto enter_ref = [&](std::uint32_t t) {
    ++num_refs;
    const std::uint32_t c = a.states[t].symbol;
    if (symbol_expr[c] == none) symbol_expr[c] = single_bytes(class_expr(alphabet.symbols()[c]));
    if (g_.at(symbol_expr[c]).kind == expr_kind::bytes)
      return g_.sequence({symbol_expr[c], state_ref(t)});
    if (enter[t] == none) {
      const rule_id r = g_.fresh_rule("search_enter");
      g_.define_rule(r, g_.sequence({symbol_expr[c], state_ref(t)}));
      enter[t] = g_.ref(r);
    }
    return enter[t];
  };
  const auto rule_of = [&](std::string_view name, std::vector<expr_id> alts) {
    const rule_id r = g_.fresh_rule(name);
    g_.define_rule(r, g_.choice(std::move(alts)));
    return g_.ref(r);
  };
  // Back to state 0 on a character of no symbol: one rule for all.
  const codepoint_set others = alphabet.covered().complement();
  std::optional<expr_id> restart_other;
  if (!others.empty())
    restart_other = rule_of("search_other", {g_.sequence({class_expr(others), state_ref(0)})});
  // "State f's moves but on the symbols of y": a rule per such pair where f has a child on
  // another symbol (its children, then its failure state's moves but on those symbols too);
  // state 0's moves less y, where the chain ends, are its children and state 0 itself. A
  // state's children but those in y are a few nodes of a balanced tree over them (a rule per
  // node, shared by every y), so that excluding one of 26 children costs 5 references, not 25.
  using symbols = std::vector<std::uint32_t>;
  std::map<std::pair<std::uint32_t, symbols>, expr_id> except;
  std::unordered_map<std::uint64_t, expr_id> child_tree;
  const auto children_ref = [&](auto& self, std::uint32_t f, std::uint32_t lo,
                                std::uint32_t hi) -> expr_id {
    const auto& c = a.states[f].children;
    if (hi - lo == 1) return enter_ref(c[lo].second);
    const std::uint64_t key = std::uint64_t(f) << 40 | std::uint64_t(lo) << 20 | hi;
    if (auto it = child_tree.find(key); it != child_tree.end()) return it->second;
    const std::uint32_t mid = lo + (hi - lo) / 2;
    num_refs += 2;
    const expr_id e = rule_of("search_children", {self(self, f, lo, mid), self(self, f, mid, hi)});
    child_tree.emplace(key, e);
    return e;
  };
  // Appends to `out` the children of f at [lo, hi) but those at `skip` (sorted indices).
  const auto children_but = [&](auto& self, std::uint32_t f, std::uint32_t lo, std::uint32_t hi,
                                const std::vector<std::uint32_t>& skip,
                                std::vector<expr_id>& out) -> void {
    auto it = std::lower_bound(skip.begin(), skip.end(), lo);
    if (it == skip.end() || *it >= hi) return out.push_back(children_ref(children_ref, f, lo, hi));
    if (hi - lo == 1) return;
    const std::uint32_t mid = lo + (hi - lo) / 2;
    self(self, f, lo, mid, skip, out);
    self(self, f, mid, hi, skip, out);
  };
  const auto moves_except = [&](std::uint32_t f, symbols y) {
    struct link {
      std::uint32_t f;
      symbols y;
    };
    std::vector<link> chain;  // from f along its failure states, up to one made already
    std::optional<expr_id> made;
    for (;;) {
      if (auto it = except.find({f, y}); it != except.end()) {
        made = it->second;
        break;
      }
      chain.push_back({f, y});
      if (f == 0) break;
      for (auto [c, t] : a.states[f].children) y.push_back(c);
      std::sort(y.begin(), y.end());
      y.erase(std::unique(y.begin(), y.end()), y.end());
      f = a.states[f].fail;
    }
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      std::vector<expr_id> alts;
      const auto& children = a.states[it->f].children;
      std::vector<std::uint32_t> skip;  // indices of the children on symbols of y
      for (std::uint32_t c : it->y) {
        auto at = std::lower_bound(children.begin(), children.end(),
                                   std::pair<std::uint32_t, std::uint32_t>{c, 0});
        if (at != children.end() && at->first == c)
          skip.push_back(std::uint32_t(at - children.begin()));
      }
      if (skip.size() < children.size())
        children_but(children_but, it->f, 0, std::uint32_t(children.size()), skip, alts);
      num_refs += alts.size();
      num_key_symbols += it->y.size();
      if (it->f != 0) {
        if (alts.empty()) {  // nothing of its own: its failure state's rule
          ++num_refs;
          except.emplace(std::pair{it->f, std::move(it->y)}, *made);
          continue;
        }
        alts.push_back(*made);
      } else {
        codepoint_set moved;  // the characters state 0 does not move back on
        for (auto [c, t] : children) moved.add(alphabet.symbols()[c]);
        for (std::uint32_t c : it->y) moved.add(alphabet.symbols()[c]);
        if (const codepoint_set back = alphabet.covered().minus(moved); !back.empty())
          alts.push_back(g_.sequence({class_expr(back), state_ref(0)}));
        if (restart_other) alts.push_back(*restart_other);
      }
      num_refs += 2;
      made = rule_of("search_moves", std::move(alts));
      except.emplace(std::pair{it->f, std::move(it->y)}, *made);
    }
    return *made;
  };
  // What follows the paths that end at state t or at a suffix of it: a rule per such state,
  // made shallowest first along the chain of suffixes (which may be as long as a literal).
  std::vector<expr_id> ends(n, none);
  const auto ends_ref = [&](std::uint32_t t) {
    std::vector<std::uint32_t> chain;
    for (std::uint32_t u = t; u != none && ends[u] == none; u = a.states[u].suffix_end)
      chain.push_back(u);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const auto& st = a.states[*it];
      std::vector<expr_id> tails;
      for (std::uint32_t j : st.ends) {
        std::vector<expr_id> tail = paths[j].rest;
        if (!paths[j].to_end) tail.push_back(to_any);
        tails.push_back(g_.sequence(std::move(tail)));
      }
      if (st.suffix_end != none) tails.push_back(ends[st.suffix_end]);
      ends[*it] = rule_of("search_end", std::move(tails));
    }
    return ends[t];
  };
  const expr_id start = state_ref(0);
  std::size_t k = 0;
  for (; k < work.size() && num_refs <= k_max_search_refs &&
         num_key_symbols <= k_max_search_key_symbols;
       ++k) {
    const std::uint32_t s = work[k];
    const auto& st = a.states[s];
    if (sink[s]) {
      g_.define_rule(state_rule[s], to_any);
      continue;
    }
    if (s == 0) {
      g_.define_rule(state_rule[s], moves_except(0, {}));
      continue;
    }
    std::vector<expr_id> alts;
    symbols own;
    for (auto [c, t] : st.children) alts.push_back(enter_ref(t)), own.push_back(c);
    alts.push_back(moves_except(st.fail, std::move(own)));
    const std::uint32_t end = st.ends.empty() ? st.suffix_end : s;
    if (end != none) alts.push_back(ends_ref(end));
    g_.define_rule(state_rule[s], g_.choice(std::move(alts)));
  }
  if (k == work.size()) return start;
  // Too many references (the moves of many states that differ in what they exclude): the
  // rules made stay unused; those only declared are given a body.
  for (; k < work.size(); ++k) g_.define_rule(state_rule[work[k]], g_.nothing());
  return std::nullopt;
}

expr_id regex_parser::single_bytes(expr_id e) {
  const expr& x = g_.at(e);
  if (x.kind != expr_kind::choice) return e;
  byte_set bytes;
  for (expr_id c : x.children) {
    if (g_.at(c).kind != expr_kind::bytes) return e;
    bytes |= g_.at(c).bytes;
  }
  return g_.bytes(bytes);
}

}  // namespace di::grammar::detail
