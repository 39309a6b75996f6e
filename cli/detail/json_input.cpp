// parse_json_input (see json_input.hpp).
#include "cli/detail/json_input.hpp"

#include "common/error.hpp"

namespace di::cli {

nlohmann::ordered_json parse_json_input(const std::string& text, const std::string& what) {
  using ojson = nlohmann::ordered_json;
  bool too_deep = false;
  // The parser itself keeps its own stack; the callback stops it before the document is built
  // deeper than the limit (a discarded parse, reported below).
  const ojson::parser_callback_t limit = [&](int depth, ojson::parse_event_t event, ojson&) {
    if ((event == ojson::parse_event_t::object_start ||
         event == ojson::parse_event_t::array_start) &&
        depth >= max_json_input_depth) {
      too_deep = true;
      throw std::runtime_error("too deep");
    }
    return true;
  };
  try {
    return ojson::parse(text, limit);
  } catch (const ojson::exception& e) {
    DI_FAIL("{} is not valid JSON: {}", what, e.what());
  } catch (const std::runtime_error&) {
    if (!too_deep) throw;
  }
  DI_FAIL("{} is nested more than {} levels deep", what, max_json_input_depth);
}

}  // namespace di::cli
