// parse_token_id_list (see token_id_list.hpp).
#include "cli/detail/token_id_list.hpp"

#include "common/error.hpp"

#include <climits>
#include <sstream>

namespace di::cli {

std::vector<std::int32_t> parse_token_id_list(const std::string& list) {
  DI_CHECK(!list.empty(), "--prompt-ids is empty (give comma-separated token ids, e.g. 0,1234,42)");
  std::vector<std::int32_t> ids;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    DI_CHECK(used == item.size() && !item.empty() && v >= INT32_MIN && v <= INT32_MAX,
             "--prompt-ids: '{}' is not a token id (expected e.g. 0,1234,42)", item);
    ids.push_back(std::int32_t(v));
  }
  DI_CHECK(!ids.empty(), "--prompt-ids: no ids given");
  return ids;
}

}  // namespace di::cli
