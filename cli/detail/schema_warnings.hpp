// What a JSON Schema's compile leaves unenforced -- keywords a lenient compile skipped, unknown
// keywords and formats kept as annotations -- printed for the CLI's user: the grammar cache
// keeps only the grammar, so these warnings were dropped.
#pragma once

#include "runtime/grammar/response_format.hpp"

#include <string>
#include <vector>

namespace di::cli {

/// Prints "warning: WHERE: ..." on stderr once per distinct warning of `f`'s JSON Schema
/// (nothing for other kinds). Runs the schema's front end again, number automata included:
/// where a compile is at hand, take its warnings (the overload below).
void print_schema_warnings(const di::grammar::response_format& f, const std::string& where);
/// The same for warnings a compile already gave (compile_response_format_with_warnings).
void print_schema_warnings(const std::vector<std::string>& warnings, const std::string& where);

}  // namespace di::cli
