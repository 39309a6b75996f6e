// Complements of schemas, for `not`, if/then/else and overlapping oneOf. A schema is a
// conjunction of its type and its keywords, so its complement is a disjunction: "another type",
// or "this type and keyword k fails" for each k. Each failing keyword is itself a schema
// (minLength n fails = maxLength n-1; properties {a: S} fails = required a and a: not S; allOf
// fails = some member fails ...), written as a synthetic schema whose subschemas are
// placeholders ("$di_ref" / "$di_not") resolved lazily, so that recursive schemas negate into
// recursive rules. A keyword whose failure is not context-free (multipleOf, uniqueItems,
// additionalProperties...) is refused by name.
#include "common/error.hpp"
#include "common/json_brief.hpp"
#include "runtime/grammar/json_schema/formats.hpp"
#include "runtime/grammar/json_schema/schema_compiler.hpp"

#include <algorithm>
#include <set>

namespace di::grammar::json_detail {

namespace {

const std::set<std::string, std::less<>> k_ignored = {
    "$schema", "$id", "$comment", "$defs", "definitions", "$anchor", "$vocabulary", "title",
    "description", "default", "examples", "deprecated", "readOnly", "writeOnly", "contentMediaType",
    "contentEncoding", "contentSchema", "$dynamicAnchor", "$recursiveAnchor", "then", "else",
    "minContains", "maxContains", "additionalItems", "$di_types"};

std::uint8_t mask_of(const json& t) {
  auto one = [](const std::string& n) -> std::uint8_t {
    if (n == "null") return t_null;
    if (n == "boolean") return t_boolean;
    if (n == "object") return t_object;
    if (n == "array") return t_array;
    if (n == "string") return t_string;
    if (n == "number") return t_number | t_integer;
    if (n == "integer") return t_integer;
    DI_FAIL("JSON Schema: unknown type '{}'", n);
  };
  if (t.is_string()) return one(t.get<std::string>());
  std::uint8_t m = 0;
  for (const auto& x : t) m |= one(x.get<std::string>());
  return m;
}

json typed(std::uint8_t types, json body = json::object()) {
  body["$di_types"] = types;
  return body;
}

bool is_true(const json& s) { return s == true || (s.is_object() && s.empty()); }

std::uint64_t count_of(const json& v, const std::string& key) {
  return count_value(v, key.c_str());
}

}  // namespace

namespace {
std::size_t marker_id(std::vector<schema_ref>& marked,
                      std::map<std::pair<const json*, std::string>, std::size_t>& ids,
                      const schema_ref& s) {
  auto [it, added] = ids.try_emplace({s.s, s.base}, marked.size());
  if (added) marked.push_back(schema_ref(s));
  return it->second;
}
}  // namespace

json schema_compiler::ref_marker(const schema_ref& s) {
  return json{{"$di_ref", marker_id(marked_, marker_ids_, s)}};
}

json schema_compiler::not_marker(const schema_ref& s) {
  return json{{"$di_not", marker_id(marked_, marker_ids_, s)}};
}

const json* schema_compiler::intern(json schema) {
  std::string key = schema.dump();
  if (auto it = interned_.find(key); it != interned_.end()) return it->second;
  synthetic_.push_back(std::move(schema));
  interned_.emplace(std::move(key), &synthetic_.back());
  synthetic_addresses_.insert(&synthetic_.back());
  return &synthetic_.back();
}

const json* schema_compiler::negation(const schema_ref& s) {
  static const json k_true = true, k_false = false;
  if (s.s->is_boolean()) return s.s->get<bool>() ? &k_false : &k_true;
  const std::string base = index_.base_of(s.s, s.base);
  auto key = std::make_pair(s.s, base);
  if (auto it = negations_.find(key); it != negations_.end()) return it->second;
  DI_CHECK(std::find(negating_.begin(), negating_.end(), s.s) == negating_.end(),
           "JSON Schema: the complement of a schema that refers to itself through $ref alone");
  DI_CHECK(negating_.size() < 64, "JSON Schema: complements nested more than 64 levels");
  negating_.push_back(s.s);
  struct pop {
    std::vector<const json*>& v;
    ~pop() { v.pop_back(); }
  } guard{negating_};
  if (s.s->is_object() && s.s->contains("$ref") && (draft7_ || s.s->size() == 1)) {
    DI_CHECK((*s.s)["$ref"].is_string(), "JSON Schema: $ref must be a string");
    auto target = index_.resolve(base, (*s.s)["$ref"].get<std::string>());
    const json* r = negation({target.schema, target.base});
    negations_.emplace(key, r);
    return r;
  }
  const json* r = intern(negate_object({s.s, base}));
  negations_.emplace(key, r);
  return r;
}

json schema_compiler::negate_object(const schema_ref& s) {
  DI_CHECK(s.s->is_object(), "JSON Schema: a schema must be an object or a boolean, got {}",
           json_brief(*s.s));
  const json& o = *s.s;
  std::uint8_t types = t_all;
  if (auto t = o.find("type"); t != o.end()) types &= mask_of(*t);
  if (auto t = o.find("$di_types"); t != o.end()) types &= t->get<std::uint8_t>();
  json alts = json::array();
  if (types != t_all) alts.push_back(typed(std::uint8_t(~types & t_all)));
  auto fails = [&](std::uint8_t own, json body) {  // "is of a type the keyword constrains, and fails it"
    if (types & own) alts.push_back(typed(std::uint8_t(types & own), std::move(body)));
  };
  // A failure that cannot be expressed is refused when it is used: an alternative of types the
  // value cannot have (e.g. "an object failing additionalProperties" beside an array) is pruned.
  auto refuse = [&](std::uint8_t own, const std::string& key, const std::string& why) {
    marked_.push_back(s);
    fails(own, json{{"$di_refuse", json::array({key, why, marked_.size() - 1})}});
  };
  const std::uint8_t numbers = t_number | t_integer;
  for (const auto& [key, v] : o.items()) {
    if (k_ignored.count(key) || key == "type" || (key == "id" && dialect_ == json_schema_draft::draft4)) continue;
    if (key == "format") {
      // Enforced formats fail as strings outside the format's (full-match) regex; numeric
      // formats would fail as bounds, which is not supported; unknown ones never fail.
      static const std::set<std::string, std::less<>> numeric = {"int8", "int16", "int32", "int64", "uint8",
                                                                 "uint16", "uint32", "uint64"};
      if (!options_.format_assertion || !v.is_string() || v == "float" || v == "double") continue;
      if (numeric.count(v.get<std::string>())) refuse(numbers, key, "is not supported for numeric formats");
      else if (auto re = format_regex(v.get<std::string>())) fails(t_string, json{{"$di_anti_pattern", "^(?:" + *re + ")$"}});
    } else if (key == "enum" || key == "const") {
      std::vector<json> values = key == "const" ? std::vector<json>{v} : std::vector<json>(v.begin(), v.end());
      bool has_null = false, has_true = false, has_false = false;
      std::vector<json> nums, strings;
      bool structured[2] = {false, false};
      for (const auto& x : values) {
        if (x.is_null()) has_null = true;
        else if (x.is_boolean()) (x.get<bool>() ? has_true : has_false) = true;
        else if (x.is_number()) nums.push_back(x);
        else if (x.is_string()) strings.push_back(x);
        else structured[x.is_array() ? 1 : 0] = true;
      }
      if (!has_null) fails(t_null, json::object());
      if (!has_true || !has_false) fails(t_boolean, has_true ? json{{"const", false}} : has_false ? json{{"const", true}} : json::object());
      std::sort(nums.begin(), nums.end(), [](const json& a, const json& b) { return compare(to_decimal(a), to_decimal(b)) < 0; });
      if (nums.empty()) fails(numbers, json::object());
      for (std::size_t i = 0; i <= nums.size() && !nums.empty(); ++i) {
        json gap = json::object();  // the open interval between consecutive excluded numbers
        if (i > 0) gap["exclusiveMinimum"] = nums[i - 1];
        if (i < nums.size()) gap["exclusiveMaximum"] = nums[i];
        fails(numbers, gap);
      }
      fails(t_string, strings.empty() ? json::object() : json{{"$di_not_strings", strings}});
      if (structured[0] && (types & t_object)) refuse(t_object, key, "for object values is not supported");
      else fails(t_object, json::object());
      if (structured[1] && (types & t_array)) refuse(t_array, key, "for array values is not supported");
      else fails(t_array, json::object());
    } else if (key == "minimum" || key == "maximum" || key == "exclusiveMinimum" || key == "exclusiveMaximum") {
      if (v.is_boolean()) continue;  // draft 4 flag, read with minimum / maximum
      bool lower = key == "minimum" || key == "exclusiveMinimum";
      bool exclusive = key.rfind("exclusive", 0) == 0;
      if (!exclusive) {
        auto flag = o.find(lower ? "exclusiveMinimum" : "exclusiveMaximum");
        exclusive = flag != o.end() && flag->is_boolean() && flag->get<bool>();
      }
      // x >= m fails as x < m; x > m fails as x <= m.
      std::string flipped = lower ? (exclusive ? "maximum" : "exclusiveMaximum") : (exclusive ? "minimum" : "exclusiveMinimum");
      fails(numbers, json{{flipped, v}});
    } else if (key == "minLength") {
      if (count_of(v, key) > 0) fails(t_string, json{{"maxLength", count_of(v, key) - 1}});
    } else if (key == "maxLength") {
      // Nothing has more than 2^64 - 1: nothing fails a saturated bound.
      if (count_of(v, key) < UINT64_MAX) fails(t_string, json{{"minLength", count_of(v, key) + 1}});
    } else if (key == "pattern") {
      fails(t_string, json{{"$di_anti_pattern", v}});
    } else if (key == "$di_anti_pattern") {
      fails(t_string, json{{"pattern", v}});
    } else if (key == "$di_not_strings") {
      fails(t_string, json{{"enum", v}});
    } else if (key == "minProperties") {
      if (count_of(v, key) > 0) fails(t_object, json{{"maxProperties", count_of(v, key) - 1}});
    } else if (key == "maxProperties") {
      // Nothing has more than 2^64 - 1: nothing fails a saturated bound.
      if (count_of(v, key) < UINT64_MAX)
        fails(t_object, json{{"minProperties", count_of(v, key) + 1}});
    } else if (key == "minItems") {
      if (count_of(v, key) > 0) fails(t_array, json{{"maxItems", count_of(v, key) - 1}});
    } else if (key == "maxItems") {
      // Nothing has more than 2^64 - 1: nothing fails a saturated bound.
      if (count_of(v, key) < UINT64_MAX) fails(t_array, json{{"minItems", count_of(v, key) + 1}});
    } else if (key == "required") {
      for (const auto& name : v) fails(t_object, json{{"properties", json{{name.get<std::string>(), false}}}});
    } else if (key == "properties") {
      for (const auto& [name, sub] : v.items())
        if (!is_true(sub))
          fails(t_object, json{{"required", json::array({name})}, {"properties", json{{name, not_marker({&sub, s.base})}}}});
    } else if (key == "dependentRequired" || key == "dependentSchemas" || key == "dependencies") {
      for (const auto& [name, dep] : v.items()) {
        if (dep.is_array()) {
          for (const auto& other : dep)
            fails(t_object, json{{"required", json::array({name})}, {"properties", json{{other.get<std::string>(), false}}}});
        } else if (!is_true(dep)) {
          fails(t_object, json{{"required", json::array({name})}, {"allOf", json::array({not_marker({&dep, s.base})})}});
        }
      }
    } else if (key == "additionalProperties" || key == "propertyNames" || key == "unevaluatedProperties") {
      if (!is_true(v)) refuse(t_object, key, "needs 'some key' constraints that are not supported");
    } else if (key == "patternProperties") {
      for (const auto& [pat, sub] : v.items())
        if (!is_true(sub)) refuse(t_object, key, "needs 'some key' constraints that are not supported");
    } else if (key == "items" || key == "prefixItems") {
      bool tuple = key == "prefixItems" || v.is_array();
      if (tuple) {
        for (std::size_t i = 0; i < v.size(); ++i) {
          if (is_true(v[i])) continue;
          json prefix = json::array();
          for (std::size_t k = 0; k < i; ++k) prefix.push_back(true);
          prefix.push_back(not_marker({&v[i], s.base}));
          fails(t_array, json{{"minItems", i + 1}, {draft7_ ? "items" : "prefixItems", prefix}});
        }
        auto rest = o.find(key == "prefixItems" ? "items" : "additionalItems");
        if (rest != o.end() && !is_true(*rest) && v.size() > 0)
          refuse(t_array, key == "prefixItems" ? "items" : "additionalItems", "after positional items is not supported");
        else if (rest != o.end() && !is_true(*rest))
          fails(t_array, json{{"contains", not_marker({&*rest, s.base})}});
      } else if (!o.contains("prefixItems") && !is_true(v)) {
        fails(t_array, json{{"contains", not_marker({&v, s.base})}});
      }
    } else if (key == "contains") {
      std::uint64_t m = o.contains("minContains") ? count_of(o["minContains"], "minContains") : 1;
      if (o.contains("maxContains")) refuse(t_array, "maxContains", "is not supported");
      else if (m > 1) refuse(t_array, "minContains", "above 1 is not supported");
      else if (m == 1) fails(t_array, json{{"items", not_marker({&v, s.base})}});
    } else if (key == "uniqueItems") {
      if (v == true) refuse(t_array, key, "(some item repeated) is not context-free");
    } else if (key == "multipleOf") {
      refuse(numbers, key, "is not supported");
    } else if (key == "allOf") {
      for (const auto& sub : v) alts.push_back(json{{"$di_types", types}, {"allOf", json::array({not_marker({&sub, s.base})})}});
    } else if (key == "anyOf" || key == "oneOf") {
      json all = json::array();
      for (const auto& sub : v) all.push_back(not_marker({&sub, s.base}));
      alts.push_back(json{{"$di_types", types}, {"allOf", all}});  // none matches
      if (key == "oneOf")  // or two match
        for (std::size_t i = 0; i < v.size(); ++i)
          for (std::size_t j = i + 1; j < v.size(); ++j)
            alts.push_back(json{{"$di_types", types},
                                {"allOf", json::array({ref_marker({&v[i], s.base}), ref_marker({&v[j], s.base})})}});
    } else if (key == "not") {
      alts.push_back(json{{"$di_types", types}, {"allOf", json::array({ref_marker({&v, s.base})})}});
    } else if (key == "if") {
      auto then_ = o.find("then"), else_ = o.find("else");
      if (then_ != o.end() && !is_true(*then_))
        alts.push_back(json{{"$di_types", types}, {"allOf", json::array({ref_marker({&v, s.base}), not_marker({&*then_, s.base})})}});
      if (else_ != o.end() && !is_true(*else_))
        alts.push_back(json{{"$di_types", types}, {"allOf", json::array({not_marker({&v, s.base}), not_marker({&*else_, s.base})})}});
    } else if (key == "$ref" || key == "$dynamicRef" || key == "$recursiveRef") {
      auto resolved = dynamic_target(s.base, key, v.get<std::string>(), s);
      if (!resolved) continue;
      auto target = *resolved;
      alts.push_back(json{{"$di_types", types}, {"allOf", json::array({not_marker({target.schema, target.base})})}});
    } else if (key == "$di_ref") {
      alts.push_back(json{{"$di_types", types}, {"allOf", json::array({not_marker(schema_ref(marked_[v.get<std::size_t>()]))})}});
    } else if (key == "$di_not") {
      alts.push_back(json{{"$di_types", types}, {"allOf", json::array({ref_marker(schema_ref(marked_[v.get<std::size_t>()]))})}});
    } else if (key == "unevaluatedItems") {
      refuse(t_array, key, "is not supported");
    } else if (key == "$di_refuse") {  // not (T and an unexpressible failure): the same failure
      alts.push_back(typed(types, json{{"$di_refuse", v}}));
    }
    // Other keywords are annotations: they never fail.
  }
  if (alts.empty()) return false;
  if (alts.size() == 1) return alts[0];
  return json{{"anyOf", alts}};
}

}  // namespace di::grammar::json_detail
