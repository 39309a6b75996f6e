// JSON parsing that refuses what nlohmann lets through silently: an object repeating a key
// (nlohmann, like Python, keeps one of them, so a file that "works" elsewhere can mean
// something else here) and nesting past a bound (deep documents cost memory and stack).
// Callers word the error: json_input_error says what went wrong and where.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace di {

struct json_input_error : std::runtime_error {
  enum class kind { syntax, duplicate_key, too_deep };
  json_input_error(kind k, std::string reason, std::vector<std::string> path = {})
      : std::runtime_error(reason), what_kind(k), path(std::move(path)) {}
  kind what_kind;
  /// duplicate_key: the keys leading to the repeated one, which is last.
  std::vector<std::string> path;
};

/// nlohmann's message without its "[json.exception.parse_error.101] " tag: "parse error at
/// line L, column C: ...".
std::string without_nlohmann_tag(const std::string& what);

/// Parses `text`; throws json_input_error for invalid JSON (the reason names line and column),
/// a repeated key, or objects/arrays nested deeper than `max_depth`.
nlohmann::json parse_json_strict(std::string_view text, int max_depth);

}  // namespace di
