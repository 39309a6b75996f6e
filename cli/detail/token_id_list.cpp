// parse_integer_list, parse_token_id_list (see token_id_list.hpp).
#include "cli/detail/token_id_list.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <charconv>
#include <climits>
#include <string_view>

namespace di::cli {

std::vector<std::int64_t> parse_integer_list(const std::string& list, const char* what,
                                             std::int64_t lo, std::int64_t hi,
                                             const char* expected) {
  DI_CHECK(list.find_first_not_of(' ') != std::string::npos, "{}: empty list", what);
  std::vector<std::int64_t> out;
  std::size_t at = 0;
  while (true) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    std::string_view item(list.data() + at, comma - at);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    DI_CHECK(!item.empty(), "{}: '{}' has an empty item", what, list);
    std::string_view digits = item;
    if (digits.size() > 1 && digits.front() == '+') digits.remove_prefix(1);
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    DI_CHECK(ec == std::errc() && end == digits.data() + digits.size() && v >= lo && v <= hi,
             "{}: '{}' is not {}", what, item, expected);
    out.push_back(v);
    if (comma == list.size()) break;
    at = comma + 1;
  }
  return out;
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
