// Search mode (JSON Schema `pattern`): a path not tied to the start may begin anywhere, one not
// tied to the end may stop anywhere. Alternatives that start with literal text -- characters,
// (?i) letters, classes such as \d or [aA], as long as the classes of all of them are pairwise
// equal or disjoint -- are matched by the texts' Aho-Corasick automaton (search_automaton.hpp)
// instead of "any character"* then the text: subset construction over the padded form holds
// every prefix of a text that ends the input read in one state set (aaaa..., [aA]...: the square
// of the length in time and memory; 2,000 words: past the work budget), the automaton one state.
// The automaton goes to the compiler as a rule's symbol_automaton (grammar.hpp: its moves written
// out, a row per state), which it builds state for state: 10,000 words of 10 letters
// (100,000 characters) are one rule of 68,000 states in ~1 s. Written as right-linear rules
// instead (search_rules, where the rows would be too large: thousands of distinct characters),
// the rules outgrow a regular component past ~1,200 words and compile rule by rule.
// First each path loses the optional text at its padded ends, which the padding takes in
// (search_trim): X{m,n} there is X{m}, X* nothing; an IBAN pattern,
// [A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}, was refused by the work budget with its 20 optional copies, now
// 312 states in 0.2 s.
#include "runtime/grammar/compile_interrupt.hpp"
#include "runtime/grammar/detail/regex_parser.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace di::grammar::detail {

namespace {

// Longer literals keep the padded form (which the work budget refuses). The limit is on all
// alternatives' characters together (the automaton's states); the automaton's DFA may have that
// many states besides the max_rule_states a rule may have.
constexpr std::size_t k_max_search_literal = 400'000;
// The automaton as a rule's symbol_automaton: its moves written out, at most this many (states
// times symbols: 4 bytes each); more (thousands of distinct characters) are written as rules.
constexpr std::size_t k_max_search_moves = 16'000'000;
// Written as rules past this many characters, the automaton would pass the 50,000 states a rule
// may have, and split into sub-rules it would be a chain of parser calls, one per character.
constexpr std::size_t k_max_search_rules_literal = 40'000;
// The automaton's rules refer to states and to one another about this many times at most: a
// regular component of more is compiled rule by rule (calls), past 2,000,000 refused.
constexpr std::size_t k_max_search_refs = 400'000;

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

expr_id regex_parser::search_trim(expr_id e, bool at_end,
                                  std::unordered_map<expr_id, bool>& nullable) {
  // Sound where the padding holds every text the cut-off parts match: they are whole
  // characters (repeats and optional parts of a pattern, never inside one character's bytes,
  // which a repeat with min == max and choices of bytes spell, left as they are).
  const auto empty_ok = [&](expr_id id) {
    auto it = nullable.find(id);
    return it != nullable.end() ? it->second
                                : nullable.emplace(id, matches_empty(id)).first->second;
  };
  if (empty_ok(e)) return g_.empty();
  const expr x = g_.at(e);  // a copy: the builders below may grow the pool
  switch (x.kind) {
    case expr_kind::sequence: {
      // Optional items at that end go; the first other one is cut in turn (one is left: the
      // sequence does not match empty).
      std::vector<expr_id> items = x.children;
      if (!at_end) std::reverse(items.begin(), items.end());
      while (empty_ok(items.back())) items.pop_back();
      const expr_id cut = search_trim(items.back(), at_end, nullable);
      if (cut == items.back() && items.size() == x.children.size()) return e;
      items.back() = cut;
      if (!at_end) std::reverse(items.begin(), items.end());
      return g_.sequence(std::move(items));
    }
    case expr_kind::choice: {
      std::vector<expr_id> alts;
      bool same = true;
      for (expr_id c : x.children) {
        alts.push_back(search_trim(c, at_end, nullable));
        same = same && alts.back() == c;
      }
      return same ? e : g_.choice(std::move(alts));
    }
    case expr_kind::repeat: {
      // min >= 1 and the body does not match empty: X{m,n} beside "any text" is X{m}, whose
      // last (or first) copy is cut in turn.
      const expr_id body = x.children[0];
      const expr_id cut = search_trim(body, at_end, nullable);
      if (cut == body) return x.min == x.max ? e : g_.repeat(body, x.min, x.min);
      if (x.min == 1) return cut;
      const expr_id rest = g_.repeat(body, x.min - 1, x.min - 1);
      return at_end ? g_.sequence({rest, cut}) : g_.sequence({cut, rest});
    }
    case expr_kind::empty:
    case expr_kind::bytes:
    case expr_kind::rule_ref:
      break;
  }
  return e;
}

expr_id regex_parser::search(const piece& p_in) {
  const expr_id pad = g_.repeat(class_expr(codepoint_set::all()), 0, k_unbounded);
  // Cut each path's optional text at the ends it is padded at; one that may then match empty
  // matches every text.
  piece p = p_in;
  std::unordered_map<expr_id, bool> nullable;
  for (int s : {0, 1}) {
    for (int e : {0, 1}) {
      if (!p.cell[s][e] || (s && e)) continue;
      expr_id x = *p.cell[s][e];
      if (!e) x = search_trim(x, true, nullable);
      if (!s) x = search_trim(x, false, nullable);
      if (g_.at(x).kind == expr_kind::empty) return pad;
      p.cell[s][e] = x;
    }
  }
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
    std::optional<expr_id> e = search_rule(a, alphabet, literals, pad);
    if (!e && num_chars <= k_max_search_rules_literal)
      e = search_literals(a, alphabet, literals, pad);
    if (e) {
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

namespace {

/// What follows a literal: `rest`, then any text unless `to_end`.
struct literal_tail {
  std::vector<expr_id> rest;
  bool to_end = false;
};

/// Writes a search automaton as right-linear rules (where regex_parser::search_rule's rows
/// would be too large): a rule per state (its children, then the
/// moves of its failure state on the other symbols, then what follows the literals that end
/// there), made as they are first referred to. A state's moves on the symbols [lo, hi) are a
/// node of a balanced tree over the symbols, shared with its failure state where it has no
/// child there (a persistent array: a state adds a path per child), so that a state takes
/// its failure state's moves but on its own children's symbols with a few nodes (2 per level).
class search_rules {
 public:
  struct params {
    grammar& g;
    const search_automaton& a;
    const search_alphabet& alphabet;
    std::vector<literal_tail> tails;                     ///< by literal
    expr_id pad;                                         ///< any text
    std::function<expr_id(const codepoint_set&)> chars;  ///< one character of a set
  };
  explicit search_rules(params p)
      : g_(p.g),
        a_(p.a),
        alphabet_(p.alphabet),
        tails_(std::move(p.tails)),
        chars_(std::move(p.chars)),
        state_rule_(p.a.states.size(), k_none),
        enter_(p.a.states.size(), k_none),
        back_(p.alphabet.symbols().size(), k_none),
        ends_(p.a.states.size(), k_none),
        symbol_expr_(p.alphabet.symbols().size(), k_none) {
    const rule_id any = g_.fresh_rule("search_any");
    g_.define_rule(any, p.pad);
    to_any_ = g_.ref(any);
  }

  /// The expression of state 0; none past k_max_search_refs (the rules made stay unused).
  std::optional<expr_id> build();

 private:
  static constexpr std::uint32_t k_none = search_automaton::k_none;
  using symbols = std::vector<std::uint32_t>;

  expr_id state_ref(std::uint32_t s);
  /// The symbol that enters state t, then t.
  expr_id enter_ref(std::uint32_t t);
  expr_id rule_of(std::string_view name, std::vector<expr_id> alts);
  /// Symbol c, then state 0 (state 0 has no child on c).
  expr_id back_ref(std::uint32_t c);
  /// Whether state f has a child on a symbol in [lo, hi).
  bool has_child_in(std::uint32_t f, std::uint32_t lo, std::uint32_t hi) const;
  /// State f's moves on the symbols [lo, hi): a node of the tree of its moves.
  expr_id moves_ref(std::uint32_t f, std::uint32_t lo, std::uint32_t hi);
  /// Appends the fewest nodes that hold f's moves on [lo, hi) but on the symbols `skip`.
  void moves_but(std::uint32_t f, std::uint32_t lo, std::uint32_t hi, const symbols& skip,
                 std::vector<expr_id>& out);
  /// What follows the literals that end at state t or at a suffix of it.
  expr_id ends_ref(std::uint32_t t);
  /// The body of state s (not a sink).
  expr_id state_body(std::uint32_t s);

  grammar& g_;
  const search_automaton& a_;
  const search_alphabet& alphabet_;
  std::vector<literal_tail> tails_;
  std::function<expr_id(const codepoint_set&)> chars_;
  expr_id to_any_ = 0;
  std::optional<expr_id> restart_other_;  // back to state 0 on a character of no symbol
  std::vector<rule_id> state_rule_;
  std::vector<std::uint32_t> work_;  // states referred to, in that order
  std::vector<expr_id> enter_, back_, ends_, symbol_expr_;
  std::unordered_map<std::uint64_t, expr_id> moves_;  // by (state, lo, hi)
  std::size_t num_refs_ = 0;                          // references made
};

std::optional<expr_id> search_rules::build() {
  // A state is a sink where a literal that nothing but padding follows ends there or at a
  // suffix: every text from there on matches.
  std::vector<std::uint8_t> sink(a_.states.size(), 0);
  for (std::uint32_t s : a_.order) {
    const auto& st = a_.states[s];
    for (std::uint32_t j : st.ends) sink[s] |= tails_[j].rest.empty() && !tails_[j].to_end;
    if (st.suffix_end != k_none) sink[s] |= sink[st.suffix_end];
  }
  if (const codepoint_set others = alphabet_.covered().complement(); !others.empty())
    restart_other_ = rule_of("search_other", {g_.sequence({chars_(others), state_ref(0)})});
  const expr_id start = state_ref(0);
  std::size_t k = 0;
  for (; k < work_.size(); ++k) {
    if (num_refs_ > k_max_search_refs) break;
    if (k % 1024 == 0) check_interrupt();
    const std::uint32_t s = work_[k];
    g_.define_rule(state_rule_[s], sink[s] ? to_any_ : state_body(s));
  }
  if (k == work_.size()) return start;
  for (; k < work_.size(); ++k) g_.define_rule(state_rule_[work_[k]], g_.nothing());
  return std::nullopt;
}

expr_id search_rules::state_body(std::uint32_t s) {
  const auto num_symbols = std::uint32_t(alphabet_.symbols().size());
  const auto& st = a_.states[s];
  std::vector<expr_id> alts;
  if (s == 0) {
    alts.push_back(moves_ref(0, 0, num_symbols));
  } else {
    symbols own;
    for (auto [c, t] : st.children) alts.push_back(enter_ref(t)), own.push_back(c);
    moves_but(st.fail, 0, num_symbols, own, alts);
  }
  if (restart_other_) alts.push_back(*restart_other_);
  if (const std::uint32_t end = st.ends.empty() ? st.suffix_end : s; end != k_none)
    alts.push_back(ends_ref(end));
  num_refs_ += alts.size();
  return g_.choice(std::move(alts));
}

expr_id search_rules::state_ref(std::uint32_t s) {
  if (state_rule_[s] == k_none) {
    state_rule_[s] = g_.fresh_rule("search_" + std::to_string(s));
    work_.push_back(s);
  }
  return g_.ref(state_rule_[s]);
}

expr_id search_rules::enter_ref(std::uint32_t t) {
  // A symbol of single bytes is one byte set; entering a state on another is a rule shared by
  // every state that moves there, so that the bytes inside a character (UTF-8, JSON escapes)
  // are one path whichever state they start from.
  ++num_refs_;
  const std::uint32_t c = a_.states[t].symbol;
  if (symbol_expr_[c] == k_none) symbol_expr_[c] = chars_(alphabet_.symbols()[c]);
  if (g_.at(symbol_expr_[c]).kind == expr_kind::bytes)
    return g_.sequence({symbol_expr_[c], state_ref(t)});
  if (enter_[t] == k_none)
    enter_[t] = rule_of("search_enter", {g_.sequence({symbol_expr_[c], state_ref(t)})});
  return enter_[t];
}

expr_id search_rules::rule_of(std::string_view name, std::vector<expr_id> alts) {
  const rule_id r = g_.fresh_rule(name);
  g_.define_rule(r, g_.choice(std::move(alts)));
  return g_.ref(r);
}

expr_id search_rules::back_ref(std::uint32_t c) {
  // As enter_ref: one rule per symbol where the symbol is more than one byte set.
  ++num_refs_;
  if (symbol_expr_[c] == k_none) symbol_expr_[c] = chars_(alphabet_.symbols()[c]);
  if (g_.at(symbol_expr_[c]).kind == expr_kind::bytes)
    return g_.sequence({symbol_expr_[c], state_ref(0)});
  if (back_[c] == k_none)
    back_[c] = rule_of("search_enter", {g_.sequence({symbol_expr_[c], state_ref(0)})});
  return back_[c];
}

bool search_rules::has_child_in(std::uint32_t f, std::uint32_t lo, std::uint32_t hi) const {
  const auto& c = a_.states[f].children;
  auto it = std::lower_bound(c.begin(), c.end(), std::pair<std::uint32_t, std::uint32_t>{lo, 0});
  return it != c.end() && it->first < hi;
}

expr_id search_rules::moves_ref(std::uint32_t f, std::uint32_t lo, std::uint32_t hi) {
  // Where f has no child on [lo, hi) it moves there as its failure state does: the first state
  // down the chain that has one (or state 0) makes the node, and every state passed shares it.
  std::vector<std::uint64_t> passed;
  const auto key = [&](std::uint32_t u) {
    return std::uint64_t(u) << 40 | std::uint64_t(lo) << 20 | hi;
  };
  std::optional<expr_id> made;
  for (;; f = a_.states[f].fail) {
    if (auto it = moves_.find(key(f)); it != moves_.end()) {
      made = it->second;
      break;
    }
    passed.push_back(key(f));
    if (f == 0 || has_child_in(f, lo, hi)) break;
  }
  if (!made) {
    if (hi - lo == 1) {
      made = f == 0 && !has_child_in(0, lo, hi) ? back_ref(lo) : enter_ref(*a_.child(f, lo));
    } else {
      const std::uint32_t mid = lo + (hi - lo) / 2;
      num_refs_ += 2;
      made = rule_of("search_moves", {moves_ref(f, lo, mid), moves_ref(f, mid, hi)});
    }
  }
  for (std::uint64_t k : passed) moves_.emplace(k, *made);
  return *made;
}

void search_rules::moves_but(std::uint32_t f, std::uint32_t lo, std::uint32_t hi,
                             const symbols& skip, std::vector<expr_id>& out) {
  auto it = std::lower_bound(skip.begin(), skip.end(), lo);
  if (it == skip.end() || *it >= hi) return out.push_back(moves_ref(f, lo, hi));
  if (hi - lo == 1) return;
  const std::uint32_t mid = lo + (hi - lo) / 2;
  moves_but(f, lo, mid, skip, out);
  moves_but(f, mid, hi, skip, out);
}

expr_id search_rules::ends_ref(std::uint32_t t) {
  // A rule per such state, made shallowest first along the chain of suffixes (which may be as
  // long as a literal).
  std::vector<std::uint32_t> chain;
  for (std::uint32_t u = t; u != k_none && ends_[u] == k_none; u = a_.states[u].suffix_end)
    chain.push_back(u);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const auto& st = a_.states[*it];
    std::vector<expr_id> alts;
    for (std::uint32_t j : st.ends) {
      std::vector<expr_id> tail = tails_[j].rest;
      if (!tails_[j].to_end) tail.push_back(to_any_);
      alts.push_back(g_.sequence(std::move(tail)));
    }
    if (st.suffix_end != k_none) alts.push_back(ends_[st.suffix_end]);
    ends_[*it] = rule_of("search_end", std::move(alts));
  }
  return ends_[t];
}

}  // namespace

std::optional<expr_id> regex_parser::search_rule(const search_automaton& a,
                                                 const search_alphabet& alphabet,
                                                 const std::vector<literal_path>& paths,
                                                 expr_id pad) {
  // Symbols: the alphabet's, then the characters of none (which lead back to state 0).
  const codepoint_set others = alphabet.covered().complement();
  const std::size_t num_symbols = alphabet.symbols().size() + (others.empty() ? 0 : 1);
  const std::size_t n = a.states.size();
  if (n > k_max_search_moves / num_symbols) return std::nullopt;
  constexpr std::uint32_t k_none = symbol_automaton::k_none;
  auto m = std::make_shared<symbol_automaton>();
  for (const codepoint_set& set : alphabet.symbols())
    m->symbols.push_back(single_bytes(class_expr(set)));
  if (!others.empty()) m->symbols.push_back(single_bytes(class_expr(others)));
  // Exit j: what follows literal j (its rest, then any text unless tied to the end); the last,
  // any text: a state where a literal followed by any text alone ends (or at a suffix of it) is
  // a sink, whose every text from there on matches.
  for (const literal_path& l : paths) {
    std::vector<expr_id> tail = l.rest;
    if (!l.to_end) tail.push_back(pad);
    m->exit_exprs.push_back(g_.sequence(std::move(tail)));
  }
  const auto any_text = std::uint32_t(m->exit_exprs.size());
  m->exit_exprs.push_back(pad);
  m->next.assign(n * num_symbols, k_none);
  m->exits.resize(n);
  m->exits_also.assign(n, k_none);
  std::vector<std::uint8_t> sink(n, 0);
  for (std::size_t k = 0; k < a.order.size(); ++k) {
    if (k % 1024 == 0) check_interrupt();
    const std::uint32_t s = a.order[k];
    const search_automaton::state& st = a.states[s];
    for (std::uint32_t j : st.ends) sink[s] |= paths[j].rest.empty() && !paths[j].to_end;
    if (st.suffix_end != k_none) sink[s] |= sink[st.suffix_end];
    if (sink[s]) {
      m->exits[s] = {any_text};
      continue;
    }
    // Breadth first: the failure state's row is written already; state 0's moves are its
    // children's, else back to itself.
    std::uint32_t* row = &m->next[std::size_t(s) * num_symbols];
    if (s == 0) {
      std::fill(row, row + num_symbols, 0);
    } else {
      const std::uint32_t* fail = &m->next[std::size_t(st.fail) * num_symbols];
      std::copy(fail, fail + num_symbols, row);
    }
    for (auto [c, t] : st.children) row[c] = t;
    m->exits[s] = st.ends;
    m->exits_also[s] = st.suffix_end;
  }
  // The same language in plain expressions: the alternatives padded.
  std::vector<expr_id> inside, at_end;
  for (const literal_path& l : paths) (l.to_end ? at_end : inside).push_back(l.alternative);
  std::vector<expr_id> body;
  if (!inside.empty()) body.push_back(g_.sequence({pad, g_.choice(std::move(inside)), pad}));
  if (!at_end.empty()) body.push_back(g_.sequence({pad, g_.choice(std::move(at_end))}));
  const rule_id r = g_.fresh_rule("search_literals");
  g_.define_rule(r, g_.choice(std::move(body)));
  g_.set_automaton(r, std::move(m));
  return g_.ref(r);
}

std::optional<expr_id> regex_parser::search_literals(const search_automaton& a,
                                                     const search_alphabet& alphabet,
                                                     const std::vector<literal_path>& paths,
                                                     expr_id pad) {
  std::vector<literal_tail> tails;
  for (const literal_path& l : paths) tails.push_back({l.rest, l.to_end});
  search_rules rules(
      {.g = g_,
       .a = a,
       .alphabet = alphabet,
       .tails = std::move(tails),
       .pad = pad,
       .chars = [this](const codepoint_set& set) { return single_bytes(class_expr(set)); }});
  return rules.build();
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
