// A short, bounded rendering of a JSON value for error messages. nlohmann's dump() recurses
// once per nesting level, so echoing a value nested 60,000 levels deep (a hostile schema or
// input line) overflowed the stack; this prints at most `max_chars` characters and at most
// `max_depth` levels ("..." marks what it leaves out). Header-only: any nlohmann json type.
#pragma once

#include <cstddef>
#include <string>

namespace di {

namespace detail {

template <class Json>
void json_brief_into(const Json& j, std::string& out, std::size_t max_chars, int depth) {
  if (out.size() > max_chars) return;
  if (j.is_array() || j.is_object()) {
    const bool array = j.is_array();
    if (depth <= 0) {
      out += array ? "[...]" : "{...}";
      return;
    }
    out += array ? '[' : '{';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (out.size() > max_chars) return;
      if (!first) out += ',';
      first = false;
      if (!array) out += Json(it.key()).dump() + ':';
      json_brief_into(*it, out, max_chars, depth - 1);
    }
    out += array ? ']' : '}';
    return;
  }
  out += j.dump();  // a scalar (a long string is cut below)
}

}  // namespace detail

template <class Json>
std::string json_brief(const Json& j, std::size_t max_chars = 200, int max_depth = 16) {
  std::string out;
  detail::json_brief_into(j, out, max_chars, max_depth);
  if (out.size() > max_chars) {
    out.resize(max_chars);
    out += "...";
  }
  return out;
}

}  // namespace di
