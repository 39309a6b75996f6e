// JSON parsing for checkpoint files that rejects duplicate object keys. nlohmann silently keeps
// the last of two equal keys, which would let a header name one tensor twice unnoticed.
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

namespace di::detail {

/// Parses `text` as JSON; throws di::error naming `file` and `what` ("header", "index") when
/// the text is not valid JSON or when any object repeats a key.
nlohmann::json parse_strict_json(std::string_view text, std::string_view file,
                                 std::string_view what);

}  // namespace di::detail
