// Parsing of the `--prompt-ids 1,2,3` argument shared by `generate` and `client`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace di::cli {

/// "0,1234,42" -> {0, 1234, 42}; a clear error (naming --prompt-ids) for anything else.
std::vector<std::int32_t> parse_token_id_list(const std::string& list);

}  // namespace di::cli
