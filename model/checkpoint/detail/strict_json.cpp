// Duplicate-key detection through nlohmann's parser callback: one key set per open object.
#include "model/checkpoint/detail/strict_json.hpp"

#include "common/error.hpp"

#include <set>
#include <string>
#include <vector>

namespace di::detail {

namespace {

// The keys seen so far in one open object, and the key under which that object sits.
constexpr int k_max_depth = 64;

struct open_object {
  std::string parent_key;
  std::set<std::string> keys;
};

}  // namespace

nlohmann::json parse_strict_json(std::string_view text, std::string_view file,
                                 std::string_view what) {
  std::vector<open_object> stack;
  std::string last_key;  // the most recent key: the parent of an object that opens next
  auto on_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using event_t = nlohmann::json::parse_event_t;
    // Headers and shard indexes are two or three levels deep; deeper nesting only costs
    // memory (a 25 MB header of nested objects took 1.9 GB) and stack.
    if (depth > k_max_depth)
      DI_FAIL("{}: {}: nested deeper than {} levels", file, what, k_max_depth);
    if (event == event_t::object_start) {
      stack.push_back({stack.empty() ? std::string() : last_key, {}});
    } else if (event == event_t::object_end) {
      stack.pop_back();
    } else if (event == event_t::key) {
      last_key = parsed.get<std::string>();
      open_object& top = stack.back();
      if (!top.keys.insert(last_key).second) {
        if (stack.size() == 1) DI_FAIL("{}: {}: duplicate key '{}'", file, what, last_key);
        DI_FAIL("{}: {}: duplicate key '{}' in '{}'", file, what, last_key, top.parent_key);
      }
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), on_event);
  } catch (const nlohmann::json::exception& e) {
    DI_FAIL("{}: {} is not valid JSON: {}", file, what, e.what());
  }
}

}  // namespace di::detail
