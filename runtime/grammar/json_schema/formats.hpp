// The string `format`s the compiler enforces, each as a full-match regex over the decoded
// string (RFC 3339 dates and times, email, hostname, IPv4/IPv6, URI and URI reference, UUID,
// ISO 8601 duration, JSON pointers...). Grammars cannot check everything a validator can (leap
// days, calendar validity beyond month lengths), which the regexes document where it matters.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace di::grammar::json_detail {

/// The regex of a string format, or nothing if the format is unknown.
std::optional<std::string> format_regex(std::string_view format);

}  // namespace di::grammar::json_detail
