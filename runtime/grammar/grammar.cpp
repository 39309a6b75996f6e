// Grammar IR builders: interning with light simplification, rule declaration, and the UTF-8
// lowering of code point sets (split into ranges whose encodings are byte-range sequences,
// then shared prefixes merged so that a class like \p{L} stays a few thousand nodes).
#include "runtime/grammar/grammar.hpp"

#include "common/error.hpp"
#include "common/utf8.hpp"

#include <algorithm>
#include <bit>

namespace di::grammar {

int byte_set::count() const {
  int n = 0;
  for (auto w : words) n += std::popcount(w);
  return n;
}

expr_id grammar::add(expr e) {
  DI_CHECK(exprs_.size() < limits_.max_exprs,
           "grammar too large: more than {} expression nodes (limit)", limits_.max_exprs);
  exprs_.push_back(std::move(e));
  return expr_id(exprs_.size() - 1);
}

expr_id grammar::empty() {
  if (empty_id_ == UINT32_MAX) empty_id_ = add(expr{});
  return empty_id_;
}

expr_id grammar::nothing() {
  return bytes(byte_set{});
}

expr_id grammar::bytes(const byte_set& set) {
  expr e;
  e.kind = expr_kind::bytes;
  e.bytes = set;
  return add(std::move(e));
}

expr_id grammar::byte_range(std::uint8_t lo, std::uint8_t hi) {
  byte_set s;
  s.set_range(lo, hi);
  return bytes(s);
}

expr_id grammar::literal(std::string_view text) {
  std::vector<expr_id> items;
  items.reserve(text.size());
  for (char c : text) items.push_back(byte_range(std::uint8_t(c), std::uint8_t(c)));
  return sequence(std::move(items));
}

expr_id grammar::sequence(std::vector<expr_id> items) {
  std::vector<expr_id> flat;
  for (expr_id id : items) {
    const expr& e = exprs_[id];
    if (e.kind == expr_kind::empty) continue;
    if (e.kind == expr_kind::sequence) {
      flat.insert(flat.end(), e.children.begin(), e.children.end());
    } else {
      flat.push_back(id);
    }
  }
  if (flat.empty()) return empty();
  if (flat.size() == 1) return flat[0];
  expr e;
  e.kind = expr_kind::sequence;
  e.children = std::move(flat);
  return add(std::move(e));
}

expr_id grammar::choice(std::vector<expr_id> items) {
  std::vector<expr_id> flat;
  for (expr_id id : items) {
    const expr& e = exprs_[id];
    if (e.kind == expr_kind::bytes && e.bytes.empty()) continue;  // matches nothing
    if (e.kind == expr_kind::choice) {
      flat.insert(flat.end(), e.children.begin(), e.children.end());
    } else {
      flat.push_back(id);
    }
  }
  if (flat.empty()) return nothing();
  if (flat.size() == 1) return flat[0];
  expr e;
  e.kind = expr_kind::choice;
  e.children = std::move(flat);
  return add(std::move(e));
}

expr_id grammar::repeat(expr_id item, std::uint32_t min, std::uint32_t max) {
  DI_CHECK(min <= max, "repetition {{{},{}}}: the minimum exceeds the maximum", min, max);
  if (max == 0) return empty();
  if (min == 1 && max == 1) return item;
  expr e;
  e.kind = expr_kind::repeat;
  e.children = {item};
  e.min = min;
  e.max = max;
  return add(std::move(e));
}

expr_id grammar::ref(rule_id rule) {
  DI_CHECK(rule < rules_.size(), "reference to an undeclared rule {}", rule);
  expr e;
  e.kind = expr_kind::rule_ref;
  e.rule = rule;
  return add(std::move(e));
}

rule_id grammar::declare_rule(std::string_view name) {
  auto it = by_name_.find(std::string(name));
  if (it != by_name_.end()) return it->second;
  DI_CHECK(rules_.size() < limits_.max_rules, "grammar too large: more than {} rules (limit)",
           limits_.max_rules);
  rules_.push_back(rule{std::string(name), std::nullopt});
  rule_id id = rule_id(rules_.size() - 1);
  by_name_.emplace(std::string(name), id);
  return id;
}

rule_id grammar::fresh_rule(std::string_view hint) {
  std::string name(hint);
  for (std::size_t n = rules_.size(); by_name_.count(name); ++n)
    name = std::string(hint) + "_" + std::to_string(n);
  return declare_rule(name);
}

void grammar::define_rule(rule_id id, expr_id body) {
  DI_CHECK(id < rules_.size(), "define_rule: no rule {}", id);
  rules_[id].body = body;
  automata_.erase(id);
}

void grammar::set_automaton(rule_id id, std::shared_ptr<const symbol_automaton> a) {
  DI_CHECK(id < rules_.size() && rules_[id].body, "set_automaton: rule {} is not defined", id);
  automata_[id] = std::move(a);
}

std::optional<rule_id> grammar::find_rule(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

rule_id grammar::import_rules(const grammar& other, std::string_view prefix) {
  DI_CHECK(other.root_ < other.rules_.size(), "import_rules: the grammar has no root rule");
  std::vector<rule_id> rule_map(other.rules_.size());
  for (std::size_t r = 0; r < other.rules_.size(); ++r)
    rule_map[r] = fresh_rule(std::string(prefix) + other.rules_[r].name);
  // An expression's children are added before it, so one pass in id order copies them first.
  std::vector<expr_id> expr_map(other.exprs_.size());
  for (std::size_t i = 0; i < other.exprs_.size(); ++i) {
    const expr& e = other.exprs_[i];
    std::vector<expr_id> children;
    for (expr_id c : e.children) children.push_back(expr_map[c]);
    switch (e.kind) {
      case expr_kind::empty:
        expr_map[i] = empty();
        break;
      case expr_kind::bytes:
        expr_map[i] = bytes(e.bytes);
        break;
      case expr_kind::sequence:
        expr_map[i] = sequence(std::move(children));
        break;
      case expr_kind::choice:
        expr_map[i] = choice(std::move(children));
        break;
      case expr_kind::repeat:
        expr_map[i] = repeat(children[0], e.min, e.max);
        break;
      case expr_kind::rule_ref:
        expr_map[i] = ref(rule_map[e.rule]);
        break;
    }
  }
  for (std::size_t r = 0; r < other.rules_.size(); ++r)
    if (other.rules_[r].body) define_rule(rule_map[r], expr_map[*other.rules_[r].body]);
  for (const auto& [r, a] : other.automata_) {
    auto copy = std::make_shared<symbol_automaton>(*a);
    for (expr_id& e : copy->symbols) e = expr_map[e];
    for (expr_id& e : copy->exit_exprs) e = expr_map[e];
    set_automaton(rule_map[r], std::move(copy));
  }
  return rule_map[other.root_];
}

// ---- UTF-8 lowering -------------------------------------------------------------------------

namespace {

struct byte_seq {
  int length = 0;
  std::uint8_t lo[4];
  std::uint8_t hi[4];
};

/// Splits [lo, hi] (same encoded length) until each piece encodes as one byte-range sequence.
void split_range(char32_t lo, char32_t hi, std::vector<byte_seq>& out) {
  int n = utf8_encoded_length(lo);
  for (int i = 1; i < n; ++i) {
    char32_t m = (char32_t(1) << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_range(lo, lo | m, out);
        split_range((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split_range(lo, (hi & ~m) - 1, out);
        split_range(hi & ~m, hi, out);
        return;
      }
    }
  }
  byte_seq s;
  s.length = n;
  encode_utf8(lo, s.lo);
  encode_utf8(hi, s.hi);
  out.push_back(s);
}

}  // namespace

expr_id grammar::codepoints(const codepoint_set& set) {
  // Surrogates have no UTF-8 encoding.
  codepoint_set valid = set.minus(codepoint_set::range(0xD800, 0xDFFF));
  std::vector<byte_seq> seqs;
  constexpr char32_t bounds[] = {0, 0x80, 0x800, 0x10000, 0x110000};
  for (const auto& r : valid.ranges()) {
    for (int k = 0; k < 4; ++k) {
      char32_t lo = std::max(r.lo, bounds[k]);
      char32_t hi = std::min(r.hi, char32_t(bounds[k + 1] - 1));
      if (lo <= hi) split_range(lo, hi, seqs);
    }
  }
  // Merge adjacent sequences that share their first byte range into one prefix.
  struct builder {
    grammar& g;
    expr_id build(const std::vector<byte_seq>& s, std::size_t begin, std::size_t end, int pos) {
      std::vector<expr_id> alts;
      std::size_t i = begin;
      while (i < end) {
        if (pos >= 4 || s[i].length == pos) {  // nothing left of this sequence
          alts.push_back(g.empty());
          ++i;
          continue;
        }
        std::size_t j = i + 1;
        while (j < end && s[j].length > pos && s[j].lo[pos] == s[i].lo[pos] &&
               s[j].hi[pos] == s[i].hi[pos])
          ++j;
        expr_id head = g.byte_range(s[i].lo[pos], s[i].hi[pos]);
        alts.push_back(g.sequence({head, build(s, i, j, pos + 1)}));
        i = j;
      }
      return g.choice(std::move(alts));
    }
  };
  if (seqs.empty()) return nothing();
  return builder{*this}.build(seqs, 0, seqs.size(), 0);
}

}  // namespace di::grammar
