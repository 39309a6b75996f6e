// Duplicate keys through nlohmann's parser callback: one key set per open object.
#include "common/strict_json.hpp"

#include "common/printable.hpp"

#include <set>

namespace di {

std::string without_nlohmann_tag(const std::string& what) {
  const auto tag_end = what.find("] ");
  return tag_end == std::string::npos ? what : what.substr(tag_end + 2);
}

nlohmann::json parse_json_strict(std::string_view text, int max_depth) {
  using json = nlohmann::json;
  std::vector<std::set<std::string>> keys;  // the keys seen in each open object
  std::vector<std::string> path;            // the keys leading to the current one
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth > max_depth)
      throw json_input_error(json_input_error::kind::too_deep,
                             "nested deeper than " + std::to_string(max_depth) + " levels");
    if (event == json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      keys.pop_back();
    } else if (event == json::parse_event_t::key) {
      const std::string& k = parsed.get_ref<const std::string&>();
      path.resize(keys.size() - 1);
      path.push_back(printable(k));  // the path is for messages: keys as they print
      if (!keys.back().insert(k).second)
        throw json_input_error(json_input_error::kind::duplicate_key,
                               "duplicate key '" + path.back() + "'", path);
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check);
  } catch (const json::exception& e) {
    // nlohmann's message quotes the bytes it last read ("last read: '\"x<0xFF>'"), so an
    // invalid UTF-8 byte of the input reached the message raw.
    throw json_input_error(json_input_error::kind::syntax,
                           printable(without_nlohmann_tag(e.what())));
  }
}

}  // namespace di
