// The shape of every keyword a schema uses, checked before compiling (check_schema_shape):
// a keyword whose value has the wrong type is an error naming the keyword and where it is,
// instead of being skipped ("minimum": true, "properties": [1], "if": 5), read as something
// else ("enum": "abc" as ["abc"], "required": "a" as ["a"]), cast past its range
// ("minProperties": -1 became 2^64 - 1 and crashed the object compiler), or failing later
// inside the JSON library with its own message ("type must be number, but is boolean").
// Values follow JSON Schema 2020-12's meta-schema, plus draft 4's boolean exclusiveMinimum /
// exclusiveMaximum and array-form items, which the compiler also reads.
#include "common/error.hpp"
#include "common/json_brief.hpp"
#include "runtime/grammar/json_schema/schema_compiler.hpp"

#include <cmath>
#include <set>
#include <string>

namespace di::grammar::json_detail {

namespace {

using ojson = nlohmann::ordered_json;

/// A JSON pointer token: '~' and '/' escaped (RFC 6901).
std::string pointer_token(const std::string& name) {
  std::string out;
  for (char ch : name) {
    if (ch == '~')
      out += "~0";
    else if (ch == '/')
      out += "~1";
    else
      out += ch;
  }
  return out;
}

[[noreturn]] void wrong(const std::string& key, const std::string& path, const char* what,
                        const ojson& v) {
  DI_FAIL("JSON Schema: '{}' at {} must be {}, got {}", key, path, what, json_brief(v));
}

bool is_count(const ojson& v) {
  if (v.is_number_unsigned()) return true;
  if (v.is_number_integer()) return v.get<std::int64_t>() >= 0;
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return std::isfinite(d) && d >= 0 && std::floor(d) == d;
}

bool is_string_array(const ojson& v) {
  if (!v.is_array()) return false;
  for (const auto& x : v)
    if (!x.is_string()) return false;
  return true;
}

const std::set<std::string, std::less<>> k_counts = {
    "minLength",     "maxLength",     "minItems",    "maxItems",
    "minProperties", "maxProperties", "minContains", "maxContains"};
const std::set<std::string, std::less<>> k_subschema = {"not",
                                                        "if",
                                                        "then",
                                                        "else",
                                                        "contains",
                                                        "propertyNames",
                                                        "additionalProperties",
                                                        "additionalItems",
                                                        "unevaluatedProperties",
                                                        "unevaluatedItems"};
const std::set<std::string, std::less<>> k_schema_lists = {"allOf", "anyOf", "oneOf",
                                                           "prefixItems"};
const std::set<std::string, std::less<>> k_schema_maps = {
    "properties", "patternProperties", "$defs", "definitions", "dependentSchemas"};

void check_schema(const ojson& s, const std::string& path, int depth);

void check_keyword(const std::string& key, const ojson& v, const std::string& path, int depth) {
  const std::string at = path + "/" + pointer_token(key);
  if (k_counts.count(key)) {
    if (!is_count(v)) wrong(key, path, "a non-negative integer", v);
  } else if (key == "minimum" || key == "maximum") {
    if (!v.is_number()) wrong(key, path, "a number", v);
  } else if (key == "exclusiveMinimum" || key == "exclusiveMaximum") {
    if (!v.is_number() && !v.is_boolean())
      wrong(key, path, "a number (or, in draft 4, a boolean)", v);
  } else if (key == "multipleOf") {
    if (!v.is_number() || !(v.get<double>() > 0)) wrong(key, path, "a positive number", v);
  } else if (key == "type") {
    if (!v.is_string() && !(is_string_array(v) && !v.empty()))
      wrong(key, path, "a type name or a non-empty array of them", v);
  } else if (key == "enum") {
    if (!v.is_array()) wrong(key, path, "an array", v);
  } else if (key == "required") {
    if (!is_string_array(v)) wrong(key, path, "an array of strings", v);
  } else if (key == "pattern" || key == "format" || key == "$ref" || key == "$dynamicRef" ||
             key == "$id" || key == "$anchor" || key == "$dynamicAnchor" || key == "$schema") {
    if (!v.is_string()) wrong(key, path, "a string", v);
  } else if (key == "uniqueItems") {
    if (!v.is_boolean()) wrong(key, path, "a boolean", v);
  } else if (k_subschema.count(key)) {
    if (!v.is_object() && !v.is_boolean()) wrong(key, path, "a schema (an object or a boolean)", v);
    check_schema(v, at, depth + 1);
  } else if (k_schema_lists.count(key)) {
    if (!v.is_array() || (key != "prefixItems" && v.empty()))
      wrong(key, path,
            key == "prefixItems" ? "an array of schemas" : "a non-empty array of schemas", v);
    for (std::size_t i = 0; i < v.size(); ++i)
      check_schema(v[i], at + "/" + std::to_string(i), depth + 1);
  } else if (key == "items") {  // a schema, or (draft 4) an array of them
    if (v.is_array()) {
      for (std::size_t i = 0; i < v.size(); ++i)
        check_schema(v[i], at + "/" + std::to_string(i), depth + 1);
    } else {
      if (!v.is_object() && !v.is_boolean())
        wrong(key, path, "a schema (an object or a boolean) or an array of schemas", v);
      check_schema(v, at, depth + 1);
    }
  } else if (k_schema_maps.count(key)) {
    if (!v.is_object()) wrong(key, path, "an object of schemas", v);
    for (const auto& [name, sub] : v.items())
      check_schema(sub, at + "/" + pointer_token(name), depth + 1);
  } else if (key == "dependentRequired") {
    if (!v.is_object()) wrong(key, path, "an object of string arrays", v);
    for (const auto& [name, names] : v.items())
      if (!is_string_array(names)) wrong(key + "/" + name, path, "an array of strings", names);
  } else if (key == "dependencies") {  // draft 4-7: a schema or an array of names per property
    if (!v.is_object()) wrong(key, path, "an object", v);
    for (const auto& [name, dep] : v.items()) {
      if (dep.is_array()) {
        if (!is_string_array(dep)) wrong(key + "/" + name, path, "an array of strings", dep);
      } else {
        check_schema(dep, at + "/" + pointer_token(name), depth + 1);
      }
    }
  }
  // Anything else (const, default, annotations, unknown keywords) may hold any value.
}

void check_schema(const ojson& s, const std::string& path, int depth) {
  if (depth > 256) return;  // deeper nesting is refused by the compiler itself
  if (s.is_boolean()) return;
  DI_CHECK(s.is_object(), "JSON Schema: the schema at {} must be an object or a boolean, got {}",
           path, json_brief(s));
  for (const auto& [key, v] : s.items()) check_keyword(key, v, path, depth);
}

}  // namespace

void check_schema_shape(const nlohmann::ordered_json& schema) {
  check_schema(schema, "#", 0);
}

}  // namespace di::grammar::json_detail
