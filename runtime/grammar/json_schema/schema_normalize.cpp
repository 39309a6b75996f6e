// Normalization: merging the keywords of a conjunction of schemas into one schema_node, with
// the keyword tables (enforced / annotation / rejected) that decide what a schema may use.
#include "common/error.hpp"
#include "common/json_brief.hpp"
#include "runtime/grammar/json_schema/formats.hpp"
#include "runtime/grammar/json_schema/schema_compiler.hpp"

#include <algorithm>
#include <set>

namespace di::grammar::json_detail {

namespace {

const std::set<std::string, std::less<>> k_annotations = {
    "$schema", "$id", "$comment", "$defs", "definitions", "$anchor", "$vocabulary", "title",
    "description", "default", "examples", "deprecated", "readOnly", "writeOnly", "contentMediaType",
    "contentEncoding", "contentSchema", "$dynamicAnchor", "$recursiveAnchor", "then", "else"};
const std::set<std::string, std::less<>> k_object_keywords = {
    "properties", "required", "additionalProperties", "patternProperties", "propertyNames",
    "minProperties", "maxProperties"};
const std::set<std::string, std::less<>> k_array_keywords = {"items", "prefixItems", "additionalItems",
                                                             "minItems", "maxItems"};
const std::vector<std::string> k_rejected = {
    "$dynamicRef / $recursiveRef when several resources define the anchor and the root does not",
    "contains (with prefixItems, minItems/maxItems, or in several schemas of a combination)",
    "minContains / maxContains above 100", "unevaluated* beside an anyOf of more than 4 alternatives",
    "uniqueItems (true) unless items range over at most 9 scalar values or the arrays are few (<= 1000)",
    "not / if / overlapping oneOf over multipleOf, additionalProperties, patternProperties, propertyNames, "
    "uniqueItems, minContains > 1, or items after prefixItems (their complements)",
    "oneOf with more than 8 alternatives that may overlap", "overlapping patternProperties",
    "multipleOf (non-decimal multiples of non-integers)", "remote $ref"};

std::uint8_t type_mask(const std::string& t) {
  if (t == "null") return t_null;
  if (t == "boolean") return t_boolean;
  if (t == "object") return t_object;
  if (t == "array") return t_array;
  if (t == "string") return t_string;
  if (t == "number") return t_number | t_integer;
  if (t == "integer") return t_integer;
  DI_FAIL("JSON Schema: unknown type '{}'", t);
}

void tighten_lower(std::optional<bound>& cur, bound b) {
  if (!cur) return void(cur = b);
  int c = compare(b.value, cur->value);
  if (c > 0 || (c == 0 && b.exclusive)) cur = b;
}
void tighten_upper(std::optional<bound>& cur, bound b) {
  if (!cur) return void(cur = b);
  int c = compare(b.value, cur->value);
  if (c < 0 || (c == 0 && b.exclusive)) cur = b;
}

}  // namespace

std::uint64_t count_value(const json& v, const char* keyword) {
  DI_CHECK(v.is_number() && v.get<double>() >= 0 && std::floor(v.get<double>()) == v.get<double>(),
           "JSON Schema: '{}' must be a non-negative integer, got {}", keyword, json_brief(v));
  const double d = v.get<double>();
  return d >= 1.8e19 ? UINT64_MAX : std::uint64_t(d);
}

bool json_equal(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) return compare(to_decimal(a), to_decimal(b)) == 0;
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (!json_equal(a[i], b[i])) return false;
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [k, v] : a.items())
      if (!b.contains(k) || !json_equal(v, b[k])) return false;
    return true;
  }
  return a == b;
}

bool schema_node::trivial() const {
  return !never && types == t_all && !enum_values && min_length == 0 && max_length == UINT64_MAX &&
         patterns.empty() && formats.empty() && anti_patterns.empty() && excluded_strings.empty() && !minimum && !maximum && multiple_of.empty() &&
         object_parts.empty() && array_parts.empty() && groups.empty() && unevaluated.empty();
}

schema_node schema_compiler::normalize(const conjunction& c) {
  schema_node n;
  for (const auto& s : c) absorb(n, s);
  return n;
}

void schema_compiler::absorb(schema_node& n, const schema_ref& s) {
  if (s.s->is_boolean()) {
    if (!s.s->get<bool>()) n.never = true;
    return;
  }
  DI_CHECK(s.s->is_object(), "JSON Schema: a schema must be an object or a boolean, got {}",
           json_brief(*s.s));
  const std::string base = index_.base_of(s.s, s.base);
  auto absorb_ref = [&](const json& ref, const char* keyword) {
    DI_CHECK(ref.is_string(), "JSON Schema: {} must be a string", keyword);
    auto resolved = dynamic_target(base, keyword, ref.get<std::string>(), s);
    if (!resolved) return;
    auto target = *resolved;
    if (std::find(absorbing_.begin(), absorbing_.end(), target.schema) != absorbing_.end())
      unsupported("$ref", "a recursive $ref merged with sibling keywords or allOf", s);
    // Each hop merges the target into this schema one call deeper: bound the chain before it
    // bounds the stack (a 12,000-link chain overflowed it).
    DI_CHECK(absorbing_.size() < k_max_ref_chain,
             "JSON Schema: a chain of more than {} $refs, each resolving to another $ref",
             k_max_ref_chain);
    absorbing_.push_back(target.schema);
    absorb(n, {target.schema, target.base});
    absorbing_.pop_back();
  };
  if (draft7_ && s.s->contains("$ref")) return absorb_ref((*s.s)["$ref"], "$ref");  // siblings are ignored
  const std::size_t open = n.open_scopes.size();
  for (const char* k : {"unevaluatedProperties", "unevaluatedItems"}) {
    if (!s.s->contains(k)) continue;
    n.open_scopes.push_back(n.unevaluated.size());
    n.unevaluated.push_back({k == std::string("unevaluatedItems"), {s.s, base}, {}});
  }
  // Keywords in document order, so that merged properties keep the order they are written in.
  for (const auto& [key, v] : s.s->items()) {
    if (key == "$ref" || key == "$dynamicRef" || key == "$recursiveRef") absorb_ref(v, key.c_str());
    else absorb_keyword(n, {s.s, base}, key, v);
  }
  n.open_scopes.resize(open);
}

std::optional<schema_index::target> schema_compiler::dynamic_target(const std::string& base, const std::string& keyword,
                                                                    const std::string& ref, const schema_ref& where) {
  if (keyword == "$ref") return index_.resolve(base, ref);
  auto t = index_.resolve_dynamic(base, ref, keyword == "$recursiveRef");
  if (!t) unsupported(keyword, "several schema resources define its anchor, so the dynamic scope decides", where);
  return t;
}

void schema_compiler::add_part(schema_node& n, std::vector<schema_ref>& parts, const schema_ref& s) {
  if (!parts.empty() && parts.back().s == s.s) return;
  parts.push_back(s);
  for (std::size_t i : n.open_scopes) n.unevaluated[i].evaluators.push_back(s);
}

void schema_compiler::absorb_negated(schema_node& n, const schema_ref& s) {
  // A schema under `not` evaluates nothing for unevaluated* around it.
  std::vector<std::size_t> open;
  open.swap(n.open_scopes);
  absorb(n, {negation(s), index_.base_of(s.s, s.base)});
  n.open_scopes.swap(open);
}

void schema_compiler::absorb_dependencies(schema_node& n, const schema_ref& s, const std::string& key, const json& v) {
  DI_CHECK(v.is_object(), "JSON Schema: {} must be an object", key);
  // "if `name` is present then ..." == anyOf [ {properties: {name: false}}, ... ]
  // (exclusive: the schema applies only when the property is there, for unevaluated*)
  for (const auto& [name, dep] : v.items()) {
    schema_node::group grp{false, {}, s, true, n.open_scopes};
    grp.alternatives.push_back({intern(json{{"properties", json{{name, false}}}}), s.base});
    json present;
    if (dep.is_array()) {
      json req = dep;
      req.push_back(name);
      present = json{{"required", req}};
    } else {
      present = json{{"required", json::array({name})},
                     {"allOf", json::array({ref_marker({&dep, s.base})})}};
    }
    grp.alternatives.push_back({intern(std::move(present)), s.base});
    n.groups.push_back(std::move(grp));
  }
}

void schema_compiler::absorb_keyword(schema_node& n, const schema_ref& s, const std::string& key, const json& v) {
  if (k_annotations.count(key) || (key == "id" && dialect_ == json_schema_draft::draft4)) return;
  if (k_object_keywords.count(key) || key == "unevaluatedProperties") return add_part(n, n.object_parts, s);
  if (key == "contains" || key == "unevaluatedItems") return add_part(n, n.array_parts, s);  // array_schema.cpp reads contains/min/maxContains
  if (key == "minContains" || key == "maxContains") return;  // without `contains` they do nothing
  if (k_array_keywords.count(key) || (key == "uniqueItems" && v == false)) {
    if (key == "items" || key == "prefixItems" || key == "additionalItems" || key == "minItems" || key == "maxItems")
      add_part(n, n.array_parts, s);
    return;
  }
  if (key == "type") {
    std::uint8_t m = 0;
    if (v.is_string()) m = type_mask(v.get<std::string>());
    else for (const auto& t : v) m |= type_mask(t.get<std::string>());
    n.types &= m;
  } else if (key == "enum" || key == "const") {
    std::vector<json> values = key == "const" ? std::vector<json>{v} : std::vector<json>(v.begin(), v.end());
    if (n.enum_values) {
      std::vector<json> kept;
      for (const auto& x : *n.enum_values)
        if (std::any_of(values.begin(), values.end(), [&](const json& y) { return json_equal(x, y); })) kept.push_back(x);
      values = std::move(kept);
    }
    n.enum_values = std::move(values);
  } else if (key == "minLength") {
    n.min_length = std::max(n.min_length, count_value(v, "minLength"));
  } else if (key == "maxLength") {
    n.max_length = std::min(n.max_length, count_value(v, "maxLength"));
  } else if (key == "pattern") {
    DI_CHECK(v.is_string(), "JSON Schema: pattern must be a string");
    n.patterns.push_back(v.get<std::string>());
  } else if (key == "format") {
    absorb_format(n, s, v);
  } else if (key == "minimum" || key == "maximum" || key == "exclusiveMinimum" || key == "exclusiveMaximum") {
    absorb_bound(n, *s.s, key, v);
  } else if (key == "multipleOf") {
    DI_CHECK(v.is_number() && v.get<double>() > 0, "JSON Schema: multipleOf must be a positive number");
    n.multiple_of.push_back(to_decimal(v));
  } else if (key == "allOf") {
    for (const auto& sub : v) absorb(n, {&sub, s.base});
  } else if (key == "anyOf" || key == "oneOf") {
    schema_node::group grp{key == "oneOf", {}, s, false, n.open_scopes};
    for (const auto& sub : v) grp.alternatives.push_back({&sub, s.base});
    n.groups.push_back(std::move(grp));
  } else if (key == "not") {
    absorb_negated(n, {&v, s.base});
  } else if (key == "if") {
    absorb_if(n, s);
  } else if (key == "$di_types") {  // placeholders of synthetic schemas (schema_negate.cpp)
    n.types &= v.get<std::uint8_t>();
  } else if (key == "$di_ref") {
    schema_ref m = marked_[v.get<std::size_t>()];  // a copy: absorbing may grow marked_
    absorb(n, m);
  } else if (key == "$di_not") {
    absorb_negated(n, schema_ref(marked_[v.get<std::size_t>()]));
  } else if (key == "$di_refuse") {  // an unexpressible complement (schema_negate.cpp), unless pruned
    auto own = s.s->find("$di_types");
    if (own != s.s->end() && (n.types & own->get<std::uint8_t>()) == 0) return;
    unsupported(v[0].get<std::string>(),
                "its complement (under not, if/then/else or an overlapping oneOf) " + v[1].get<std::string>(),
                marked_[v[2].get<std::size_t>()]);
  } else if (key == "$di_anti_pattern") {
    n.anti_patterns.push_back(v.get<std::string>());
  } else if (key == "$di_not_strings") {
    for (const auto& x : v) n.excluded_strings.push_back(x.get<std::string>());
  } else if (key == "uniqueItems") {  // array_schema.cpp enforces it over small finite item sets
    DI_CHECK(v.is_boolean(), "JSON Schema: uniqueItems must be a boolean");
    add_part(n, n.array_parts, s);
  } else if (key == "dependentRequired" || key == "dependentSchemas" || key == "dependencies") {
    absorb_dependencies(n, s, key, v);
  } else {
    warn("unknown keyword '" + key + "' ignored (JSON Schema treats unknown keywords as annotations)");
  }
}

void schema_compiler::absorb_format(schema_node& n, const schema_ref& s, const json& v) {
  DI_CHECK(v.is_string(), "JSON Schema: format must be a string");
  std::string f = v.get<std::string>();
  if (!options_.format_assertion) return;
  static const std::map<std::string, std::pair<const char*, const char*>> numeric = {
      {"int8", {"-128", "127"}}, {"int16", {"-32768", "32767"}}, {"int32", {"-2147483648", "2147483647"}},
      {"int64", {"-9223372036854775808", "9223372036854775807"}}, {"uint8", {"0", "255"}},
      {"uint16", {"0", "65535"}}, {"uint32", {"0", "4294967295"}}, {"uint64", {"0", "18446744073709551615"}}};
  if (auto it = numeric.find(f); it != numeric.end()) {
    tighten_lower(n.minimum, {parse_decimal(it->second.first), false});
    tighten_upper(n.maximum, {parse_decimal(it->second.second), false});
    return;
  }
  if (f == "float" || f == "double") return;
  // Formats of JSON Schema's own vocabulary that we do not enforce: left as annotations they
  // would let any string through where the schema names a definite language.
  static const std::set<std::string, std::less<>> defined_unenforced = {"idn-email", "idn-hostname",
                                                                        "regex"};
  if (format_regex(f)) {
    n.formats.push_back(f);
  } else if (defined_unenforced.count(f)) {
    unsupported("format", "'" + f + "' is a format JSON Schema defines that is not enforced here",
                s);
  } else {
    warn("unknown format '" + f + "' not enforced");
  }
}

void schema_compiler::absorb_bound(schema_node& n, const json& schema, const std::string& key, const json& v) {
  bool lower = key == "minimum" || key == "exclusiveMinimum";
  if (v.is_boolean()) return;  // draft 4 flag: read with minimum / maximum below
  DI_CHECK(v.is_number(), "JSON Schema: {} must be a number", key);
  bool exclusive = key.rfind("exclusive", 0) == 0;
  if (!exclusive) {  // draft 4: "exclusiveMaximum": true modifies "maximum"
    auto flag = schema.find(lower ? "exclusiveMinimum" : "exclusiveMaximum");
    exclusive = flag != schema.end() && flag->is_boolean() && flag->get<bool>();
  }
  bound b{to_decimal(v), exclusive};
  if (lower) tighten_lower(n.minimum, b);
  else tighten_upper(n.maximum, b);
}

void schema_compiler::absorb_if(schema_node& n, const schema_ref& s) {
  // if/then/else == anyOf [ allOf [if, then], allOf [not if, else] ]
  const json& o = *s.s;
  // Without then/else `if` still matters to unevaluated* (its annotations when it matches).
  if (!o.contains("then") && !o.contains("else") && n.open_scopes.empty()) return;
  static const json k_true = true;
  const json& then_ = o.contains("then") ? o["then"] : k_true;
  const json& else_ = o.contains("else") ? o["else"] : k_true;
  const json* yes = intern(
      json{{"allOf", json::array({ref_marker({&o["if"], s.base}), ref_marker({&then_, s.base})})}});
  const json* no = intern(
      json{{"allOf", json::array({not_marker({&o["if"], s.base}), ref_marker({&else_, s.base})})}});
  n.groups.push_back({false, {{yes, s.base}, {no, s.base}}, s, true, n.open_scopes});
}

}  // namespace di::grammar::json_detail

namespace di::grammar {

const std::vector<std::string>& rejected_json_schema_keywords() { return json_detail::k_rejected; }

const std::vector<std::string>& supported_json_schema_keywords() {
  static const std::vector<std::string> k = {
      "type", "enum", "const", "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
      "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "properties", "required", "additionalProperties",
      "patternProperties", "propertyNames", "minProperties", "maxProperties", "items", "prefixItems",
      "additionalItems", "minItems", "maxItems", "contains", "minContains", "maxContains", "allOf", "anyOf",
      "oneOf", "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies",
      "unevaluatedProperties", "unevaluatedItems", "$ref", "$dynamicRef", "$recursiveRef", "$defs",
      "definitions", "$id", "$anchor", "$dynamicAnchor", "$recursiveAnchor"};
  return k;
}

}  // namespace di::grammar
