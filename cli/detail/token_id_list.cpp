// parse_integer_list, parse_token_id_list (see token_id_list.hpp).
#include "cli/detail/token_id_list.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <charconv>
#include <climits>
#include <string_view>

#include <fmt/format.h>

namespace di::cli {

namespace {

/// Reads `list` into `out`; "" when it is a valid list, else what is wrong with it (without the
/// option's name).
std::string read_integer_list(const std::string& list, std::int64_t lo, std::int64_t hi,
                              const char* expected, std::vector<std::int64_t>& out) {
  if (list.find_first_not_of(' ') == std::string::npos) return "empty list";
  std::size_t at = 0;
  while (true) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    std::string_view item(list.data() + at, comma - at);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) return fmt::format("'{}' has an empty item", list);
    std::string_view digits = item;
    if (digits.size() > 1 && digits.front() == '+') digits.remove_prefix(1);
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (ec != std::errc() || end != digits.data() + digits.size() || v < lo || v > hi)
      return fmt::format("'{}' is not {}", item, expected);
    out.push_back(v);
    if (comma == list.size()) return {};
    at = comma + 1;
  }
}

}  // namespace

std::vector<std::int64_t> parse_integer_list(const std::string& list, const char* what,
                                             std::int64_t lo, std::int64_t hi,
                                             const char* expected) {
  std::vector<std::int64_t> out;
  const std::string problem = read_integer_list(list, lo, hi, expected, out);
  DI_CHECK(problem.empty(), "{}: {}", what, problem);
  return out;
}

std::string integer_list_error(const std::string& list, std::int64_t lo, std::int64_t hi,
                               const char* expected) {
  std::vector<std::int64_t> out;
  return read_integer_list(list, lo, hi, expected, out);
}

std::vector<std::int32_t> parse_token_id_list(const std::string& list) {
  DI_CHECK(!list.empty(), "--prompt-ids is empty (give comma-separated token ids, e.g. 0,1234,42)");
  std::vector<std::int32_t> ids;
  for (std::int64_t v : parse_integer_list(list, "--prompt-ids", INT32_MIN, INT32_MAX,
                                           "a token id (expected e.g. 0,1234,42)"))
    ids.push_back(std::int32_t(v));
  return ids;
}

}  // namespace di::cli
