// Reachability, productivity, recursion (Tarjan's strongly connected components over rule
// references) and inlined sizes of the grammar IR. Iterative where the IR can be deep.
#include "runtime/grammar/detail/grammar_analysis.hpp"

#include "common/error.hpp"
#include "runtime/grammar/compiled_grammar.hpp"

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

/// Tarjan's algorithm, iterative: components of the reachable rules, callees before callers.
/// Marks rules on a cycle (a component of size > 1 or a self-reference).
std::vector<std::vector<rule_id>> components(const grammar& g,
                                             const std::vector<std::vector<rule_id>>& refs,
                                             grammar_analysis& a) {
  std::size_t n = g.num_rules();
  a.recursive.assign(n, 0);
  a.component.assign(n, UINT32_MAX);
  std::vector<std::vector<rule_id>> out;
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
        a.component[w] = std::uint32_t(out.size());
      } while (w != r);
      if (comp.size() > 1)
        for (rule_id m : comp) a.recursive[m] = 1;
      out.push_back(std::move(comp));
    }
  }
  return out;
}

/// True if every reference from `id` to a rule of `component` is in tail position.
bool tail_only(const grammar& g, expr_id id, const grammar_analysis& a, std::uint32_t component,
               bool tail) {
  const expr& e = g.at(id);
  switch (e.kind) {
    case expr_kind::rule_ref: return tail || a.component[e.rule] != component;
    case expr_kind::repeat: return tail_only(g, e.children[0], a, component, false);
    case expr_kind::sequence:
      for (std::size_t k = 0; k < e.children.size(); ++k)
        if (!tail_only(g, e.children[k], a, component, tail && k + 1 == e.children.size()))
          return false;
      return true;
    case expr_kind::choice:
      for (expr_id c : e.children)
        if (!tail_only(g, c, a, component, tail)) return false;
      return true;
    default: return true;
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
                        std::vector<rule_id>& tail_seen, std::uint32_t component) {
  const expr& e = g.at(id);
  switch (e.kind) {
    case expr_kind::empty:
      return 1;
    case expr_kind::bytes:
      return 1;
    case expr_kind::rule_ref:
      if (a.component[e.rule] == component) return 1;  // a loop back inside a regular component
      if (!a.inlined[e.rule] && !a.regular[e.rule]) return 1;
      if (!tail) return a.size[e.rule];
      if (std::find(tail_seen.begin(), tail_seen.end(), e.rule) == tail_seen.end()) tail_seen.push_back(e.rule);
      return 1;
    case expr_kind::repeat: {
      std::uint64_t body = expr_size(g, e.children[0], a, false, tail_seen, component);
      std::uint64_t copies = e.max == k_unbounded ? std::uint64_t(e.min) + 1 : e.max;
      return sat_add(sat_mul(body, std::max<std::uint64_t>(copies, 1)), 2);
    }
    case expr_kind::sequence: {
      std::uint64_t total = 2;
      for (std::size_t k = 0; k < e.children.size(); ++k)
        total = sat_add(
            total, expr_size(g, e.children[k], a, tail && k + 1 == e.children.size(), tail_seen, component));
      return total;
    }
    case expr_kind::choice: {
      std::uint64_t total = 2;
      for (expr_id c : e.children) total = sat_add(total, expr_size(g, c, a, tail, tail_seen, component));
      return total;
    }
  }
  return 1;
}

namespace {

/// Marks the productive reachable rules; throws empty_language_error when the root is not one,
/// unless `allow_empty`.
void mark_productive(const grammar& g, const std::vector<std::vector<rule_id>>& refs,
                     grammar_analysis& a, bool allow_empty) {
  // Productive rules by a worklist: a rule is examined again only when one it refers to has
  // just become productive (repeated passes over every rule were quadratic on a chain of
  // 200,000 rules, each productive only once the next one is).
  a.productive.assign(g.num_rules(), 0);
  std::vector<std::vector<rule_id>> callers(g.num_rules());
  for (rule_id r = 0; r < g.num_rules(); ++r)
    if (a.reachable[r])
      for (rule_id callee : refs[r]) callers[callee].push_back(r);
  std::vector<rule_id> work;
  for (rule_id r = 0; r < g.num_rules(); ++r)
    if (a.reachable[r]) work.push_back(r);
  std::reverse(work.begin(), work.end());  // popped from the back: rule 0 first
  while (!work.empty()) {
    const rule_id r = work.back();
    work.pop_back();
    if (a.productive[r] || !expr_productive(g, *g.rule_at(r).body, a.productive)) continue;
    a.productive[r] = 1;
    for (rule_id caller : callers[r])
      if (!a.productive[caller]) work.push_back(caller);
  }
  if (!a.productive[g.root()] && !allow_empty)
    throw empty_language_error(
        fmt::format("the grammar matches no string at all (rule '{}' never ends)",
                    g.rule_at(g.root()).name),
        __FILE__, __LINE__);
}

}  // namespace

void check_derives_some_string(const grammar& g) {
  DI_CHECK(g.root() < g.num_rules(), "the grammar has no root rule");
  grammar_analysis a;
  const auto refs = reference_graph(g);
  mark_reachable(g, refs, a);
  mark_productive(g, refs, a, /*allow_empty=*/false);
}

grammar_analysis analyze_grammar(const grammar& g, std::uint64_t inline_limit,
                                 std::uint64_t regular_inline_limit, bool allow_empty) {
  DI_CHECK(g.root() < g.num_rules(), "the grammar has no root rule");
  grammar_analysis a;
  auto refs = reference_graph(g);
  mark_reachable(g, refs, a);
  mark_productive(g, refs, a, allow_empty);
  a.size.assign(g.num_rules(), 1);
  a.inlined.assign(g.num_rules(), 0);
  a.regular.assign(g.num_rules(), 0);
  a.own_size.assign(g.num_rules(), 1);
  a.tail_refs.assign(g.num_rules(), {});
  const std::uint64_t cap = std::max(inline_limit, regular_inline_limit) + 1;
  // Components come callees first, so every size a component needs is known when it is sized.
  std::vector<std::uint32_t> seen(g.num_rules(), 0);
  std::uint32_t stamp = 0;
  for (const auto& comp : components(g, refs, a)) {
    std::uint32_t c = a.component[comp[0]];
    std::uint64_t total = 0;
    std::vector<rule_id> pending;
    for (rule_id r : comp) {
      a.own_size[r] = expr_size(g, *g.rule_at(r).body, a, true, a.tail_refs[r], c);
      total = sat_add(total, a.own_size[r]);
      pending.insert(pending.end(), a.tail_refs[r].begin(), a.tail_refs[r].end());
    }
    // One shared copy of everything reachable through tail references (stop once too large).
    ++stamp;  // seen[s] == stamp: s counted for this component
    while (!pending.empty() && total < cap) {
      rule_id s = pending.back();
      pending.pop_back();
      if (seen[s] == stamp) continue;
      seen[s] = stamp;
      total = sat_add(total, a.own_size[s]);
      pending.insert(pending.end(), a.tail_refs[s].begin(), a.tail_refs[s].end());
    }
    bool recursive = a.recursive[comp[0]] != 0;
    bool regular = recursive && total <= regular_inline_limit &&
                   std::all_of(comp.begin(), comp.end(), [&](rule_id r) {
                     return tail_only(g, *g.rule_at(r).body, a, c, true);
                   });
    for (rule_id r : comp) {
      a.size[r] = total;
      a.regular[r] = regular;
      // A rule built as its automaton (its body: the same language) is inlined up to the size of
      // a regular component: it is one, written out (a literal search's loop).
      const std::uint64_t limit = g.automaton(r) ? regular_inline_limit : inline_limit;
      a.inlined[r] = !recursive && r != g.root() && total <= limit;
    }
  }
  return a;
}

}  // namespace di::grammar::detail
