// Definitions behind Lark's `%import common.NAME`, written in Lark syntax and parsed by our own
// Lark front end (same names and languages as lark's common.lark; the lazy-regex forms there
// are rewritten as plain regular expressions with the same matches).
#pragma once

#include <string_view>

namespace di::grammar::detail {

/// name -> Lark definition body; empty when `name` is not in the common library.
std::string_view lark_common_body(std::string_view name);

}  // namespace di::grammar::detail
