// See schema_warnings.hpp.
#include "cli/detail/schema_warnings.hpp"

#include "runtime/grammar/json_schema.hpp"

#include <fmt/format.h>

#include <set>

namespace di::cli {

void print_schema_warnings(const di::grammar::response_format& f, const std::string& where) {
  if (f.kind != di::grammar::format_kind::json_schema) return;
  print_schema_warnings(di::grammar::compile_json_schema_text(f.text, f.schema).warnings, where);
}

void print_schema_warnings(const std::vector<std::string>& warnings, const std::string& where) {
  std::set<std::string> printed;
  for (const auto& w : warnings)
    if (printed.insert(w).second) fmt::print(stderr, "warning: {}: {}\n", where, w);
}

}  // namespace di::cli
