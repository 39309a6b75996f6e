// What a JSON Schema's compile leaves unenforced -- keywords a lenient compile skipped, unknown
// keywords and formats kept as annotations -- printed for the CLI's user (the grammar cache
// keeps them beside the grammar: grammar_cache::get_with_warnings).
#pragma once

#include <string>
#include <vector>

namespace di::cli {

/// Prints "warning: WHERE: ..." on stderr once per distinct warning a compile gave
/// (compile_response_format_with_warnings, grammar_cache::get_with_warnings). There is no
/// overload that takes the format: it ran the schema's front end, number automata included, a
/// second time.
void print_schema_warnings(const std::vector<std::string>& warnings, const std::string& where);

}  // namespace di::cli
