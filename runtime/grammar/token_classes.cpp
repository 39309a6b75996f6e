// The per-state token walk (see token_classes.hpp). Frames mirror the trie path: a frame is
// either a DFA frame (one item in a state without calls or rule end: the next byte is a table
// lookup) or a parser frame (a set pushed on the rule-local Earley parser).
#include "runtime/grammar/token_classes.hpp"

#include <algorithm>

namespace di::grammar {

void state_tokens::or_into(std::span<std::uint32_t> mask) const {
  if (!accepted_bits.empty()) {
    std::size_t n = std::min(mask.size(), accepted_bits.size());
    for (std::size_t w = 0; w < n; ++w) mask[w] |= accepted_bits[w];
    return;
  }
  for (token_id id : accepted_ids) mask[std::size_t(id) >> 5] |= 1u << (id & 31);
}

std::size_t state_tokens::memory_bytes() const {
  return sizeof(*this) + accepted_bits.capacity() * 4 + accepted_ids.capacity() * 4 +
         uncertain.capacity() * 4;
}

token_classifier::token_classifier(const compiled_grammar& g, const token_vocabulary& v)
    : g_(g), v_(v), parser_(g) {}

bool token_classifier::step(const frame* parent, node_id n, frame& out) {
  const std::uint8_t b = v_.node_byte(n);
  out = frame{n + v_.subtree_size(n), k_dead_state, 0, false};
  state_id q = k_dead_state;
  std::uint32_t origin = 0;
  if (parent && parent->dfa_state != k_dead_state) {
    q = parent->dfa_state;
    origin = parent->origin;
  } else if (auto cur = parser_.current(); cur.size() == 1 && pure(cur[0].state)) {
    q = cur[0].state;
    origin = cur[0].origin;
  }
  if (q != k_dead_state) {
    state_id t = g_.next(q, b);
    if (t == k_dead_state) return false;
    if (pure(t)) {
      out.dfa_state = t;
      out.origin = origin;
      return true;
    }
    parser_.push_state(t, origin);
    out.pushed = true;
    return true;
  }
  if (!parser_.push(b)) return false;
  out.pushed = true;
  return true;
}

state_tokens token_classifier::classify(state_id s) {
  parser_.reset_at(s);
  const byte_set& follow = g_.follow(g_.rule_of(s));
  std::vector<frame> stack;
  std::vector<node_id> accepted;
  std::vector<std::pair<node_id, node_id>> exits;
  const node_id num_nodes = node_id(v_.num_nodes());
  for (node_id n = 1; n < num_nodes;) {
    while (!stack.empty() && stack.back().end <= n) {
      if (stack.back().pushed) parser_.pop();
      stack.pop_back();
    }
    frame f;
    if (!step(stack.empty() ? nullptr : &stack.back(), n, f)) {
      n += v_.subtree_size(n);
      continue;
    }
    if (!v_.tokens_at(n).empty()) accepted.push_back(n);
    if (f.dfa_state == k_dead_state && parser_.exit_possible()) {
      // The rule instance may end after these bytes: longer tokens depend on the callers.
      for (node_id c = n + 1; c < f.end; c += v_.subtree_size(c))
        if (follow.test(v_.node_byte(c))) exits.push_back({c, c + v_.subtree_size(c)});
    }
    stack.push_back(f);
    ++n;
  }
  return finish(s, accepted, exits);
}

state_tokens token_classifier::finish(state_id, std::vector<node_id>& accepted,
                                      std::vector<std::pair<node_id, node_id>>& exits) const {
  state_tokens out;
  std::vector<token_id> ids;
  for (node_id n : accepted)
    for (token_id id : v_.tokens_at(n)) ids.push_back(id);
  out.num_accepted = ids.size();
  if (ids.size() > v_.mask_words()) {
    out.accepted_bits.assign(v_.mask_words(), 0);
    for (token_id id : ids) out.accepted_bits[std::size_t(id) >> 5] |= 1u << (id & 31);
  } else {
    std::sort(ids.begin(), ids.end());
    out.accepted_ids = std::move(ids);
  }
  std::sort(exits.begin(), exits.end());
  node_id covered = 0;  // ranges nest or are disjoint: skip what a previous range covered
  for (auto [lo, hi] : exits) {
    for (node_id n = std::max(lo, covered); n < hi; ++n) {
      if (v_.tokens_at(n).empty()) continue;
      if (!std::binary_search(accepted.begin(), accepted.end(), n)) out.uncertain.push_back(n);
    }
    covered = std::max(covered, hi);
  }
  return out;
}

}  // namespace di::grammar
