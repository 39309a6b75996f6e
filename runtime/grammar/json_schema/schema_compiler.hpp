// The JSON Schema compiler behind compile_json_schema (json_schema.hpp). A list of schemas that
// must all hold (a conjunction: allOf members, $ref targets, a property's schemas from several
// objects) is normalized into one `schema_node` of merged keywords; the node compiles to the
// grammar of the values it allows, one rule per distinct conjunction so that recursive $refs
// become recursive rules. Keywords: schema_normalize.cpp; types: string_schema.cpp,
// number_schema.cpp, object_schema.cpp, array_schema.cpp.
#pragma once

#include "runtime/grammar/compiled_grammar.hpp"
#include "runtime/grammar/json_schema.hpp"
#include "runtime/grammar/json_schema/json_text.hpp"
#include "runtime/grammar/json_schema/number_ranges.hpp"
#include "runtime/grammar/json_schema/schema_index.hpp"

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace di::grammar::json_detail {

/// A schema of the document and the base URI in force there.
struct schema_ref {
  const json* s;
  std::string base;
};
using conjunction = std::vector<schema_ref>;

enum type_bits : std::uint8_t {
  t_null = 1,
  t_boolean = 2,
  t_object = 4,
  t_array = 8,
  t_string = 16,
  t_number = 32,   ///< non-integer numbers (a schema's "number" sets t_number | t_integer)
  t_integer = 64,
  t_all = 127,
};

/// The merged keywords of a conjunction.
struct schema_node {
  bool never = false;
  std::uint8_t types = t_all;
  std::optional<std::vector<json>> enum_values;
  // strings
  std::uint64_t min_length = 0;
  std::uint64_t max_length = UINT64_MAX;
  std::vector<std::string> patterns;
  std::vector<std::string> formats;
  std::vector<std::string> anti_patterns;     ///< patterns the string must NOT match (search)
  std::vector<std::string> excluded_strings;  ///< values the string must not equal
  // numbers
  std::optional<bound> minimum, maximum;
  std::vector<decimal> multiple_of;
  // objects and arrays: the schemas carrying their keywords, read when compiled
  std::vector<schema_ref> object_parts;
  std::vector<schema_ref> array_parts;
  // anyOf / oneOf groups still to distribute
  struct group {
    bool one_of = false;
    std::vector<schema_ref> alternatives;
    schema_ref owner;  ///< the schema holding the anyOf/oneOf
    bool exclusive = false;           ///< alternatives disjoint by construction (if/then/else)
    std::vector<std::size_t> scopes;  ///< unevaluated* scopes open where the group was written
  };
  std::vector<group> groups;
  // unevaluatedProperties / unevaluatedItems: the parts that evaluate in the keyword's scope
  // (its schema and the in-place applicators under it, `not` excluded).
  struct unevaluated_scope {
    bool items = false;
    schema_ref where;
    std::vector<schema_ref> evaluators;
  };
  std::vector<unevaluated_scope> unevaluated;
  std::vector<std::size_t> open_scopes;  ///< scopes whose schema is being absorbed

  bool trivial() const;
};

class schema_compiler {
 public:
  schema_compiler(const json& root, const json_schema_options& options);
  json_schema_result run();

  // Used by the per-type builders.
  expr_id value(const conjunction& c);
  schema_node normalize(const conjunction& c);
  void absorb(schema_node& n, const schema_ref& s);
  json_text& text() { return text_; }
  grammar& g() { return g_; }
  const json_schema_options& options() const { return options_; }
  const schema_index& index() const { return index_; }
  /// A keyword that cannot be enforced: error, or (lenient) a warning.
  void unsupported(const std::string& keyword, const std::string& why, const schema_ref& where);
  void warn(const std::string& message) { warnings_.push_back(message); }
  bool draft7() const { return draft7_; }
  /// Generation with json_extra_keys::forbid: keys and items a schema is silent about are not
  /// written (object_schema.cpp, array_schema.cpp).
  bool forbids_unstated_extras() const {
    return options_.use == json_schema_use::generation &&
           options_.extra_keys == json_extra_keys::forbid;
  }
  /// Whether `s` was made up by rewriting (a complement, a dependency's alternative, an
  /// unevaluated* scope), not written by the user.
  bool is_synthetic(const json* s) const { return synthetic_addresses_.count(s) > 0; }
  /// The schema allowing exactly the values `s` refuses (a compile error names what cannot be).
  schema_ref complement(const schema_ref& s) { return {negation(s), index_.base_of(s.s, s.base)}; }
  /// Whether `text` matches the ECMAScript regex (search: anywhere, else in full).
  bool regex_matches(const std::string& regex, bool search, std::string_view text);

 private:
  expr_id compile_node(const schema_node& n, int depth);
  expr_id compile_groups(const schema_node& n, int depth);
  /// The node with each unevaluated* scope turned into a part for the keys/items it constrains.
  schema_node resolve_unevaluated(const schema_node& n);
  std::optional<schema_index::target> dynamic_target(const std::string& base, const std::string& keyword,
                                                     const std::string& ref, const schema_ref& where);
  void add_part(schema_node& n, std::vector<schema_ref>& parts, const schema_ref& s);
  void absorb_negated(schema_node& n, const schema_ref& s);
  std::vector<schema_ref> exclusive_alternatives(const std::vector<schema_ref>& alts, bool all_subsets,
                                                 const std::string& base);
  expr_id compile_enum(const schema_node& n);
  void absorb_keyword(schema_node& n, const schema_ref& s, const std::string& key, const json& v);
  void absorb_if(schema_node& n, const schema_ref& s);
  /// A synthetic schema allowing exactly the values `s` refuses (schema_negate.cpp).
  const json* negation(const schema_ref& s);
  json negate_object(const schema_ref& s);
  /// Placeholders inside synthetic schemas: "$di_ref" absorbs a schema, "$di_not" its complement.
  json ref_marker(const schema_ref& s);
  json not_marker(const schema_ref& s);
  /// A schema made up by rewriting, kept once per content: the same rewrite of the same schema
  /// (e.g. at each level of a recursive $ref) gives the same address, so memo_ finds it.
  const json* intern(json schema);
  std::vector<schema_node> one_of_nodes(const schema_node& rest, const std::vector<schema_ref>& alts);
  bool one_of_disjoint(const std::vector<schema_node>& alts);
  void absorb_format(schema_node& n, const schema_ref& s, const json& v);
  void absorb_dependencies(schema_node& n, const schema_ref& s, const std::string& key, const json& v);
  void absorb_bound(schema_node& n, const json& schema, const std::string& key, const json& v);
  std::string key_of(const conjunction& c);
  /// The first subschema met with the same text as `s`: content-equal subschemas (e.g. the
  /// same value schema under many properties) share memo_'s rule.
  const json* canonical(const json* s);

  json_schema_options options_;
  grammar g_;
  json_text text_;
  const json& root_;
  json_schema_draft dialect_;
  bool draft7_ = false;  ///< draft 7 or older: `$ref` overrides its siblings
  std::deque<json> synthetic_;  // schemas made up by rewriting (stable addresses)
  std::map<std::string, const json*> interned_;  // synthetic_ by content (intern)
  std::unordered_set<const json*> synthetic_addresses_;  // synthetic_ by address (is_synthetic)
  std::map<std::pair<const json*, std::string>, std::size_t> marker_ids_;  // marked_ by schema
  schema_index index_;
  std::map<std::string, rule_id> memo_;
  std::unordered_map<const json*, const json*> canonical_;  // canonical(): by address
  std::unordered_map<std::string, const json*> by_text_;    // canonical(): by text
  static constexpr int k_max_nesting = 400;  ///< subschemas compiled inside one another (stack)
  static constexpr std::size_t k_max_ref_chain = 1000;  ///< $refs merged one into another (stack)
  int nesting_ = 0;
  static constexpr std::size_t k_max_nodes = 1'000;  ///< compile_node calls (combinations)
  static constexpr std::size_t k_max_exprs = 1'000'000;  ///< grammar expressions (bounded time/memory)
  std::size_t nodes_compiled_ = 0;
  std::vector<const json*> absorbing_;  // $ref targets being merged (cycle guard)
  std::vector<schema_ref> marked_;       // schemas named by "$di_ref"/"$di_not" placeholders
  std::map<std::pair<const json*, std::string>, const json*> negations_;
  std::vector<const json*> negating_;    // negations being built (cycle guard)
  std::vector<std::string> warnings_;
  std::map<std::string, std::shared_ptr<const compiled_grammar>> regex_cache_;
};

/// JSON equality (numbers by value: 1 == 1.0).
bool json_equal(const json& a, const json& b);

// Per-type grammars (each in its own file).
expr_id string_schema(schema_compiler& c, const schema_node& n);
expr_id number_schema(schema_compiler& c, const schema_node& n, bool integer_only);
expr_id object_schema(schema_compiler& c, const schema_node& n);
expr_id array_schema(schema_compiler& c, const schema_node& n);
/// Whether a concrete value satisfies the node's scalar keywords (enum filtering).
/// `listed`: v is one of n's own enum values, whose membership need not be searched again
/// (compiling an enum of N values checked each against all N: quadratic).
bool scalar_matches(schema_compiler& c, const json& v, const schema_node& n, bool listed = false);
/// The decoded-string language of string keywords, as a grammar expression in `target`.
expr_id string_content(schema_compiler& c, const schema_node& n, grammar& target);

/// Refuses a keyword whose value has the wrong type for JSON Schema (schema_check.cpp), naming
/// the keyword and its JSON pointer; run on the whole document before compiling it.
void check_schema_shape(const json& schema);

/// A count keyword's value (minItems, maxProperties, ...): a non-negative integer, saturated at
/// UINT64_MAX (so 1e30 is "more than any count", never a wrapped or undefined cast); anything
/// else is an error naming `keyword`.
std::uint64_t count_value(const json& v, const char* keyword);

}  // namespace di::grammar::json_detail
