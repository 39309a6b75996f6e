// byte_dfa: built through the grammar compiler (a one-rule grammar whose automaton must have
// no calls), product construction (intersection, union), complement by completing and flipping,
// Moore minimization, and emission as right-linear rules.
#include "runtime/grammar/regular_language.hpp"

#include "common/error.hpp"
#include "runtime/grammar/compiled_grammar.hpp"

#include <map>
#include <set>
#include <unordered_map>

namespace di::grammar {

byte_dfa byte_dfa::from_expr(const grammar& g, expr_id e, std::size_t max_states) {
  grammar copy = g;
  rule_id root = copy.fresh_rule("__language");
  copy.define_rule(root, e);
  copy.set_root(root);
  compile_options o;
  o.inline_limit = max_states * 4;
  o.regular_inline_limit = max_states * 4;
  o.max_rule_states = max_states;
  auto c = compiled_grammar::compile(copy, o);
  DI_CHECK(c->num_rules() == 1, "expression is not a regular language (it needs {} rules)", c->num_rules());
  byte_dfa d;
  const std::uint32_t n = std::uint32_t(c->num_states());
  const std::uint32_t dead = n;
  d.trans_.assign(std::size_t(n + 1) * 256, dead);
  d.final_.assign(n + 1, 0);
  for (std::uint32_t s = 0; s < n; ++s) {
    DI_CHECK(c->calls(s).empty(), "expression is not a regular language");
    d.final_[s] = c->is_final(s);
    for (int b = 0; b < 256; ++b) {
      state_id t = c->next(s, std::uint8_t(b));
      if (t != k_dead_state) d.trans_[std::size_t(s) * 256 + b] = t;
    }
  }
  return d;
}

byte_dfa byte_dfa::intersect(const byte_dfa& other, std::size_t max_states) const {
  return product(other, true, max_states);
}

byte_dfa byte_dfa::unite(const byte_dfa& other, std::size_t max_states) const {
  return product(other, false, max_states);
}

byte_dfa byte_dfa::product(const byte_dfa& other, bool both, std::size_t max_states) const {
  byte_dfa out;
  std::unordered_map<std::uint64_t, std::uint32_t> ids;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs{{0, 0}};
  ids.emplace(0, 0);
  for (std::size_t k = 0; k < pairs.size(); ++k) {
    DI_CHECK(pairs.size() <= max_states, "regular-language {} needs more than {} states",
             both ? "intersection" : "union", max_states);
    auto [a, b] = pairs[k];
    out.final_.push_back(both ? final_[a] && other.final_[b] : final_[a] || other.final_[b]);
    out.trans_.resize((k + 1) * 256);
    for (int c = 0; c < 256; ++c) {
      std::uint32_t ta = next(a, std::uint8_t(c)), tb = other.next(b, std::uint8_t(c));
      std::uint64_t key = (std::uint64_t(ta) << 32) | tb;
      auto [it, inserted] = ids.emplace(key, std::uint32_t(pairs.size()));
      if (inserted) pairs.push_back({ta, tb});
      out.trans_[k * 256 + std::size_t(c)] = it->second;
    }
  }
  return out;
}

byte_dfa byte_dfa::complement() const {
  byte_dfa out = *this;
  for (auto& f : out.final_) f = !f;
  return out;
}

std::vector<std::uint8_t> byte_dfa::live_states() const {
  const std::size_t n = num_states();
  std::vector<std::vector<std::uint32_t>> rev(n);
  for (std::size_t s = 0; s < n; ++s)
    for (int b = 0; b < 256; ++b) rev[next(std::uint32_t(s), std::uint8_t(b))].push_back(std::uint32_t(s));
  std::vector<std::uint8_t> live(n, 0);
  std::vector<std::uint32_t> stack;
  for (std::size_t s = 0; s < n; ++s)
    if (final_[s]) live[s] = 1, stack.push_back(std::uint32_t(s));
  while (!stack.empty()) {
    std::uint32_t s = stack.back();
    stack.pop_back();
    for (std::uint32_t p : rev[s])
      if (!live[p]) live[p] = 1, stack.push_back(p);
  }
  return live;
}

byte_dfa byte_dfa::none() {
  byte_dfa d;
  d.trans_.assign(256, 0);  // one state, not final, every byte back to it
  d.final_.assign(1, 0);
  return d;
}

bool byte_dfa::empty() const { return !live_states()[0]; }

bool byte_dfa::prefix_free() const {
  const std::vector<std::uint8_t> live = live_states();
  std::vector<std::uint8_t> reached(num_states(), 0);
  std::vector<std::uint32_t> stack{0};
  reached[0] = 1;
  while (!stack.empty()) {
    const std::uint32_t s = stack.back();
    stack.pop_back();
    for (int b = 0; b < 256; ++b) {
      const std::uint32_t t = next(s, std::uint8_t(b));
      if (final_[s] && live[t]) return false;  // a word, then more bytes to another word
      if (!reached[t]) reached[t] = 1, stack.push_back(t);
    }
  }
  return true;
}

bool byte_dfa::accepts(std::string_view bytes) const {
  std::uint32_t s = 0;
  for (char c : bytes) s = next(s, std::uint8_t(c));
  return final_[s] != 0;
}

byte_dfa byte_dfa::minimize() const {
  const std::size_t n = num_states();
  std::vector<std::uint32_t> cls(n);
  for (std::size_t s = 0; s < n; ++s) cls[s] = final_[s];
  for (std::size_t rounds = 0;; ++rounds) {
    std::map<std::vector<std::uint32_t>, std::uint32_t> ids;
    std::vector<std::uint32_t> next_cls(n);
    for (std::size_t s = 0; s < n; ++s) {
      std::vector<std::uint32_t> sig(257);
      sig[0] = cls[s];
      for (int b = 0; b < 256; ++b) sig[std::size_t(b) + 1] = cls[next(std::uint32_t(s), std::uint8_t(b))];
      next_cls[s] = ids.emplace(std::move(sig), std::uint32_t(ids.size())).first->second;
    }
    bool stable = ids.size() == std::set<std::uint32_t>(cls.begin(), cls.end()).size();
    cls = std::move(next_cls);
    if (stable) break;
  }
  // Renumber so that the start state's class is 0.
  std::unordered_map<std::uint32_t, std::uint32_t> order;
  std::vector<std::uint32_t> rep;
  std::vector<std::uint32_t> queue{0};
  order.emplace(cls[0], 0);
  rep.push_back(0);
  byte_dfa out;
  for (std::size_t k = 0; k < rep.size(); ++k) {
    std::uint32_t s = rep[k];
    out.final_.push_back(final_[s]);
    for (int b = 0; b < 256; ++b) {
      std::uint32_t t = next(s, std::uint8_t(b));
      auto [it, inserted] = order.emplace(cls[t], std::uint32_t(rep.size()));
      if (inserted) rep.push_back(t);
      out.trans_.push_back(it->second);
    }
  }
  return out;
}

expr_id byte_dfa::emit(grammar& g, std::string_view name) const {
  std::vector<std::uint8_t> live = live_states();
  if (!live[0]) return g.nothing();
  std::vector<rule_id> rules(num_states(), 0);
  for (std::size_t s = 0; s < num_states(); ++s)
    if (live[s]) rules[s] = g.fresh_rule(std::string(name) + "_s" + std::to_string(s));
  for (std::size_t s = 0; s < num_states(); ++s) {
    if (!live[s]) continue;
    std::map<std::uint32_t, byte_set> by_target;
    for (int b = 0; b < 256; ++b) {
      std::uint32_t t = next(std::uint32_t(s), std::uint8_t(b));
      if (live[t]) by_target[t].set(std::uint8_t(b));
    }
    std::vector<expr_id> alts;
    if (final_[s]) alts.push_back(g.empty());
    for (const auto& [t, bytes] : by_target) alts.push_back(g.sequence({g.bytes(bytes), g.ref(rules[t])}));
    g.define_rule(rules[s], g.choice(std::move(alts)));
  }
  return g.ref(rules[0]);
}

}  // namespace di::grammar
