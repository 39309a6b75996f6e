// JSON parsing that notices numbers a double cannot hold. nlohmann stores an integer past 64
// bits, or a decimal with more digits than a double keeps, as the nearest double: a schema's
// `const` 123456789012345678901234567890 became 1.2345678901234568e+29 and `maximum`
// 18446744073709551616 an integer written 18446744073709552000, so outputs broke the schema
// they were generated under. The parse below is nlohmann's own, and reports the first such
// literal with its place, so a caller can refuse it by name.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace di::grammar {

/// A number literal whose double differs from it, and where it is ("a.b[2].c"; "" = the root).
struct inexact_number {
  std::string path;
  std::string literal;
};

struct exact_json_result {
  nlohmann::ordered_json value;           ///< discarded when the text is not valid JSON
  std::optional<inexact_number> inexact;  ///< the first number a double cannot hold exactly
  std::string error;                      ///< nlohmann's message when the text is not JSON
};

/// Objects and arrays nested deeper than this are refused (as a parse error).
inline constexpr std::size_t max_json_nesting = 512;

/// Parses `text` (keys in their order); never throws for bad input (see `error`).
exact_json_result parse_json_exact(std::string_view text);

/// True when `literal` (a JSON number) and the double `value` it was parsed into differ as
/// decimal numbers (the double's shortest round-trip form is compared exactly).
bool is_inexact_literal(std::string_view literal, double value);

}  // namespace di::grammar
