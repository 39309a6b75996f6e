// Reachability, productivity, recursion (Tarjan's strongly connected components over rule
// references) and inlined sizes of the grammar IR. Iterative where the IR can be deep.
#include "runtime/grammar/detail/grammar_analysis.hpp"

#include "common/error.hpp"

#include <algorithm>

namespace di::grammar::detail {

namespace {

std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) {
  return std::min(a + b, k_size_saturated);
}
std::uint64_t sat_mul(std::uint64_t a, std::uint64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > k_size_saturated / b ? k_size_saturated : a * b;
}

/// Rule references in the expression tree of `id` (iterative walk).
void collect_refs(const grammar& g, expr_id id, std::vector<rule_id>& out) {
  std::vector<expr_id> stack{id};
  while (!stack.empty()) {
    const expr& e = g.at(stack.back());
    stack.pop_back();
    if (e.kind == expr_kind::rule_ref) out.push_back(e.rule);
    for (expr_id c : e.children) stack.push_back(c);
  }
}

std::vector<std::vector<rule_id>> reference_graph(const grammar& g) {
  std::vector<std::vector<rule_id>> refs(g.num_rules());
  for (rule_id r = 0; r < g.num_rules(); ++r) {
    if (g.rule_at(r).body) collect_refs(g, *g.rule_at(r).body, refs[r]);
    std::sort(refs[r].begin(), refs[r].end());
    refs[r].erase(std::unique(refs[r].begin(), refs[r].end()), refs[r].end());
  }
  return refs;
}

void mark_reachable(const grammar& g, const std::vector<std::vector<rule_id>>& refs,
                    grammar_analysis& a) {
  a.reachable.assign(g.num_rules(), 0);
  std::vector<rule_id> stack{g.root()};
  a.reachable[g.root()] = 1;
  while (!stack.empty()) {
    rule_id r = stack.back();
    stack.pop_back();
    DI_CHECK(g.rule_at(r).body.has_value(), "rule '{}' is used but never defined",
             g.rule_at(r).name);
    for (rule_id c : refs[r])
      if (!a.reachable[c]) a.reachable[c] = 1, stack.push_back(c);
  }
}

/// Tarjan's algorithm, iterative; marks rules on a cycle (a component of size > 1 or a
/// self-reference).
void mark_recursive(const grammar& g, const std::vector<std::vector<rule_id>>& refs,
                    grammar_analysis& a) {
  std::size_t n = g.num_rules();
  a.recursive.assign(n, 0);
  std::vector<std::uint32_t> index(n, UINT32_MAX), low(n, 0);
  std::vector<std::uint8_t> on_stack(n, 0);
  std::vector<rule_id> scc_stack;
  std::uint32_t counter = 0;
  struct frame {
    rule_id r;
    std::size_t next;
  };
  for (rule_id root = 0; root < n; ++root) {
    if (!a.reachable[root] || index[root] != UINT32_MAX) continue;
    std::vector<frame> call{{root, 0}};
    index[root] = low[root] = counter++;
    scc_stack.push_back(root);
    on_stack[root] = 1;
    while (!call.empty()) {
      frame& f = call.back();
      if (f.next < refs[f.r].size()) {
        rule_id c = refs[f.r][f.next++];
        if (c == f.r) a.recursive[c] = 1;
        if (index[c] == UINT32_MAX) {
          index[c] = low[c] = counter++;
          scc_stack.push_back(c);
          on_stack[c] = 1;
          call.push_back({c, 0});
        } else if (on_stack[c]) {
          low[f.r] = std::min(low[f.r], index[c]);
        }
        continue;
      }
      rule_id r = f.r;
      call.pop_back();
      if (!call.empty()) low[call.back().r] = std::min(low[call.back().r], low[r]);
      if (low[r] != index[r]) continue;
      std::vector<rule_id> comp;
      rule_id w;
      do {
        w = scc_stack.back();
        scc_stack.pop_back();
        on_stack[w] = 0;
        comp.push_back(w);
      } while (w != r);
      if (comp.size() > 1)
        for (rule_id m : comp) a.recursive[m] = 1;
    }
  }
}

}  // namespace

bool expr_productive(const grammar& g, expr_id id, const std::vector<std::uint8_t>& productive) {
  const expr& e = g.at(id);
  switch (e.kind) {
    case expr_kind::empty:
      return true;
    case expr_kind::bytes:
      return !e.bytes.empty();
    case expr_kind::rule_ref:
      return productive[e.rule] != 0;
    case expr_kind::repeat:
      return e.min == 0 || expr_productive(g, e.children[0], productive);
    case expr_kind::sequence:
      return std::all_of(e.children.begin(), e.children.end(),
                         [&](expr_id c) { return expr_productive(g, c, productive); });
    case expr_kind::choice:
      return std::any_of(e.children.begin(), e.children.end(),
                         [&](expr_id c) { return expr_productive(g, c, productive); });
  }
  return false;
}

std::uint64_t expr_size(const grammar& g, expr_id id, const grammar_analysis& a, bool tail,
                        std::vector<rule_id>& tail_seen) {
  const expr& e = g.at(id);
  switch (e.kind) {
    case expr_kind::empty:
      return 1;
    case expr_kind::bytes:
      return 1;
    case expr_kind::rule_ref:
      if (!a.inlined[e.rule]) return 1;
      if (!tail) return a.size[e.rule];
      if (std::find(tail_seen.begin(), tail_seen.end(), e.rule) != tail_seen.end()) return 1;
      tail_seen.push_back(e.rule);
      return a.size[e.rule];
    case expr_kind::repeat: {
      std::uint64_t body = expr_size(g, e.children[0], a, false, tail_seen);
      std::uint64_t copies = e.max == k_unbounded ? std::uint64_t(e.min) + 1 : e.max;
      return sat_add(sat_mul(body, std::max<std::uint64_t>(copies, 1)), 2);
    }
    case expr_kind::sequence: {
      std::uint64_t total = 2;
      for (std::size_t k = 0; k < e.children.size(); ++k)
        total = sat_add(
            total, expr_size(g, e.children[k], a, tail && k + 1 == e.children.size(), tail_seen));
      return total;
    }
    case expr_kind::choice: {
      std::uint64_t total = 2;
      for (expr_id c : e.children) total = sat_add(total, expr_size(g, c, a, tail, tail_seen));
      return total;
    }
  }
  return 1;
}

grammar_analysis analyze_grammar(const grammar& g, std::uint64_t inline_limit) {
  DI_CHECK(g.root() < g.num_rules(), "the grammar has no root rule");
  grammar_analysis a;
  auto refs = reference_graph(g);
  mark_reachable(g, refs, a);
  a.productive.assign(g.num_rules(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (rule_id r = 0; r < g.num_rules(); ++r) {
      if (!a.reachable[r] || a.productive[r]) continue;
      if (expr_productive(g, *g.rule_at(r).body, a.productive)) a.productive[r] = 1, changed = true;
    }
  }
  DI_CHECK(a.productive[g.root()], "the grammar matches no string at all (rule '{}' never ends)",
           g.rule_at(g.root()).name);
  mark_recursive(g, refs, a);
  // Sizes bottom-up: a non-recursive rule's callees are sized before it (iterative post-order).
  a.size.assign(g.num_rules(), 1);
  a.inlined.assign(g.num_rules(), 0);
  std::vector<std::uint8_t> state(g.num_rules(), 0);  // 0 new, 1 open, 2 done
  for (rule_id top = 0; top < g.num_rules(); ++top) {
    if (!a.reachable[top] || state[top]) continue;
    std::vector<std::pair<rule_id, std::size_t>> stack{{top, 0}};
    state[top] = 1;
    while (!stack.empty()) {
      auto& [r, next] = stack.back();
      if (next < refs[r].size()) {
        rule_id c = refs[r][next++];
        if (!state[c] && !a.recursive[c]) state[c] = 1, stack.push_back({c, 0});
        continue;
      }
      std::vector<rule_id> tail_seen;
      a.size[r] = expr_size(g, *g.rule_at(r).body, a, true, tail_seen);
      a.inlined[r] = !a.recursive[r] && r != g.root() && a.size[r] <= inline_limit;
      state[r] = 2;
      stack.pop_back();
    }
  }
  return a;
}

}  // namespace di::grammar::detail
