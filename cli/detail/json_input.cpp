// parse_json_input (see json_input.hpp).
#include "cli/detail/json_input.hpp"

#include "common/error.hpp"
#include "common/strict_json.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace di::cli {

nlohmann::ordered_json parse_json_input(const std::string& text, const std::string& what) {
  // The strict parser first: a key given twice in one object is refused (nlohmann keeps the
  // last silently: '{"role": "user", ..., "role": "system"}' became a system message), syntax
  // errors name line and column without nlohmann's tag, and nesting stays bounded. Then the
  // order-keeping parse the callers use (templates see the keys in their order).
  try {
    parse_json_strict(text, max_json_input_depth);
  } catch (const json_input_error& e) {
    if (e.what_kind == json_input_error::kind::duplicate_key)
      DI_FAIL("{}: key '{}' is given twice in one object", what, fmt::join(e.path, "."));
    if (e.what_kind == json_input_error::kind::too_deep)
      DI_FAIL("{} is nested more than {} levels deep", what, max_json_input_depth);
    DI_FAIL("{} is not valid JSON: {}", what, e.what());
  }
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::ordered_json::exception& e) {  // (the strict parse accepted it)
    DI_FAIL("{} is not valid JSON: {}", what, without_nlohmann_tag(e.what()));
  }
}

nlohmann::json parse_json_line(const std::string& line, const std::string& where) {
  try {
    return parse_json_strict(line, max_json_input_depth);
  } catch (const json_input_error& e) {
    if (e.what_kind == json_input_error::kind::duplicate_key)
      DI_FAIL("{}: key '{}' is given twice in one object", where, fmt::join(e.path, "."));
    if (e.what_kind == json_input_error::kind::too_deep)
      DI_FAIL("{}: nested more than {} levels deep", where, max_json_input_depth);
    DI_FAIL("{}: not valid JSON: {}", where, e.what());
  }
}

}  // namespace di::cli
