// IR -> per-rule NFA -> DFA -> one global automaton. See automaton_builder.hpp.
#include "runtime/grammar/detail/automaton_builder.hpp"

#include "common/error.hpp"
#include "runtime/grammar/compile_interrupt.hpp"

#include <algorithm>
#include <unordered_set>

namespace di::grammar {

namespace {

constexpr int k_max_inline_depth = 48;

std::string set_key(const byte_set& s) {
  return std::string(reinterpret_cast<const char*>(s.words.data()), sizeof(s.words));
}

}  // namespace

automaton_builder::automaton_builder(const grammar& g, const compile_options& options)
    : g_(g),
      options_(options),
      analysis_(detail::analyze_grammar(g, options.inline_limit, options.regular_inline_limit,
                                        options.allow_empty_language)) {}

void automaton_builder::compute_byte_classes() {
  // Refine the partition of 0..255 by every distinct byte set of the grammar (a set refines
  // it once: a 100,000-value enum has millions of byte expressions but few distinct sets).
  std::uint16_t cls[256] = {};
  int n = 1;
  std::unordered_set<std::string> seen;
  for (expr_id id = 0; id < g_.num_exprs(); ++id) {
    const expr& e = g_.at(id);
    if (e.kind != expr_kind::bytes || !seen.insert(set_key(e.bytes)).second) continue;
    std::int16_t remap[2][256];
    std::fill(&remap[0][0], &remap[0][0] + 512, std::int16_t(-1));
    int m = 0;
    for (int b = 0; b < 256; ++b) {
      auto& slot = remap[e.bytes.test(std::uint8_t(b))][cls[b]];
      if (slot < 0) slot = std::int16_t(m++);
      cls[b] = std::uint16_t(slot);
    }
    n = m;
  }
  class_rep_.assign(std::size_t(n), 0);
  for (int b = 255; b >= 0; --b) {
    class_of_[b] = std::uint8_t(cls[b]);
    class_rep_[cls[b]] = std::uint8_t(b);
  }
}

std::uint32_t automaton_builder::byte_set_index(const byte_set& s) {
  auto [it, inserted] = set_index_.emplace(set_key(s), std::uint32_t(sets_.size()));
  if (inserted) {
    sets_.push_back(s);
    std::vector<std::uint8_t> classes;
    for (std::size_t c = 0; c < class_rep_.size(); ++c)
      if (s.test(class_rep_[c])) classes.push_back(std::uint8_t(c));
    set_classes_.push_back(std::move(classes));
  }
  return it->second;
}

std::uint32_t automaton_builder::rule_for_ir(rule_id r) {
  auto [it, inserted] = ir_rule_job_.emplace(r, std::uint32_t(jobs_.size()));
  if (inserted) jobs_.push_back(job{g_.rule_at(r).name, *g_.rule_at(r).body, false, r});
  return it->second;
}

std::uint32_t automaton_builder::rule_for_expr(expr_id body, const std::string& name) {
  auto [it, inserted] = expr_job_.emplace(body, std::uint32_t(jobs_.size()));
  if (inserted) jobs_.push_back(job{name + "." + std::to_string(jobs_.size()), body, false});
  return it->second;
}

std::uint32_t automaton_builder::new_nfa_state() {
  DI_CHECK(nfa_.size() < options_.max_rule_size,
           "grammar too large: a rule expands to more than {} automaton states (are repetition "
           "bounds like {{m,n}} or length limits very large?)",
           options_.max_rule_size);
  nfa_.emplace_back();
  return std::uint32_t(nfa_.size() - 1);
}

bool automaton_builder::outline_child(expr_id child, const job& j, std::uint32_t from,
                                      std::uint32_t& end) {
  expr_kind k = g_.at(child).kind;
  if (k == expr_kind::bytes || k == expr_kind::empty) return false;
  std::uint32_t callee =
      k == expr_kind::rule_ref ? rule_for_ir(g_.at(child).rule) : rule_for_expr(child, j.name);
  if (k == expr_kind::rule_ref && !analysis_.productive[g_.at(child).rule]) {
    end = new_nfa_state();  // unreachable: the reference derives nothing
    return true;
  }
  end = new_nfa_state();
  nfa_[from].calls.push_back({callee, end});
  return true;
}

std::uint32_t automaton_builder::emit_tail_copy(rule_id r, std::uint32_t from, const job& j,
                                               int depth, fragment& f) {
  auto it = f.starts.find(r);
  if (it == f.starts.end()) {
    it = f.starts.emplace(r, new_nfa_state()).first;
    f.pending.push_back({r, depth});
  }
  nfa_[from].eps.push_back(it->second);
  // The path continues inside the copy up to the fragment's exit; the returned end state has
  // no incoming edge, so whatever the caller appends after it is never reached.
  return new_nfa_state();
}

void automaton_builder::build_pending(const job& j, fragment& f) {
  for (std::size_t k = 0; k < f.pending.size(); ++k) {
    const auto [r, depth] = f.pending[k];
    std::uint32_t end = emit_rule_body(r, f.starts.at(r), j, depth, true, f);
    nfa_[end].eps.push_back(f.exit);
  }
  f.pending.clear();
}

std::uint32_t automaton_builder::emit_ref(const expr& e, std::uint32_t from, const job& j,
                                         int depth, bool tail, fragment& f) {
  const rule_id r = e.rule;
  if (!analysis_.productive[r]) return new_nfa_state();
  bool expandable = (analysis_.inlined[r] || analysis_.regular[r]) && !j.outline &&
                    depth < k_max_inline_depth;
  if (expandable || f.starts.count(r)) {
    if (tail) return emit_tail_copy(r, from, j, depth, f);
    if (analysis_.inlined[r]) return emit_rule_body(r, from, j, depth + 1, false, f);
    // A regular component used mid-rule: a private copy with its own exit.
    fragment inner{new_nfa_state(), {}, {}};
    emit_tail_copy(r, from, j, depth + 1, inner);
    build_pending(j, inner);
    return inner.exit;
  }
  std::uint32_t to = new_nfa_state();
  nfa_[from].calls.push_back({rule_for_ir(r), to});
  return to;
}

std::uint32_t automaton_builder::emit_rule_body(rule_id r, std::uint32_t from, const job& j,
                                                int depth, bool tail, fragment& f) {
  if (const symbol_automaton* a = g_.automaton(r)) return emit_automaton(*a, from, j, depth, f);
  return emit(*g_.rule_at(r).body, from, j, depth, tail, f);
}

std::uint32_t automaton_builder::emit_automaton(const symbol_automaton& a, std::uint32_t from,
                                                const job& j, int depth, fragment& f) {
  // State s is NFA state base + s with a byte edge per one-byte-set symbol. Another symbol
  // (UTF-8, JSON escapes) is a copy of its expression per target state, shared by every state
  // that moves there on it; a state takes the copy's first byte edges as its own (no epsilon:
  // its state set stays itself alone). Exits: one copy of each exit expression, reached through
  // a node per state that has exits, which leads on to that of its exits_also.
  constexpr std::uint32_t k_none = symbol_automaton::k_none;
  const std::size_t n = a.num_states(), num_symbols = a.symbols.size();
  automaton_states_ += n;
  const std::uint32_t end = new_nfa_state();
  const auto base = std::uint32_t(nfa_.size());
  for (std::size_t s = 0; s < n; ++s) new_nfa_state();
  nfa_[from].eps.push_back(base);
  std::vector<std::uint32_t> symbol_set(num_symbols, k_none);
  for (std::size_t c = 0; c < num_symbols; ++c)
    if (const expr& e = g_.at(a.symbols[c]); e.kind == expr_kind::bytes && !e.bytes.empty())
      symbol_set[c] = byte_set_index(e.bytes);
  struct entry {
    std::uint32_t start;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> first;  // its first byte edges
    bool copy_first;  // they stand for the start (no calls or ends in its closure)
  };
  std::unordered_map<std::uint64_t, entry> enter;  // by (symbol, target)
  std::vector<std::uint32_t> exit_start(a.exit_exprs.size(), k_none);
  std::vector<std::uint32_t> exits_node(n, k_none);
  const auto exit_of = [&](std::uint32_t k) {
    if (exit_start[k] == k_none) {
      exit_start[k] = new_nfa_state();
      const std::uint32_t last = emit(a.exit_exprs[k], exit_start[k], j, depth + 1, false, f);
      nfa_[last].eps.push_back(end);
    }
    return exit_start[k];
  };
  const auto exits_of = [&](std::uint32_t s) {
    // Made deepest-suffix first along the chain (which may be as long as a literal).
    std::vector<std::uint32_t> chain;
    for (std::uint32_t u = s; u != k_none && exits_node[u] == k_none; u = a.exits_also[u])
      chain.push_back(u);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const std::uint32_t node = new_nfa_state();
      for (std::uint32_t k : a.exits[*it]) {
        const std::uint32_t start = exit_of(k);  // grows nfa_: before nfa_[node] is taken
        nfa_[node].eps.push_back(start);
      }
      if (a.exits_also[*it] != k_none) nfa_[node].eps.push_back(exits_node[a.exits_also[*it]]);
      exits_node[*it] = node;
    }
    return exits_node[s];
  };
  std::vector<std::uint32_t> set;
  for (std::size_t s = 0; s < n; ++s) {
    if (s % 1024 == 0) check_interrupt();
    const std::uint32_t state = base + std::uint32_t(s);
    for (std::size_t c = 0; c < num_symbols; ++c) {
      const std::uint32_t t = a.next[s * num_symbols + c];
      if (t == k_none) continue;
      if (symbol_set[c] != k_none) {
        nfa_[state].bytes.push_back({symbol_set[c], base + t});
        continue;
      }
      auto [it, inserted] = enter.try_emplace(std::uint64_t(c) << 32 | t);
      entry& e = it->second;
      if (inserted) {
        e.start = new_nfa_state();
        const std::uint32_t last = emit(a.symbols[c], e.start, j, depth + 1, false, f);
        nfa_[last].eps.push_back(base + t);
        set.assign(1, e.start);
        closure(set);
        e.copy_first = true;
        for (std::uint32_t x : set) {
          e.copy_first = e.copy_first && nfa_[x].calls.empty() && !nfa_[x].bytes.empty();
          e.first.insert(e.first.end(), nfa_[x].bytes.begin(), nfa_[x].bytes.end());
        }
      }
      if (e.copy_first) {
        nfa_[state].bytes.insert(nfa_[state].bytes.end(), e.first.begin(), e.first.end());
      } else {
        nfa_[state].eps.push_back(e.start);
      }
    }
    if (!a.exits[s].empty() || a.exits_also[s] != k_none) {
      const std::uint32_t node = exits_of(std::uint32_t(s));
      nfa_[state].eps.push_back(node);
    }
  }
  return end;
}

std::uint32_t automaton_builder::emit(expr_id id, std::uint32_t from, const job& j, int depth,
                                      bool tail, fragment& f) {
  struct guard {
    int& n;
    explicit guard(int& c) : n(c) {
      DI_CHECK(++n < 20000,
               "grammar too deeply nested (expressions and inlined rules over 20000 levels)");
    }
    ~guard() { --n; }
  } depth_guard(emit_depth_);
  const expr& e = g_.at(id);
  switch (e.kind) {
    case expr_kind::empty:
      return from;
    case expr_kind::bytes: {
      std::uint32_t to = new_nfa_state();
      if (!e.bytes.empty()) nfa_[from].bytes.push_back({byte_set_index(e.bytes), to});
      return to;
    }
    case expr_kind::rule_ref:
      return emit_ref(e, from, j, depth, tail, f);
    case expr_kind::sequence: {
      std::uint32_t cur = from;
      for (std::size_t k = 0; k < e.children.size(); ++k)
        cur = emit(e.children[k], cur, j, depth, tail && k + 1 == e.children.size(), f);
      return cur;
    }
    case expr_kind::choice: {
      std::uint32_t end = new_nfa_state();
      for (expr_id c : e.children) {
        std::uint32_t start = new_nfa_state();
        nfa_[from].eps.push_back(start);
        std::uint32_t last;
        if (!(j.outline && outline_child(c, j, start, last))) last = emit(c, start, j, depth, tail, f);
        nfa_[last].eps.push_back(end);
      }
      return end;
    }
    case expr_kind::repeat:
      return emit_repeat(e, from, j, depth, f);
  }
  return from;
}

std::uint32_t automaton_builder::emit_repeat(const expr& e, std::uint32_t from, const job& j,
                                             int depth, fragment& f) {
  expr_id body = e.children[0];
  std::uint64_t copies = e.max == k_unbounded ? std::uint64_t(e.min) + 1 : e.max;
  bool call_body = j.outline;
  if (!call_body && copies > 1) {
    std::vector<rule_id> tails;
    std::uint64_t size = detail::expr_size(g_, body, analysis_, false, tails, UINT32_MAX);
    call_body = size > 4 && size * copies > options_.max_repeat_expansion;
  }
  auto once = [&](std::uint32_t start) {
    std::uint32_t last;
    if (call_body && outline_child(body, j, start, last)) return last;
    return emit(body, start, j, depth, false, f);
  };
  std::uint32_t cur = from;
  for (std::uint32_t i = 0; i < e.min; ++i) cur = once(cur);
  if (e.max == k_unbounded) {
    std::uint32_t loop = new_nfa_state();
    nfa_[cur].eps.push_back(loop);
    std::uint32_t last = once(loop);
    nfa_[last].eps.push_back(loop);
    return loop;
  }
  std::uint32_t end = new_nfa_state();
  for (std::uint32_t i = e.min; i < e.max; ++i) {
    nfa_[cur].eps.push_back(end);
    cur = once(cur);
  }
  nfa_[cur].eps.push_back(end);
  return end;
}

void automaton_builder::closure(std::vector<std::uint32_t>& set) {
  if (mark_.size() < nfa_.size()) mark_.resize(nfa_.size(), 0);
  ++stamp_;
  std::vector<std::uint32_t> stack(set.begin(), set.end());
  set.clear();
  while (!stack.empty()) {
    std::uint32_t s = stack.back();
    stack.pop_back();
    if (mark_[s] == stamp_) continue;
    mark_[s] = stamp_;
    if (!nfa_[s].bytes.empty() || !nfa_[s].calls.empty() || nfa_[s].eps.empty()) set.push_back(s);
    for (std::uint32_t t : nfa_[s].eps) stack.push_back(t);
  }
  std::sort(set.begin(), set.end());
}

}  // namespace di::grammar
