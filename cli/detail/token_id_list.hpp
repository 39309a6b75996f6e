// Comma-separated integer lists of the CLI: `--prompt-ids 1,2,3` (generate, client) and
// `bench --batch 1,8 --context 128,1024`, read by one rule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace di::cli {

/// "1, 2,+3" -> {1, 2, 3}: items separated by commas, each decimal digits with an optional
/// sign and spaces around it, values in [lo, hi]. An empty list, an empty item (",1", "1,,2",
/// a trailing comma) or anything else is a di::error naming `what` and the item ("'x' is not
/// " + `expected`).
std::vector<std::int64_t> parse_integer_list(const std::string& list, const char* what,
                                             std::int64_t lo, std::int64_t hi,
                                             const char* expected);

/// What parse_integer_list would refuse `list` for, without the option's name ("'0' is not a
/// positive integer"), or "" for a valid list: a CLI11 check of a list option, so that a bad
/// list is a usage error (exit 2) like any other option value out of range.
std::string integer_list_error(const std::string& list, std::int64_t lo, std::int64_t hi,
                               const char* expected);

/// "0,1234,42" -> {0, 1234, 42}; a clear error (naming --prompt-ids) for anything else.
std::vector<std::int32_t> parse_token_id_list(const std::string& list);

}  // namespace di::cli
