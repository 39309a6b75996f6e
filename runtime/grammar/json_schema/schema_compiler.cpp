// Conjunctions to rules, nodes to per-type grammars, anyOf/oneOf distribution with the
// disjointness proof oneOf needs, enum filtering, and the public entry points.
#include "runtime/grammar/json_schema/schema_compiler.hpp"
#include "runtime/grammar/json_schema/number_exponents.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <functional>
#include <set>

namespace di::grammar::json_detail {

namespace {

constexpr int k_max_depth = 64;

json_schema_draft dialect_of(const json& root, json_schema_draft fallback) {
  if (!root.is_object() || !root.contains("$schema")) return fallback;
  DI_CHECK(root["$schema"].is_string(), "JSON Schema: $schema must be a string");
  std::string s = root["$schema"].get<std::string>();
  while (!s.empty() && s.back() == '#') s.pop_back();
  for (const char* prefix : {"http://", "https://"}) {
    if (s == std::string(prefix) + "json-schema.org/draft/2020-12/schema" ||
        s == std::string(prefix) + "json-schema.org/draft/2019-09/schema")
      return json_schema_draft::draft2020_12;
    if (s == std::string(prefix) + "json-schema.org/draft-07/schema" ||
        s == std::string(prefix) + "json-schema.org/draft-06/schema")
      return json_schema_draft::draft7;
    if (s == std::string(prefix) + "json-schema.org/draft-04/schema")
      return json_schema_draft::draft4;
  }
  DI_FAIL(
      "JSON Schema: unsupported $schema dialect '{}' (known: drafts 2020-12, 2019-09, 7, 6 and 4)",
      s);
}

bool only_ref(const json& s) {
  if (!s.is_object() || !s.contains("$ref")) return false;
  static const std::set<std::string> annotations = {"$ref",       "title",    "description",
                                                    "$comment",   "default",  "examples",
                                                    "deprecated", "readOnly", "writeOnly"};
  return std::all_of(s.items().begin(), s.items().end(),
                     [](const auto& kv) { return annotations.count(kv.key()) > 0; });
}

}  // namespace

schema_compiler::schema_compiler(const json& root, const json_schema_options& options)
    : options_(options),
      text_(g_, options.whitespace, options.use),
      root_(root),
      dialect_(dialect_of(root, options.default_draft)),
      draft7_(dialect_ != json_schema_draft::draft2020_12),
      index_(root, options_.documents, dialect_ == json_schema_draft::draft4, draft7_) {}

void schema_compiler::unsupported(const std::string& keyword, const std::string& why,
                                  const schema_ref& where) {
  std::string excerpt = where.s ? where.s->dump() : std::string("the schema");
  if (excerpt.size() > 160) excerpt = excerpt.substr(0, 157) + "...";
  if (!options_.lenient)
    DI_FAIL(
        "JSON Schema keyword '{}' cannot be enforced: {} (in {}); a lenient compile skips it "
        "(`+lenient` in --response-format, `grammar check --lenient`; not offered over HTTP)",
        keyword, why, excerpt);
  warn("skipped '" + keyword + "': " + why);
}

const json* schema_compiler::canonical(const json* s) {
  if (auto it = canonical_.find(s); it != canonical_.end()) return it->second;
  // Same text and same base give the same language: $refs resolve against the base, an $id
  // inside is part of the text. (Markers of synthetic schemas are interned indices.)
  const json* c = by_text_.try_emplace(s->dump(), s).first->second;
  canonical_.emplace(s, c);
  return c;
}

std::string schema_compiler::key_of(const conjunction& c) {
  std::string key;
  for (const auto& s : c)
    key += std::to_string(reinterpret_cast<std::uintptr_t>(canonical(s.s))) + "@" + s.base + ";";
  return key;
}

expr_id schema_compiler::value(const conjunction& c) {
  if (c.size() == 1 && only_ref(*c[0].s)) {
    // Follow a chain of bare $refs; one that comes back to itself allows no value at all.
    std::vector<const json*> seen{c[0].s};
    schema_ref at = c[0];
    while (only_ref(*at.s)) {
      auto target =
          index_.resolve(index_.base_of(at.s, at.base), (*at.s)["$ref"].get<std::string>());
      at = {target.schema, target.base};
      DI_CHECK(std::find(seen.begin(), seen.end(), at.s) == seen.end(),
               "JSON Schema: $ref '{}' refers back to itself without any other keyword (no value "
               "can match)",
               (*c[0].s)["$ref"].get<std::string>());
      seen.push_back(at.s);
    }
    return value({at});
  }
  std::string key = key_of(c);
  if (auto it = memo_.find(key); it != memo_.end()) return g_.ref(it->second);
  DI_CHECK(nesting_ < k_max_nesting, "JSON Schema: subschemas nested more than {} levels deep",
           k_max_nesting);
  rule_id r = g_.fresh_rule("schema_" + std::to_string(memo_.size()));
  memo_.emplace(key, r);
  ++nesting_;
  struct leave {
    int& n;
    ~leave() { --n; }
  } guard{nesting_};
  g_.define_rule(r, compile_node(normalize(c), 0));
  return g_.ref(r);
}

expr_id schema_compiler::compile_node(const schema_node& n, int depth) {
  DI_CHECK(depth < k_max_depth, "JSON Schema: anyOf/oneOf/allOf nested more than {} levels",
           k_max_depth);
  DI_CHECK(++nodes_compiled_ <= k_max_nodes,
           "JSON Schema too large: more than {} subschemas to compile (each property's value is "
           "one; anyOf/oneOf/not distributed over each other multiply them)",
           k_max_nodes);
  DI_CHECK(g_.num_exprs() <= k_max_exprs,
           "JSON Schema too large: its grammar passes {} expressions", k_max_exprs);
  if (n.never || n.types == 0) return g_.nothing();
  if (!n.groups.empty()) return compile_groups(n, depth);
  if (!n.unevaluated.empty()) return compile_node(resolve_unevaluated(n), depth);
  if (n.enum_values) return compile_enum(n);
  std::vector<expr_id> alts;
  if (n.types & t_null) alts.push_back(text_.null_value());
  if (n.types & t_boolean) alts.push_back(text_.boolean());
  if (n.types & t_string) alts.push_back(string_schema(*this, n));
  if (n.types & t_number) {
    alts.push_back(number_schema(*this, n, false));
  } else if (n.types & t_integer) {
    alts.push_back(number_schema(*this, n, true));
  }
  if (n.types & t_object) alts.push_back(object_schema(*this, n));
  if (n.types & t_array) alts.push_back(array_schema(*this, n));
  return g_.choice(std::move(alts));
}

std::vector<schema_ref> schema_compiler::exclusive_alternatives(const std::vector<schema_ref>& alts,
                                                                bool all_subsets,
                                                                const std::string& base) {
  // Subset T of the alternatives: all of T match and none of the others (anyOf: every nonempty
  // T; oneOf: the singletons).
  std::vector<schema_ref> out;
  const std::size_t n = alts.size();
  for (std::uint32_t t = 1; t < (1u << n); ++t) {
    if (!all_subsets && (t & (t - 1)) != 0) continue;
    json all = json::array();
    for (std::size_t j = 0; j < n; ++j)
      all.push_back((t >> j) & 1 ? ref_marker(alts[j]) : not_marker(alts[j]));
    out.push_back({intern(json{{"allOf", std::move(all)}}), base});
  }
  return out;
}

expr_id schema_compiler::compile_groups(const schema_node& n, int depth) {
  schema_node rest = n;
  schema_node::group grp = rest.groups.front();
  rest.groups.erase(rest.groups.begin());
  auto absorb_alt = [&](schema_node& m, const schema_ref& alt) {
    m.open_scopes = grp.scopes;  // the alternative evaluates for unevaluated* open around the group
    absorb(m, alt);
    m.open_scopes.clear();
  };
  if (grp.one_of && !grp.exclusive) {
    std::vector<schema_node> nodes;
    for (const auto& alt : grp.alternatives) {
      nodes.push_back(rest);
      absorb_alt(nodes.back(), alt);
    }
    // Exactly one: alternative i and the complement of every other one.
    if (!one_of_disjoint(nodes)) {
      if (grp.alternatives.size() > 8) {
        unsupported("oneOf",
                    "more than 8 alternatives that may overlap (each would need the complement of "
                    "all others)",
                    grp.owner);
      } else {
        grp.alternatives = exclusive_alternatives(grp.alternatives, false, grp.owner.base);
      }
    }
  } else if (!grp.exclusive && !grp.scopes.empty() && grp.alternatives.size() > 1) {
    // Under unevaluated*, every matching alternative evaluates: split anyOf by which ones match.
    if (grp.alternatives.size() > 4) {
      unsupported(
          n.unevaluated[grp.scopes.back()].items ? "unevaluatedItems" : "unevaluatedProperties",
          "beside an anyOf of more than 4 alternatives", grp.owner);
    } else {
      grp.alternatives = exclusive_alternatives(grp.alternatives, true, grp.owner.base);
    }
  }
  std::vector<expr_id> alts;
  for (const auto& alt : grp.alternatives) {
    schema_node m = rest;
    absorb_alt(m, alt);
    if (m.never || m.types == 0) continue;  // e.g. "another type" beside a type keyword
    // With nothing to merge, the alternative is its own (memoized, possibly recursive) rule.
    alts.push_back(rest.trivial() ? value({alt}) : compile_node(m, depth + 1));
  }
  return g_.choice(std::move(alts));
}

schema_node schema_compiler::resolve_unevaluated(const schema_node& n) {
  schema_node out = n;
  out.unevaluated.clear();
  out.open_scopes.clear();
  auto has = [](const schema_ref& p, const char* k) {
    return p.s->is_object() && p.s->contains(k);
  };
  for (const auto& u : n.unevaluated) {
    const json& where = *u.where.s;
    const json& keep = where[u.items ? "unevaluatedItems" : "unevaluatedProperties"];
    json rest = keep.is_boolean() ? keep : ref_marker({&keep, u.where.base});
    bool all = false;
    if (!u.items) {
      json names = json::object(), patterns = json::object();
      for (const auto& e : u.evaluators) {
        all = all || has(e, "additionalProperties") ||
              (e.s != u.where.s && has(e, "unevaluatedProperties"));
        if (has(e, "properties"))
          for (const auto& [k, v] : (*e.s)["properties"].items()) names[k] = true;
        if (has(e, "patternProperties"))
          for (const auto& [k, v] : (*e.s)["patternProperties"].items()) patterns[k] = true;
      }
      if (all || !(n.types & t_object)) continue;
      json part = {{"additionalProperties", rest}};
      if (!names.empty()) part["properties"] = names;
      if (!patterns.empty()) part["patternProperties"] = patterns;
      out.object_parts.push_back({intern(std::move(part)), u.where.base});
    } else {
      std::size_t prefix = 0;
      json any = json::array({rest});
      for (const auto& e : u.evaluators) {
        all = all || (has(e, "items") && !(*e.s)["items"].is_array()) ||
              (e.s != u.where.s && has(e, "unevaluatedItems"));
        if (has(e, "prefixItems")) prefix = std::max(prefix, (*e.s)["prefixItems"].size());
        if (has(e, "items") && (*e.s)["items"].is_array())
          prefix = std::max(prefix, (*e.s)["items"].size());
        if (has(e, "contains")) any.push_back(ref_marker({&(*e.s)["contains"], e.base}));
      }
      if (all || !(n.types & t_array)) continue;
      json part = {{"items", any.size() == 1 ? rest : json{{"anyOf", any}}}};
      if (prefix > 0) part["prefixItems"] = json(std::vector<json>(prefix, true));
      out.array_parts.push_back({intern(std::move(part)), u.where.base});
    }
  }
  return out;
}

expr_id schema_compiler::compile_enum(const schema_node& n) {
  std::vector<expr_id> alts;
  std::size_t numbers = 0;  // in the values and inside them
  const std::function<void(const json&)> count = [&](const json& v) {
    if (v.is_number()) ++numbers;
    if (v.is_structured())
      for (const auto& x : v) count(x);
  };
  for (const auto& v : *n.enum_values) count(v);
  const bool exponents = numbers <= k_max_enum_numbers_with_exponent;
  for (const auto& v : *n.enum_values) {
    if ((v.is_object() && !n.object_parts.empty()) || (v.is_array() && !n.array_parts.empty()))
      unsupported("enum", "object or array values combined with object/array keywords",
                  n.object_parts.empty() ? n.array_parts[0] : n.object_parts[0]);
    if (scalar_matches(*this, v, n, /*listed=*/true)) alts.push_back(text_.literal(v, exponents));
  }
  return g_.choice(std::move(alts));
}

json_schema_result schema_compiler::run() {
  rule_id root = g_.declare_rule("root");
  g_.define_rule(root, value({{&root_, index_.root_base()}}));
  g_.set_root(root);
  return {std::move(g_), std::move(warnings_)};
}

}  // namespace di::grammar::json_detail

namespace di::grammar {

namespace {

/// The compiler's own placeholder keywords ("$di_ref", "$di_not", "$di_types", ... in the
/// synthetic schemas of schema_negate.cpp) must not come from the user: refuse them in schema
/// positions. Names (keys of properties, $defs, ...) and instance data (const, enum, ...) may
/// be anything.
void refuse_reserved_keywords(const nlohmann::ordered_json& s, int depth = 0) {
  if (depth > 256) return;  // deeper nesting is refused by the compiler itself
  if (s.is_array()) {
    for (const auto& v : s) refuse_reserved_keywords(v, depth + 1);
    return;
  }
  if (!s.is_object()) return;
  for (const auto& [key, v] : s.items()) {
    DI_CHECK(
        key.rfind("$di_", 0) != 0,
        "JSON Schema keyword '{}' is reserved (the compiler's own placeholders start with $di_)",
        key);
    if (key == "const" || key == "enum" || key == "default" || key == "examples") continue;
    const bool names = key == "properties" || key == "patternProperties" || key == "$defs" ||
                       key == "definitions" || key == "dependentSchemas" || key == "dependencies";
    if (names && v.is_object()) {
      for (const auto& [name, sub] : v.items()) refuse_reserved_keywords(sub, depth + 1);
    } else {
      refuse_reserved_keywords(v, depth + 1);
    }
  }
}

thread_local std::uint64_t json_schema_compiles_on_this_thread = 0;

}  // namespace

std::uint64_t num_json_schema_compiles_on_this_thread() {
  return json_schema_compiles_on_this_thread;
}

json_schema_result compile_json_schema(const nlohmann::ordered_json& schema,
                                       const json_schema_options& options) {
  ++json_schema_compiles_on_this_thread;
  json_detail::check_schema_shape(schema);
  refuse_reserved_keywords(schema);
  json_detail::schema_compiler c(schema, options);
  return c.run();
}

std::string inexact_schema_number(const inexact_number& n) {
  return fmt::format(
      "JSON Schema: the number {}{}{} cannot be held exactly (integers beyond 64 bits and "
      "decimals with more digits than a double keeps are not supported: they would be "
      "rounded, and outputs could break the schema)",
      n.literal, n.path.empty() ? "" : " at ", n.path);
}

json_schema_result compile_json_schema_text(std::string_view text,
                                            const json_schema_options& options) {
  exact_json_result doc = parse_json_exact(text);
  if (!doc.error.empty()) DI_FAIL("the JSON Schema is not valid JSON: {}", doc.error);
  if (doc.inexact) DI_FAIL("{}", inexact_schema_number(*doc.inexact));
  return compile_json_schema(doc.value, options);
}

grammar json_object_grammar(const json_schema_options& options) {
  return compile_json_schema(nlohmann::ordered_json{{"type", "object"}}, options).g;
}

}  // namespace di::grammar
