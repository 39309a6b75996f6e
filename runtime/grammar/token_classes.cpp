// The per-state token walk (see token_classes.hpp), in pre-order over the trie with scratch per
// depth. Where one parse stack has a pure top (no calls, no rule end) the next byte is a table
// lookup; elsewhere the walk keeps the explicit set of parse stacks (calls push their return
// target, finished rules pop), and past its limits it falls back to the rule-local Earley
// parser (walk_parser).
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

void token_classifier::prepare() {
  pure_.resize(g_.num_states());
  for (state_id s = 0; s < g_.num_states(); ++s) pure_[s] = g_.calls(s).empty() && !g_.is_final(s);
  const std::size_t depths = v_.max_depth() + 1;
  dfa_at_.assign(depths, k_dead_state);
  origin_at_.assign(depths, 0);
  pushed_at_.assign(depths, 0);
  kernel_.resize(depths);
  closure_.resize(depths);
  closure_src_.assign(depths, stack_set{});
  base_at_.assign(depths, 0);
  closed_at_.assign(depths, 0);
  exit_at_.assign(depths, 0);
}

state_tokens token_classifier::classify(state_id s) {
  if (pure_.empty()) prepare();
  std::vector<node_id> accepted;
  std::vector<std::pair<node_id, node_id>> exits;
  if (!walk_stacks(s, accepted, exits)) {
    accepted.clear();
    exits.clear();
    walk_parser(s, accepted, exits);
  }
  return finish(s, accepted, exits);
}

void token_classifier::walk_parser(state_id s, std::vector<node_id>& accepted,
                                   std::vector<std::pair<node_id, node_id>>& exits) {
  parser_.reset_at(s);
  const byte_set& follow = g_.follow(g_.rule_of(s));
  dfa_at_[0] = pure(s) ? s : k_dead_state;
  origin_at_[0] = k_outer_origin;
  pushed_at_[0] = 0;
  std::uint32_t top = 0;  // depth of the deepest node on the current trie path
  const node_id num_nodes = node_id(v_.num_nodes());
  for (node_id n = 1; n < num_nodes;) {
    const std::uint32_t d = v_.depth(n);
    for (; top >= d; --top)
      if (pushed_at_[top]) parser_.pop();
    state_id q = dfa_at_[d - 1];
    std::uint32_t origin = origin_at_[d - 1];
    if (q == k_dead_state) {
      // The parser holds the set; one pure item left means the DFA can take over again.
      if (auto cur = parser_.current(); cur.size() == 1 && pure(cur[0].state)) {
        q = cur[0].state;
        origin = cur[0].origin;
      }
    }
    if (q != k_dead_state) {
      const state_id t = g_.next(q, v_.node_byte(n));
      if (t == k_dead_state) {
        n += v_.subtree_size(n);
        continue;
      }
      if (pure(t)) {  // the hot path: a table lookup per node
        dfa_at_[d] = t;
        origin_at_[d] = origin;
        pushed_at_[d] = 0;
        top = d;
        if (v_.has_tokens(n)) accepted.push_back(n);
        ++n;
        continue;
      }
      parser_.push_state(t, origin);
    } else if (!parser_.push(v_.node_byte(n))) {
      n += v_.subtree_size(n);
      continue;
    }
    dfa_at_[d] = k_dead_state;
    pushed_at_[d] = 1;
    top = d;
    if (v_.has_tokens(n)) accepted.push_back(n);
    if (parser_.exit_possible()) {
      // The rule instance may end after these bytes: longer tokens depend on the callers.
      const node_id end = n + v_.subtree_size(n);
      for (node_id c = n + 1; c < end; c += v_.subtree_size(c))
        if (follow.test(v_.node_byte(c))) exits.push_back({c, c + v_.subtree_size(c)});
    }
    ++n;
  }
}

namespace {
// Past these the stack walk gives way to the Earley parser (left recursion grows stacks
// without reading a byte; heavy ambiguity multiplies them).
constexpr std::size_t k_max_stack_depth = 48;
constexpr std::size_t k_max_stacks = 64;
}  // namespace

bool token_classifier::stack_set::add(std::span<const state_id> st) {
  return add(st.first(st.size() - 1), st.back());
}

bool token_classifier::stack_set::add(std::span<const state_id> below, state_id top) {
  for (std::size_t i = 0; i < size(); ++i) {
    auto other = at(i);
    if (other.size() == below.size() + 1 && other.back() == top &&
        std::equal(below.begin(), below.end(), other.begin()))
      return false;
  }
  data.insert(data.end(), below.begin(), below.end());
  data.push_back(top);
  begin.push_back(std::uint32_t(data.size()));
  return true;
}

bool token_classifier::close(std::uint32_t d) {
  stack_set& c = closure_[d];
  stack_set& src = closure_src_[d];
  closed_at_[d] = 1;
  // Siblings often reach the same stacks (bytes of one class): reuse the previous closure.
  if (src.data == kernel_[d].data && src.begin == kernel_[d].begin) return true;
  src.data.clear();  // invalid until this closure completes
  src.begin.assign(1, 0);
  c = kernel_[d];
  exit_at_[d] = 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    auto st = c.at(i);
    scratch_.assign(st.begin(), st.end());
    const state_id q = scratch_.back();
    scratch_.pop_back();
    const std::size_t below = scratch_.size();
    for (const call_edge& e : g_.calls(q)) {  // enter the callee; return to e.target
      if (below + 2 > k_max_stack_depth) return false;
      scratch_.resize(below);
      scratch_.push_back(e.target);
      scratch_.push_back(g_.start(e.rule));
      c.add(scratch_);
    }
    if (g_.is_final(q)) {  // the current rule ends: back to the caller, or out of the instance
      scratch_.resize(below);
      if (below == 0)
        exit_at_[d] = 1;
      else
        c.add(scratch_);
    }
    if (c.size() > k_max_stacks) return false;
  }
  src = kernel_[d];
  return true;
}

bool token_classifier::walk_stacks(state_id s, std::vector<node_id>& accepted,
                                   std::vector<std::pair<node_id, node_id>>& exits) {
  const byte_set& follow = g_.follow(g_.rule_of(s));
  for (stack_set& src : closure_src_) src.clear();
  kernel_[0].clear();
  kernel_[0].add(std::span<const state_id>(&s, 1));
  dfa_at_[0] = k_dead_state;
  closed_at_[0] = 0;
  const node_id num_nodes = node_id(v_.num_nodes());
  for (node_id n = 1; n < num_nodes;) {
    const std::uint32_t d = v_.depth(n);
    const std::uint8_t b = v_.node_byte(n);
    // One stack with a pure top: the byte is a table lookup on the top.
    state_id q = dfa_at_[d - 1];
    std::uint32_t base = base_at_[d - 1];
    if (q == k_dead_state && kernel_[d - 1].size() == 1 && pure(kernel_[d - 1].data.back())) {
      q = kernel_[d - 1].data.back();
      base = d - 1;
    }
    stack_set& k = kernel_[d];
    if (q != k_dead_state) {
      const state_id t = g_.next(q, b);
      if (t == k_dead_state) {
        n += v_.subtree_size(n);
        continue;
      }
      if (pure(t)) {  // the hot path
        dfa_at_[d] = t;
        base_at_[d] = base;
        if (v_.has_tokens(n)) accepted.push_back(n);
        ++n;
        continue;
      }
      const stack_set& from = kernel_[base];
      k.clear();
      k.add(std::span<const state_id>(from.data).first(from.data.size() - 1), t);
    } else {
      if (!closed_at_[d - 1] && !close(d - 1)) return false;
      const stack_set& c = closure_[d - 1];
      k.clear();
      for (std::size_t i = 0; i < c.size(); ++i) {
        auto st = c.at(i);
        const state_id t = g_.next(st.back(), b);
        if (t == k_dead_state) continue;
        k.add(st.first(st.size() - 1), t);
      }
      if (k.size() == 0) {
        n += v_.subtree_size(n);
        continue;
      }
    }
    dfa_at_[d] = k_dead_state;
    closed_at_[d] = 0;
    if (v_.has_tokens(n)) accepted.push_back(n);
    if (v_.subtree_size(n) > 1) {
      if (!close(d)) return false;
      if (exit_at_[d]) {  // the instance may end here: longer tokens depend on the callers
        const node_id end = n + v_.subtree_size(n);
        for (node_id c = n + 1; c < end; c += v_.subtree_size(c))
          if (follow.test(v_.node_byte(c))) exits.push_back({c, c + v_.subtree_size(c)});
      }
    }
    ++n;
  }
  return true;
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
