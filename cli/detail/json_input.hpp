// JSON read from a file or stdin by a command (chat messages, template kwargs): parsed with a
// depth limit, because copying or walking a deeper document recurses once per level (a
// 150,000-deep array overflowed the stack).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace di::cli {

inline constexpr int max_json_input_depth = 512;

/// Throws di::error "WHAT is not valid JSON: ..." or "WHAT is nested more than 512 levels deep".
nlohmann::ordered_json parse_json_input(const std::string& text, const std::string& what);

/// One line of a JSON-lines input (tokenize, detokenize), as strict as parse_json_input: throws
/// di::error "WHERE: key 'K' is given twice in one object", "WHERE: not valid JSON: ..." or
/// "WHERE: nested more than 512 levels deep".
nlohmann::json parse_json_line(const std::string& line, const std::string& where);

}  // namespace di::cli
