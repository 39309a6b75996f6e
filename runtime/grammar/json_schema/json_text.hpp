// Building blocks of JSON text inside a grammar: whitespace per policy, the characters of a
// JSON string (canonical or any escaping), strings, numbers, booleans, null, any value (one
// recursive rule set shared by the whole schema), and a given value as a literal.
#pragma once

#include "runtime/grammar/json_schema.hpp"
#include "runtime/grammar/json_schema/number_exponents.hpp"

#include <map>
#include <optional>
#include <string>

namespace di::grammar::json_detail {

/// UTF-8 text to code points; invalid bytes become U+FFFD.
std::u32string decode_utf8(std::string_view s);

class json_text {
 public:
  /// `use` matters for numbers only (scratch texts of strings and names leave it).
  json_text(grammar& g, json_whitespace ws, json_schema_use use = json_schema_use::validation)
      : g_(g), ws_policy_(ws), use_(use) {}

  grammar& g() { return g_; }
  expr_id ws();
  /// One character of `chars` in a JSON string, written the one way serializers write it:
  /// itself, or \" \\ \b \f \n \r \t, or \u00XX for other control characters.
  expr_id json_char(const codepoint_set& chars);
  /// Any JSON string character, any escape allowed (\/, \uXXXX...).
  expr_id any_char();
  expr_id quoted(expr_id content) { return g_.sequence({g_.literal("\""), content, g_.literal("\"")}); }
  expr_id any_string();
  /// Any JSON number; generation writes no negative zero (-0, -0.0, -0e5).
  expr_id any_number();
  /// An integer value. Validation: every spelling of an integer -- a zero fraction (1.0), -0,
  /// an exponent (2e0, 1.5e1, 10e-1; see integers_with_exponent); generation: 0|-?[1-9][0-9]*.
  expr_id any_integer();
  /// ".0", ".00", ... or nothing after an integer's digits (validation); nothing (generation).
  expr_id zero_fraction();
  expr_id boolean() { return g_.choice({g_.literal("true"), g_.literal("false")}); }
  expr_id null_value() { return g_.literal("null"); }
  expr_id any_object();
  expr_id any_array();
  expr_id any_value();
  /// numbers_with_exponent(c), built once per grammar for equal constraints (a schema under
  /// oneOf or not is compiled again in each combination).
  expr_id numbers_with_exponent(const exponent_constraint& c, std::size_t max_states);
  /// `v` serialized (whitespace allowed between tokens). Numbers: for validation every
  /// spelling of the exact value (1 == 1.0 == 10e-1; spellings_of); for generation only its
  /// plain decimal text (12345678901234567, 1.5, 2.0 as 2, 1e-7 as 0.0000001).
  /// `number_exponents` off: numbers without their exponent spellings (large enums).
  expr_id literal(const nlohmann::ordered_json& v, bool number_exponents = true);
  /// The JSON string literal of `s` in canonical escaping.
  expr_id string_literal(std::string_view s);

 private:
  void build_any();

  grammar& g_;
  json_whitespace ws_policy_;
  json_schema_use use_;
  std::optional<rule_id> ws_rule_;
  std::optional<rule_id> exponent_integer_rule_;  ///< integers_with_exponent, built once
  std::map<std::string, expr_id> exponent_numbers_;  ///< numbers_with_exponent by constraint
  std::optional<rule_id> value_rule_, object_rule_, array_rule_;
};

}  // namespace di::grammar::json_detail
