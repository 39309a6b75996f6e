// Objects. Declared properties come in schema order, each at most once, required ones always;
// other keys follow (patternProperties, then additionalProperties; in generation none where the
// schema is silent, closes_unstated_keys), written as right-linear
// rules A(i) "nothing written yet, at property i" and B(i, c) "c members written" so that
// commas, requiredness and min/maxProperties stay linear in the number of properties. Key
// languages that must avoid declared names or other patterns are DFA intersections and
// complements over canonical string contents.
#include "common/error.hpp"
#include "runtime/grammar/json_schema/schema_compiler.hpp"
#include "runtime/grammar/regex.hpp"
#include "runtime/grammar/regular_language.hpp"

#include <algorithm>
#include <optional>
#include <set>

namespace di::grammar::json_detail {

namespace {

constexpr std::uint64_t k_max_count_states = 200'000;

struct object_plan {
  std::vector<std::string> names;             // declared, in schema order
  std::map<std::string, conjunction> values;  // value schemas of each declared name
  std::vector<std::string> required;         // in the order the schemas list them
  bool additional_allowed = true;             // keys matching no pattern may appear
  conjunction additional;                     // their value schemas
  // patternProperties by pattern text (several parts may list the same pattern): the value
  // schemas of keys matching it, with the additionalProperties of parts that do not list it.
  std::vector<std::pair<std::string, conjunction>> patterns;
  schema_ref pattern_owner{nullptr, ""};
  const json* property_names = nullptr;       // propertyNames (one part only)
  std::string names_base;
  std::uint64_t min_props = 0, max_props = UINT64_MAX;
};

void read_part_keywords(schema_compiler& c, object_plan& p, const schema_ref& part) {
  const json& s = *part.s;
  if (auto it = s.find("properties"); it != s.end())
    for (const auto& [name, sub] : it->items())
      if (std::find(p.names.begin(), p.names.end(), name) == p.names.end()) p.names.push_back(name);
  if (auto it = s.find("required"); it != s.end())
    for (const auto& r : *it)
      if (std::find(p.required.begin(), p.required.end(), r.get<std::string>()) == p.required.end())
        p.required.push_back(r.get<std::string>());
  if (auto it = s.find("patternProperties"); it != s.end()) {
    p.pattern_owner = {&*it, part.base};
    for (const auto& [pat, sub] : it->items()) {
      const std::string& key = pat;  // clang 14 (the fuzz build) cannot capture a binding
      auto at = std::find_if(p.patterns.begin(), p.patterns.end(),
                             [&](const auto& x) { return x.first == key; });
      if (at == p.patterns.end()) at = p.patterns.insert(p.patterns.end(), {pat, {}});
      at->second.push_back({&sub, part.base});
    }
  }
  if (auto it = s.find("propertyNames"); it != s.end()) {
    if (p.property_names) c.unsupported("propertyNames", "given by more than one schema of a combination", part);
    p.property_names = &*it;
    p.names_base = part.base;
  }
  if (auto it = s.find("minProperties"); it != s.end())
    p.min_props = std::max(p.min_props, count_value(*it, "minProperties"));
  if (auto it = s.find("maxProperties"); it != s.end())
    p.max_props = std::min(p.max_props, count_value(*it, "maxProperties"));
}

/// Generation's strict default (json_extra_keys::forbid): the object takes no keys beyond those
/// its conjunction declares -- named by any part's properties or required, or matching any
/// part's patternProperties -- when a part the user wrote has properties or patternProperties
/// and no part says anything of other keys (additionalProperties, or unevaluatedProperties:
/// resolve_unevaluated turns it into a part with additionalProperties). A key declared by one
/// allOf member is thus allowed beside another's (llama.cpp merges allOf the same way). Parts
/// made up by rewriting (a `not`'s complement, a dependency's alternatives) declare keys but
/// never close an object, and neither does a bare {"type": "object"} or one with only counts,
/// required or propertyNames: they describe no shape. An object that could then not reach its
/// minProperties stays open rather than allow no value (xgrammar refuses such a schema).
bool closes_unstated_keys(const schema_compiler& c, const schema_node& n, const object_plan& p) {
  if (!c.forbids_unstated_extras()) return false;
  bool shaped = false;
  for (const auto& part : n.object_parts) {
    const json& s = *part.s;
    if (s.contains("additionalProperties") || s.contains("unevaluatedProperties")) return false;
    if (!c.is_synthetic(part.s) && (s.contains("properties") || s.contains("patternProperties")))
      shaped = true;
  }
  return shaped && !(p.patterns.empty() && p.min_props > p.names.size());
}

object_plan plan_of(schema_compiler& c, const schema_node& n) {
  object_plan p;
  for (const auto& part : n.object_parts) read_part_keywords(c, p, part);
  for (const auto& r : p.required)
    if (std::find(p.names.begin(), p.names.end(), r) == p.names.end()) p.names.push_back(r);
  static const json k_false = false;
  for (const auto& name : p.names) {
    conjunction& conj = p.values[name];
    for (const auto& part : n.object_parts) {
      const json& s = *part.s;
      bool declared = s.contains("properties") && s["properties"].contains(name);
      if (declared) conj.push_back({&s["properties"][name], part.base});
      bool matched = false;
      if (auto pp = s.find("patternProperties"); pp != s.end())
        for (const auto& [pat, sub] : pp->items())
          if (c.regex_matches(pat, true, name)) conj.push_back({&sub, part.base}), matched = true;
      if (!declared && !matched && s.contains("additionalProperties")) conj.push_back({&s["additionalProperties"], part.base});
    }
    if (p.property_names && !scalar_matches(c, json(name), c.normalize({{p.property_names, p.names_base}})))
      conj.push_back({&k_false, ""});
  }
  for (const auto& part : n.object_parts) {
    auto it = part.s->find("additionalProperties");
    if (it == part.s->end()) continue;
    if (*it == false) p.additional_allowed = false;
    p.additional.push_back({&*it, part.base});
  }
  if (closes_unstated_keys(c, n, p)) p.additional_allowed = false;
  for (auto& [pat, conj] : p.patterns)
    for (const auto& part : n.object_parts) {
      auto pp = part.s->find("patternProperties");
      auto it = part.s->find("additionalProperties");
      if (it != part.s->end() && (pp == part.s->end() || !pp->contains(pat))) conj.push_back({&*it, part.base});
    }
  return p;
}

/// Canonical string content of `name` (between the quotes).
expr_id name_content(grammar& g, json_whitespace ws, const std::string& name) {
  json_text t(g, ws);
  std::vector<expr_id> chars;
  for (char32_t cp : decode_utf8(name)) chars.push_back(t.json_char(codepoint_set::single(cp)));
  return g.sequence(std::move(chars));
}

struct key_kind {
  expr_id key;          // quoted key language
  conjunction value;    // value schemas for such keys
};

/// Keys that are not declared: one kind per pattern, plus the additional keys.
std::vector<key_kind> undeclared_keys(schema_compiler& c, const object_plan& p, const schema_node& n) {
  grammar& g = c.g();
  json_whitespace ws = c.options().whitespace;
  std::vector<key_kind> kinds;
  if (p.patterns.empty() && !p.property_names && p.names.empty()) {
    if (p.additional_allowed) kinds.push_back({c.text().any_string(), p.additional});
    return kinds;
  }
  std::size_t limit = c.options().max_string_states;
  grammar scratch;
  json_text st(scratch, ws);
  regex_options ro;
  ro.flavor = regex_flavor::ecmascript;
  ro.search = true;
  ro.unicode_classes = false;
  ro.ecma_dot = true;
  ro.char_mapper = [ws](grammar& gg, const codepoint_set& cs) { return json_text(gg, ws).json_char(cs); };
  byte_dfa base = byte_dfa::from_expr(scratch, scratch.repeat(st.json_char(codepoint_set::all()), 0, k_unbounded), limit);
  if (!p.names.empty()) {
    std::vector<expr_id> names;
    for (const auto& nm : p.names) names.push_back(name_content(scratch, ws, nm));
    base = base.intersect(byte_dfa::from_expr(scratch, scratch.choice(names), limit).complement(), limit);
  }
  if (p.property_names) {
    schema_node pn = c.normalize({{p.property_names, p.names_base}});
    std::optional<expr_id> lang;  // none: no key at all (e.g. propertyNames: false)
    if (pn.enum_values) {
      std::vector<expr_id> alts;
      for (const auto& v : *pn.enum_values)
        if (v.is_string() && scalar_matches(c, v, pn)) alts.push_back(name_content(scratch, ws, v.get<std::string>()));
      if (!alts.empty()) lang = scratch.choice(std::move(alts));
    } else if (!pn.never && (pn.types & t_string)) {
      lang = string_content(c, pn, scratch);
    }
    base =
        base.intersect(lang ? byte_dfa::from_expr(scratch, *lang, limit) : byte_dfa::none(), limit);
  }
  byte_dfa rest = base;
  std::vector<byte_dfa> pattern_langs;
  for (const auto& [pat, value] : p.patterns) {
    byte_dfa lang = byte_dfa::from_expr(scratch, compile_regex(scratch, pat, ro), limit);
    byte_dfa keys = base.intersect(lang, limit).minimize();
    for (const auto& other : pattern_langs)
      if (!keys.intersect(other, limit).empty())
        c.unsupported("patternProperties", "patterns that overlap (a key matching two must satisfy both)", p.pattern_owner);
    pattern_langs.push_back(keys);
    rest = rest.intersect(lang.complement(), limit);
    if (!keys.empty()) kinds.push_back({c.text().quoted(keys.emit(g, "pattern_key")), value});
  }
  if (p.additional_allowed) {
    rest = rest.minimize();
    if (!rest.empty()) kinds.push_back({c.text().quoted(rest.emit(g, "additional_key")), p.additional});
  }
  return kinds;
}

}  // namespace

expr_id object_schema(schema_compiler& c, const schema_node& n) {
  if (n.object_parts.empty()) return c.text().any_object();
  grammar& g = c.g();
  json_text& t = c.text();
  object_plan p = plan_of(c, n);
  if (p.min_props > p.max_props) return g.nothing();
  auto member = [&](expr_id key, const conjunction& value) {
    return g.sequence({key, t.ws(), g.literal(":"), t.ws(), value.empty() ? t.any_value() : c.value(value)});
  };
  std::vector<key_kind> kinds = undeclared_keys(c, p, n);
  std::vector<expr_id> extra;
  for (const auto& k : kinds) extra.push_back(member(k.key, k.value));
  expr_id extra_member = g.choice(extra);
  const bool has_extra = !kinds.empty();
  // Counts matter only up to max (finite) or min (when unbounded above).
  const std::uint64_t cap = p.max_props != UINT64_MAX ? p.max_props : p.min_props;
  const std::size_t num = p.names.size();
  if (cap >= k_max_count_states || (num + 1) * (cap + 1) > k_max_count_states)  // no overflow
    c.unsupported(p.max_props != UINT64_MAX ? "maxProperties" : "minProperties", "counts too large to track", n.object_parts[0]);
  auto sat = [&](std::uint64_t k) { return p.max_props == UINT64_MAX ? std::min(k, cap) : k; };
  expr_id close = g.sequence({t.ws(), g.literal("}")});
  expr_id sep = g.sequence({t.ws(), g.literal(","), t.ws()});
  // B[i][k]: k members written, at declared property i; A[i]: none written yet.
  std::vector<std::vector<rule_id>> B(num + 1, std::vector<rule_id>(cap + 1));
  std::vector<rule_id> A(num + 1);
  for (std::size_t i = 0; i <= num; ++i) {
    A[i] = g.fresh_rule("object_a");
    for (std::uint64_t k = 0; k <= cap; ++k) B[i][k] = g.fresh_rule("object_b");
  }
  for (std::size_t i = num + 1; i-- > 0;) {
    bool last = i == num;
    bool required = !last && std::find(p.required.begin(), p.required.end(), p.names[i]) != p.required.end();
    expr_id kv = last ? extra_member : member(t.string_literal(p.names[i]), p.values[p.names[i]]);
    bool can_write = last ? has_extra : true;
    std::vector<expr_id> a_alts;
    if (last && p.min_props == 0) a_alts.push_back(close);
    if (!last && !required) a_alts.push_back(g.ref(A[i + 1]));
    if (can_write && p.max_props >= 1) a_alts.push_back(g.sequence({kv, g.ref(B[last ? i : i + 1][sat(1)])}));
    g.define_rule(A[i], g.choice(std::move(a_alts)));
    for (std::uint64_t k = 0; k <= cap; ++k) {
      if (!last && !required && can_write && k < p.max_props && sat(k + 1) == k) {
        // Skip or write, then the same rule: one reference, so that expanding the chain in
        // place stays linear in the number of properties.
        g.define_rule(B[i][k], g.sequence({g.choice({g.empty(), g.sequence({sep, kv})}), g.ref(B[i + 1][k])}));
        continue;
      }
      std::vector<expr_id> b_alts;
      if (last && k >= p.min_props) b_alts.push_back(close);
      if (!last && !required) b_alts.push_back(g.ref(B[i + 1][k]));
      if (can_write && k < p.max_props) b_alts.push_back(g.sequence({sep, kv, g.ref(B[last ? i : i + 1][sat(k + 1)])}));
      g.define_rule(B[i][k], g.choice(std::move(b_alts)));
    }
  }
  return g.sequence({g.literal("{"), t.ws(), g.ref(A[0])});
}

}  // namespace di::grammar::json_detail
