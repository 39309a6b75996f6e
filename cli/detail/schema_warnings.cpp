// See schema_warnings.hpp.
#include "cli/detail/schema_warnings.hpp"

#include <fmt/format.h>

#include <set>

namespace di::cli {

void print_schema_warnings(const std::vector<std::string>& warnings, const std::string& where) {
  std::set<std::string> printed;
  for (const auto& w : warnings)
    if (printed.insert(w).second) fmt::print(stderr, "warning: {}: {}\n", where, w);
}

}  // namespace di::cli
