// The checkpoint files' wording of common/strict_json's errors.
#include "model/checkpoint/detail/strict_json.hpp"

#include "common/error.hpp"
#include "common/strict_json.hpp"

namespace di::detail {

nlohmann::json parse_strict_json(std::string_view text, std::string_view file,
                                 std::string_view what) {
  // Headers and shard indexes are two or three levels deep; deeper nesting only costs memory
  // (a 25 MB header of nested objects took 1.9 GB) and stack.
  constexpr int k_max_depth = 64;
  try {
    return parse_json_strict(text, k_max_depth);
  } catch (const json_input_error& e) {
    using kind = json_input_error::kind;
    if (e.what_kind == kind::syntax) DI_FAIL("{}: {} is not valid JSON: {}", file, what, e.what());
    if (e.what_kind == kind::too_deep) DI_FAIL("{}: {}: {}", file, what, e.what());
    if (e.path.size() == 1) DI_FAIL("{}: {}: {}", file, what, e.what());
    DI_FAIL("{}: {}: {} in '{}'", file, what, e.what(), e.path[e.path.size() - 2]);
  }
}

}  // namespace di::detail
