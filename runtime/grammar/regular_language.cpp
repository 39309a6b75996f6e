// byte_dfa: built through the grammar compiler (a one-rule grammar whose automaton must have
// no calls), product construction (intersection, union), complement by completing and flipping,
// Moore minimization over byte classes, and emission as right-linear rules.
#include "runtime/grammar/regular_language.hpp"

#include "common/error.hpp"
#include "runtime/grammar/compile_interrupt.hpp"
#include "runtime/grammar/compiled_grammar.hpp"

#include <array>
#include <map>
#include <set>
#include <unordered_map>

namespace di::grammar {

namespace {

/// Bytes that every state of a DFA sends to the same state, numbered by their least byte.
struct byte_classes {
  std::array<std::uint8_t, 256> of{};  ///< each byte's class
  std::vector<std::uint8_t> reps;      ///< each class's least byte
};

byte_classes byte_classes_of(const std::vector<std::uint32_t>& trans, std::size_t num_states) {
  std::array<std::uint64_t, 256> hash{};  // of each byte's column of targets
  for (std::size_t s = 0; s < num_states; ++s)
    for (std::size_t b = 0; b < 256; ++b)
      hash[b] = (hash[b] ^ trans[s * 256 + b]) * 0x100000001b3ULL;
  auto same_column = [&](std::size_t a, std::size_t b) {
    if (hash[a] != hash[b]) return false;
    for (std::size_t s = 0; s < num_states; ++s)
      if (trans[s * 256 + a] != trans[s * 256 + b]) return false;
    return true;
  };
  byte_classes out;
  for (std::size_t b = 0; b < 256; ++b) {
    std::size_t j = 0;
    while (j < out.reps.size() && !same_column(out.reps[j], b)) ++j;
    if (j == out.reps.size()) out.reps.push_back(std::uint8_t(b));
    out.of[b] = std::uint8_t(j);
  }
  return out;
}

struct signature_hash {
  std::size_t operator()(const std::vector<std::uint32_t>& v) const {
    std::uint64_t h = 0xcbf29ce484222325ULL;
    for (std::uint32_t x : v) h = (h ^ x) * 0x100000001b3ULL;
    return std::size_t(h ^ (h >> 29));
  }
};

}  // namespace

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
  // Bytes both automata treat alike step together: one lookup per class, not per byte.
  const byte_classes mine = byte_classes_of(trans_, num_states());
  const byte_classes theirs = byte_classes_of(other.trans_, other.num_states());
  std::map<std::pair<std::uint8_t, std::uint8_t>, std::uint8_t> joint_ids;
  std::array<std::uint8_t, 256> joint{};
  std::vector<std::uint8_t> reps;  // each joint class's least byte, in byte order
  for (int c = 0; c < 256; ++c) {
    auto [it, inserted] =
        joint_ids.emplace(std::pair{mine.of[c], theirs.of[c]}, std::uint8_t(reps.size()));
    if (inserted) reps.push_back(std::uint8_t(c));
    joint[c] = it->second;
  }
  byte_dfa out;
  std::unordered_map<std::uint64_t, std::uint32_t> ids;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs{{0, 0}};
  std::vector<std::uint32_t> targets(reps.size());
  ids.emplace(0, 0);
  for (std::size_t k = 0; k < pairs.size(); ++k) {
    if (k % 1024 == 0) check_interrupt();
    DI_CHECK(pairs.size() <= max_states, "regular-language {} needs more than {} states",
             both ? "intersection" : "union", max_states);
    auto [a, b] = pairs[k];
    out.final_.push_back(both ? final_[a] && other.final_[b] : final_[a] || other.final_[b]);
    // new pairs numbered in the order of their least byte, as a byte-by-byte walk finds them
    for (std::size_t j = 0; j < reps.size(); ++j) {
      std::uint32_t ta = next(a, reps[j]), tb = other.next(b, reps[j]);
      std::uint64_t key = (std::uint64_t(ta) << 32) | tb;
      auto [it, inserted] = ids.emplace(key, std::uint32_t(pairs.size()));
      if (inserted) pairs.push_back({ta, tb});
      targets[j] = it->second;
    }
    out.trans_.resize((k + 1) * 256);
    for (int c = 0; c < 256; ++c) out.trans_[k * 256 + std::size_t(c)] = targets[joint[c]];
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
  // Moore's refinement over byte classes (bytes every state sends alike): the same partition
  // as over all 256 bytes, for a signature of ~15 entries instead of 257.
  const byte_classes bytes = byte_classes_of(trans_, n);
  const std::size_t num_bytes = bytes.reps.size();
  std::vector<std::uint32_t> cls(n);
  for (std::size_t s = 0; s < n; ++s) cls[s] = final_[s];
  std::size_t num_classes = std::set<std::uint32_t>(cls.begin(), cls.end()).size();
  for (;;) {
    std::unordered_map<std::vector<std::uint32_t>, std::uint32_t, signature_hash> ids;
    ids.reserve(n);
    std::vector<std::uint32_t> next_cls(n);
    std::vector<std::uint32_t> sig(num_bytes + 1);
    for (std::size_t s = 0; s < n; ++s) {
      if (s % 4096 == 0) check_interrupt();  // rounds: up to the longest word told apart
      sig[0] = cls[s];
      for (std::size_t j = 0; j < num_bytes; ++j)
        sig[j + 1] = cls[next(std::uint32_t(s), bytes.reps[j])];
      next_cls[s] = ids.emplace(sig, std::uint32_t(ids.size())).first->second;
    }
    const bool stable = ids.size() == num_classes;
    num_classes = ids.size();
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
