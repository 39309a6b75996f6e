// oneOf means exactly one alternative matches. A grammar can only offer "any of them", which is
// the same language when no value matches two alternatives; this proves that for the common
// shapes (different types, disjoint enums/consts, disjoint number ranges, a discriminating
// required property); otherwise alternative i becomes "A_i and not A_j for every j != i"
// (schema_negate.cpp), which fails by name where a complement is not expressible.
#include "runtime/grammar/json_schema/schema_compiler.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace di::grammar::json_detail {

namespace {

std::uint8_t value_types(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return t_null;
    case json::value_t::boolean: return t_boolean;
    case json::value_t::object: return t_object;
    case json::value_t::array: return t_array;
    case json::value_t::string: return t_string;
    default: {
      decimal d = to_decimal(v);
      return d.is_integer() ? t_integer : t_number;
    }
  }
}

/// Types a node can produce: its enum's types, or its type keyword ("number" covers integers).
std::uint8_t effective_types(const schema_node& n) {
  if (n.never) return 0;
  if (n.enum_values) {
    std::uint8_t m = 0;
    for (const auto& v : *n.enum_values) m |= value_types(v);
    return m & n.types;
  }
  std::uint8_t m = n.types;
  if (m & t_number) m |= t_integer;
  return m;
}

bool types_disjoint(const schema_node& a, const schema_node& b) {
  std::uint8_t ta = effective_types(a), tb = effective_types(b);
  // A non-integer number alternative and an integer one overlap only through integers.
  return (ta & tb) == 0;
}

bool enum_excludes(schema_compiler& c, const schema_node& with_enum, const schema_node& other) {
  if (!with_enum.enum_values) return false;
  for (const auto& v : *with_enum.enum_values) {
    if (!scalar_matches(c, v, with_enum, /*listed=*/true)) continue;
    if (v.is_object() || v.is_array()) return false;
    bool in_other_enum = !other.enum_values || std::any_of(other.enum_values->begin(), other.enum_values->end(),
                                                           [&](const json& x) { return json_equal(x, v); });
    if (in_other_enum && scalar_matches(c, v, other) && (other.types & value_types(v))) return false;
  }
  return true;
}

bool ranges_disjoint(const schema_node& a, const schema_node& b) {
  if ((effective_types(a) | effective_types(b)) & ~(t_number | t_integer)) return false;
  auto below = [](const std::optional<bound>& hi, const std::optional<bound>& lo) {
    if (!hi || !lo) return false;
    int c = compare(hi->value, lo->value);
    return c < 0 || (c == 0 && (hi->exclusive || lo->exclusive));
  };
  return below(a.maximum, b.minimum) || below(b.maximum, a.minimum);
}

struct object_view {
  std::set<std::string> required;
  std::map<std::string, conjunction> properties;
  bool closed = false;  // additionalProperties: false and no patternProperties
};

object_view view_of(const schema_node& n) {
  object_view v;
  for (const auto& part : n.object_parts) {
    const json& s = *part.s;
    if (auto r = s.find("required"); r != s.end())
      for (const auto& name : *r) v.required.insert(name.get<std::string>());
    if (auto p = s.find("properties"); p != s.end())
      for (const auto& [name, sub] : p->items()) v.properties[name].push_back({&sub, part.base});
    if (auto a = s.find("additionalProperties"); a != s.end() && *a == false && !s.contains("patternProperties"))
      v.closed = true;
  }
  return v;
}

bool objects_disjoint(schema_compiler& c, const schema_node& a, const schema_node& b) {
  if ((effective_types(a) | effective_types(b)) != t_object) return false;
  object_view va = view_of(a), vb = view_of(b);
  for (const auto& name : va.required) {
    if (vb.closed && !vb.properties.count(name)) return true;
    if (!vb.required.count(name) || !va.properties.count(name) || !vb.properties.count(name)) continue;
    schema_node pa = c.normalize(va.properties[name]), pb = c.normalize(vb.properties[name]);
    if (types_disjoint(pa, pb) || enum_excludes(c, pa, pb) || enum_excludes(c, pb, pa)) return true;
  }
  for (const auto& name : vb.required)
    if (va.closed && !va.properties.count(name)) return true;
  return false;
}

}  // namespace

bool schema_compiler::one_of_disjoint(const std::vector<schema_node>& alts) {
  for (std::size_t i = 0; i < alts.size(); ++i) {
    for (std::size_t j = i + 1; j < alts.size(); ++j) {
      const schema_node &a = alts[i], &b = alts[j];
      if (!(types_disjoint(a, b) || enum_excludes(*this, a, b) || enum_excludes(*this, b, a) || ranges_disjoint(a, b) ||
            objects_disjoint(*this, a, b)))
        return false;
    }
  }
  return true;
}

}  // namespace di::grammar::json_detail
