// The JSON Schema front end: a schema (draft 2020-12 or draft 7) becomes a grammar of the JSON
// texts whose values validate against it. Supported keywords are enforced exactly; a keyword
// that cannot be enforced is a compile error naming it, unless `lenient` is set (then it is
// skipped and listed in the warnings). Annotations (title, description, examples...) are ignored.
//
// Where the grammar is stricter than the spec, it is so by design and documented: object
// properties follow the schema's `properties` order (declared ones first, then others),
// strings constrained by pattern/length/format/enum use one canonical escaping per character
// (what serializers emit), and numbers with bounds or multipleOf have no exponent part. For
// generation (json_schema_use) integers take no fraction and enum/const numbers one text, and
// objects and tuples take no keys or items their schema does not declare unless it says so
// (json_extra_keys).
#pragma once

#include "runtime/grammar/exact_json.hpp"
#include "runtime/grammar/grammar.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace di::grammar {

enum class json_whitespace {
  any,      ///< JSON's [ \t\n\r]* between tokens
  compact,  ///< no whitespace at all (what json.dumps(separators=(",", ":")) writes)
  pretty,   ///< at most one newline and 20 spaces or tabs between tokens (bounded output)
};

enum class json_schema_draft {
  draft2020_12,  ///< also 2019-09
  draft7,        ///< also drafts 6 and 4 (`$ref` overrides its siblings)
  draft4,        ///< draft 4: `id`, boolean exclusiveMinimum/Maximum
};

/// What a schema's grammar is for: it decides how many spellings a number has.
enum class json_schema_use {
  /// Every JSON text of a valid value, as JSON Schema validates: 1.0 is an integer, an enum's
  /// 7 matches 7.0 (`grammar check`, the conformance tests).
  validation,
  /// One text per value, what typed clients parse: integers as -?(0|[1-9][0-9]*), enum/const
  /// numbers in plain decimal (json_text::literal); what response formats generate.
  generation,
};

/// Keys and items a schema leaves open by not saying anything about them.
enum class json_extra_keys {
  /// Generation writes none (the default), as xgrammar's strict_mode (vLLM, SGLang) and
  /// llama.cpp: an object whose schema has `properties` or `patternProperties` but no
  /// `additionalProperties` / `unevaluatedProperties` anywhere in its conjunction takes only the
  /// keys it declares, and an array whose schema has `prefixItems` (draft 7: an `items` list) but
  /// no `items` / `additionalItems` / `unevaluatedItems` ends after them. Validation keeps JSON
  /// Schema's default (they are allowed) whatever this says.
  forbid,
  /// JSON Schema's default in generation too: any other key, any further item.
  allow,
};

struct json_schema_options {
  json_whitespace whitespace = json_whitespace::any;
  /// Validation keeps every spelling; response_format defaults to generation.
  json_schema_use use = json_schema_use::validation;
  /// Dialect of a schema without `$schema` (an unknown `$schema` is refused).
  json_schema_draft default_draft = json_schema_draft::draft2020_12;
  /// Other schema documents a `$ref` may name, by absolute URI (nothing is fetched).
  std::vector<std::pair<std::string, nlohmann::ordered_json>> documents;
  /// Skip keywords that cannot be enforced instead of failing (they go to the warnings).
  bool lenient = false;
  /// Enforce `format` (known formats). Off: `format` is an annotation, as draft 2020-12's
  /// default vocabulary has it.
  bool format_assertion = true;
  /// Generation only: undeclared keys and items after prefixItems where the schema is silent.
  json_extra_keys extra_keys = json_extra_keys::forbid;
  /// Largest number of states for one regular string language (pattern x length x format).
  std::size_t max_string_states = 20'000;
};

struct json_schema_result {
  grammar g;
  std::vector<std::string> warnings;  ///< skipped keywords (lenient), unknown formats
};

/// Compiles a schema; di::error names the keyword (and its JSON pointer) that cannot be enforced.
/// The error for a schema number a double cannot hold exactly (parse_json_exact).
std::string inexact_schema_number(const inexact_number& n);

json_schema_result compile_json_schema(const nlohmann::ordered_json& schema,
                                       const json_schema_options& options = {});
/// As above from schema text (a syntax error is a di::error).
json_schema_result compile_json_schema_text(std::string_view text,
                                            const json_schema_options& options = {});
/// How many times compile_json_schema (the front end: number automata included) has run on
/// this thread (a statistic: tests count the front ends a response format costs).
std::uint64_t num_json_schema_compiles_on_this_thread();
/// The grammar of any JSON object (OpenAI's `json_object` response format).
grammar json_object_grammar(const json_schema_options& options = {});

/// Keywords the compiler enforces, ignores as annotations, or rejects (for the report).
const std::vector<std::string>& supported_json_schema_keywords();
const std::vector<std::string>& rejected_json_schema_keywords();

}  // namespace di::grammar
