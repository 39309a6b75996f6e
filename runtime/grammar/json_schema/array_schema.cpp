// Arrays: positional schemas (prefixItems, or draft 7's items array), the schema of the items
// after them (items / additionalItems), and minItems/maxItems, as right-linear rules E(k)
// "k items written" ending in one loop for the unbounded tail (none in generation where the
// schema is silent about it, ends_after_prefix). `contains` (with minContains)
// on plain item lists: some items match items AND contains, in any position; maxContains
// counts items matching it against those matching its complement (schema_negate.cpp).
// uniqueItems over finite scalar item sets: subsets of one domain, or the distinct arrays listed.
#include "common/error.hpp"
#include "runtime/grammar/json_schema/schema_compiler.hpp"

#include <algorithm>
#include <functional>

namespace di::grammar::json_detail {

namespace {

constexpr std::uint64_t k_max_positions = 10'000;

struct array_part {
  std::vector<schema_ref> prefix;
  std::optional<schema_ref> rest;  // applies to items after the prefix; none: unconstrained
};

array_part read_part(const schema_compiler& c, const schema_ref& part) {
  const json& s = *part.s;
  array_part a;
  auto items = s.find("items");
  auto prefix = s.find("prefixItems");
  if (prefix != s.end()) {
    for (const auto& sub : *prefix) a.prefix.push_back({&sub, part.base});
    if (items != s.end()) a.rest = schema_ref{&*items, part.base};
  } else if (items != s.end() && items->is_array()) {  // draft 7 tuple form
    for (const auto& sub : *items) a.prefix.push_back({&sub, part.base});
    if (auto extra = s.find("additionalItems"); extra != s.end()) a.rest = schema_ref{&*extra, part.base};
  } else if (items != s.end()) {
    a.rest = schema_ref{&*items, part.base};
  }
  return a;
}

/// Generation's strict default (json_extra_keys::forbid): no items after the positional ones
/// when a part the user wrote has prefixItems (draft 7: an `items` list) and no part says
/// anything of later items (items / additionalItems, or unevaluatedItems, which
/// resolve_unevaluated turns into a part with items). Made-up parts (a `not`'s complement is
/// "prefixItems [true, .., not S]") never close an array, nor does one without positional items;
/// one that could then not reach its minItems stays open rather than allow no value.
bool ends_after_prefix(const schema_compiler& c, const schema_node& n,
                       const std::vector<array_part>& parts, std::size_t positions,
                       std::uint64_t min_items) {
  if (!c.forbids_unstated_extras() || min_items > positions) return false;
  bool tuple = false;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const json& s = *n.array_parts[i].s;
    if (parts[i].rest || s.contains("unevaluatedItems")) return false;
    if (!c.is_synthetic(n.array_parts[i].s) &&
        (s.contains("prefixItems") || (s.contains("items") && s["items"].is_array())))
      tuple = true;
  }
  return tuple;
}

/// The part holding `contains`, if any (one at most).
const json* contains_part(schema_compiler& c, const schema_node& n, schema_ref& where) {
  const json* found = nullptr;
  for (const auto& p : n.array_parts) {
    if (!p.s->contains("contains")) continue;
    if (found) c.unsupported("contains", "given by more than one schema of a combination", p);
    found = p.s;
    where = p;
  }
  return found;
}

/// `[ items ]` where at least `m` items also match `contains`: (I,)* IX ((,I)* ,IX){m-1} (,I)*.
/// With maxContains M, items are IX or I-and-not-contains, counted in rules F(k), k <= M.
expr_id contains_array(schema_compiler& c, const std::vector<array_part>& parts, const schema_ref& where) {
  grammar& g = c.g();
  json_text& t = c.text();
  const json& s = *where.s;
  std::uint64_t m = 1;
  if (auto it = s.find("minContains"); it != s.end()) m = count_value(*it, "minContains");
  if (m > 100) c.unsupported("minContains", "more than 100 matching items to count", where);
  std::optional<std::uint64_t> max;
  if (auto it = s.find("maxContains"); it != s.end()) max = count_value(*it, "maxContains");
  if (max && *max > 100) c.unsupported("maxContains", "more than 100 matching items to count", where);
  conjunction item, matching;
  for (const auto& p : parts)
    if (p.rest) item.push_back(*p.rest);
  matching = item;
  matching.push_back({&s["contains"], where.base});
  expr_id i = item.empty() ? t.any_value() : c.value(item);
  expr_id close = g.sequence({t.ws(), g.literal("]")});
  expr_id open = g.sequence({g.literal("["), t.ws()});
  expr_id sep = g.sequence({t.ws(), g.literal(","), t.ws()});
  if (max && *max <= 100) {
    if (m > *max) return g.nothing();
    conjunction other = item;
    other.push_back(c.complement({&s["contains"], where.base}));
    expr_id x = c.value(matching), y = c.value(other);
    std::vector<rule_id> f(*max + 1);
    for (auto& r : f) r = g.fresh_rule("contains_count");
    for (std::uint64_t k = 0; k <= *max; ++k) {
      std::vector<expr_id> alts;
      if (k >= m) alts.push_back(close);
      alts.push_back(g.sequence({sep, y, g.ref(f[k])}));
      if (k < *max) alts.push_back(g.sequence({sep, x, g.ref(f[k + 1])}));
      g.define_rule(f[k], g.choice(std::move(alts)));
    }
    std::vector<expr_id> first;
    if (m == 0) first.push_back(close);
    first.push_back(g.sequence({y, g.ref(f[0])}));
    if (*max >= 1) first.push_back(g.sequence({x, g.ref(f[1])}));
    return g.sequence({open, g.choice(std::move(first))});
  }
  if (m == 0) {
    expr_id more = g.repeat(g.sequence({sep, i}), 0, k_unbounded);
    return g.sequence({open, g.choice({close, g.sequence({i, more, close})})});
  }
  expr_id ix = c.value(matching);
  expr_id before = g.repeat(g.sequence({i, sep}), 0, k_unbounded);
  expr_id between = g.repeat(g.sequence({sep, i}), 0, k_unbounded);
  std::vector<expr_id> body{open, before, ix};
  for (std::uint64_t k = 1; k < m; ++k) body.insert(body.end(), {between, sep, ix});
  body.insert(body.end(), {between, close});
  return g.sequence(std::move(body));
}

/// The values a conjunction allows when they are few scalars (null/boolean types or an enum).
std::optional<std::vector<json>> finite_domain(schema_compiler& c, const conjunction& conj) {
  if (conj.empty()) return std::nullopt;
  schema_node n = c.normalize(conj);
  if (n.never || n.types == 0) return std::vector<json>{};
  if (!n.groups.empty() || !n.unevaluated.empty()) return std::nullopt;
  std::vector<json> candidates;
  if (n.enum_values) {
    candidates = *n.enum_values;
  } else if ((n.types & ~(t_null | t_boolean)) == 0) {
    if (n.types & t_null) candidates.push_back(nullptr);
    if (n.types & t_boolean) candidates.insert(candidates.end(), {false, true});
  } else {
    return std::nullopt;
  }
  std::vector<json> out;
  for (const auto& v : candidates) {
    if (v.is_object() || v.is_array()) return std::nullopt;
    if (scalar_matches(c, v, n) && std::none_of(out.begin(), out.end(), [&](const json& x) { return json_equal(x, v); }))
      out.push_back(v);
  }
  return out;
}

/// uniqueItems over finite item sets: arrays of one domain as subsets (a rule per set of values
/// already written, at most 9 values), or, with positional items, every distinct array listed.
/// The values are written without exponents: 2^9 copies of each number's exponent spellings
/// outgrew the limits.
/// Null when refused (lenient: the caller builds the array without uniqueness).
std::optional<expr_id> unique_array(schema_compiler& c, const std::vector<std::optional<std::vector<json>>>& domains,
                                    std::uint64_t min_items, std::uint64_t max_items, const schema_ref& where) {
  grammar& g = c.g();
  json_text& t = c.text();
  expr_id close = g.sequence({t.ws(), g.literal("]")});
  expr_id sep = g.sequence({t.ws(), g.literal(","), t.ws()});
  auto refuse = [&](const char* why) -> std::optional<expr_id> {
    c.unsupported("uniqueItems", why, where);
    return std::nullopt;
  };
  if (domains.size() == 1) {  // one domain for every item
    if (!domains[0]) return refuse("distinct items are enforced only over at most 9 scalar values");
    const std::vector<json>& d = *domains[0];
    if (d.size() > 9) return refuse("distinct items are enforced only over at most 9 scalar values");
    std::vector<rule_id> u(std::size_t(1) << d.size());
    for (auto& r : u) r = g.fresh_rule("unique_items");
    for (std::size_t set = 0; set < u.size(); ++set) {
      std::uint64_t written = std::uint64_t(__builtin_popcountll(set));
      std::vector<expr_id> alts;
      if (written >= min_items) alts.push_back(close);
      if (written < max_items)
        for (std::size_t v = 0; v < d.size(); ++v)
          if (!((set >> v) & 1))
            alts.push_back(
                g.sequence({written ? sep : g.empty(), t.literal(d[v], /*number_exponents=*/false),
                            g.ref(u[set | (std::size_t(1) << v)])}));
      g.define_rule(u[set], g.choice(std::move(alts)));
    }
    return g.sequence({g.literal("["), t.ws(), g.ref(u[0])});
  }
  // Positional domains (the last one repeats up to max_items): list every distinct array.
  std::vector<expr_id> arrays;
  std::vector<const json*> stack;
  bool too_many = false;
  std::size_t visited = 0;
  std::function<void()> walk = [&]() {
    if (too_many) return;
    if (++visited > 20'000) return void(too_many = true);
    std::size_t k = stack.size();
    if (k >= min_items) {
      std::vector<expr_id> body{g.literal("["), t.ws()};
      for (std::size_t i = 0; i < k; ++i) {
        if (i) body.push_back(sep);
        body.push_back(t.literal(*stack[i], /*number_exponents=*/false));
      }
      body.push_back(close);
      arrays.push_back(g.sequence(std::move(body)));
      if (arrays.size() > 1000) return void(too_many = true);
    }
    if (k >= max_items) return;
    const auto& dom = domains[std::min(k, domains.size() - 1)];
    if (!dom) return void(too_many = true);
    for (const auto& v : *dom) {
      if (std::any_of(stack.begin(), stack.end(), [&](const json* x) { return json_equal(*x, v); })) continue;
      stack.push_back(&v);
      walk();
      stack.pop_back();
    }
  };
  walk();
  if (too_many) return refuse("distinct items are enforced only when the arrays are few (at most 1000) scalar lists");
  return g.choice(std::move(arrays));
}

}  // namespace

expr_id array_schema(schema_compiler& c, const schema_node& n) {
  if (n.array_parts.empty()) return c.text().any_array();
  grammar& g = c.g();
  json_text& t = c.text();
  std::vector<array_part> parts;
  std::uint64_t min_items = 0, max_items = UINT64_MAX;
  std::size_t positions = 0;
  for (const auto& p : n.array_parts) {
    parts.push_back(read_part(c, p));
    positions = std::max(positions, parts.back().prefix.size());
    if (auto it = p.s->find("minItems"); it != p.s->end())
      min_items = std::max(min_items, count_value(*it, "minItems"));
    if (auto it = p.s->find("maxItems"); it != p.s->end())
      max_items = std::min(max_items, count_value(*it, "maxItems"));
  }
  if (min_items > max_items) return g.nothing();
  schema_ref unique{nullptr, ""};
  for (const auto& p : n.array_parts)
    if (auto it = p.s->find("uniqueItems"); it != p.s->end() && *it == true && max_items > 1) unique = p;
  schema_ref where{nullptr, ""};
  if (contains_part(c, n, where)) {
    if (positions > 0 || min_items > 0 || max_items != UINT64_MAX)
      c.unsupported("contains", "combined with prefixItems or minItems/maxItems", where);
    if (unique.s) c.unsupported("uniqueItems", "combined with contains", unique);
    return contains_array(c, parts, where);
  }
  if (ends_after_prefix(c, n, parts, positions, min_items))
    max_items = std::min<std::uint64_t>(max_items, positions);
  if (unique.s) {
    std::vector<std::optional<std::vector<json>>> domains;
    auto conj_at = [&](std::size_t i) {
      conjunction conj;
      for (const auto& p : parts) {
        if (i < p.prefix.size()) conj.push_back(p.prefix[i]);
        else if (p.rest) conj.push_back(*p.rest);
      }
      return conj;
    };
    for (std::size_t i = 0; i <= positions; ++i) domains.push_back(finite_domain(c, conj_at(i)));
    if (auto e = unique_array(c, domains, min_items, max_items, unique)) return *e;
  }
  auto item_at = [&](std::size_t i) {  // schemas of item i (i >= positions: the tail)
    conjunction conj;
    for (const auto& p : parts) {
      if (i < p.prefix.size()) conj.push_back(p.prefix[i]);
      else if (p.rest) conj.push_back(*p.rest);
    }
    return conj.empty() ? t.any_value() : c.value(conj);
  };
  const std::uint64_t fixed = std::max<std::uint64_t>(positions, min_items);
  if (fixed > k_max_positions || (max_items != UINT64_MAX && max_items > k_max_positions && max_items > fixed))
    c.unsupported(min_items > k_max_positions ? "minItems" : "maxItems", "more than 10000 tracked positions", n.array_parts[0]);
  expr_id close = g.sequence({t.ws(), g.literal("]")});
  expr_id sep = g.sequence({t.ws(), g.literal(","), t.ws()});
  expr_id tail_item = item_at(positions);
  // The tail after `fixed` items: any number (up to max) of further tail items.
  rule_id tail = g.fresh_rule("array_tail");
  if (max_items == UINT64_MAX) {
    g.define_rule(tail, g.choice({close, g.sequence({sep, tail_item, g.ref(tail)})}));
  } else {
    std::uint64_t more = max_items > fixed ? max_items - fixed : 0;
    g.define_rule(tail, g.sequence({g.repeat(g.sequence({sep, tail_item}), 0, std::uint32_t(std::min<std::uint64_t>(more, k_max_positions))), close}));
  }
  // E(k), k = fixed..0, built backwards; E(0) has no leading comma.
  expr_id next = g.ref(tail);
  if (fixed == 0) {
    expr_id first = max_items == 0 ? close
                                   : g.choice({close, g.sequence({tail_item, max_items == UINT64_MAX ? g.ref(tail) : g.sequence({g.repeat(g.sequence({sep, tail_item}), 0, std::uint32_t(std::min<std::uint64_t>(max_items - 1, k_max_positions))), close})})});
    return g.sequence({g.literal("["), t.ws(), first});
  }
  for (std::uint64_t k = fixed; k-- > 0;) {
    rule_id e = g.fresh_rule("array_e");
    std::vector<expr_id> alts;
    if (k >= min_items) alts.push_back(close);
    if (k < max_items) alts.push_back(g.sequence({k == 0 ? g.empty() : sep, item_at(std::size_t(k)), next}));
    g.define_rule(e, g.choice(std::move(alts)));
    next = g.ref(e);
  }
  return g.sequence({g.literal("["), t.ws(), next});
}

}  // namespace di::grammar::json_detail
