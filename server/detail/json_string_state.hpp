#pragma once

namespace di::server::detail {

/// Whether the bytes of a JSON text, fed in order, lie inside a string literal: scanners that
/// count brackets or members outside strings (tool-call bodies, a request's nesting) share it.
struct json_string_state {
  bool in_string = false;
  bool escaped = false;

  /// Feeds `c`; true when it is a structural byte: outside every string, and not a quote.
  bool is_structural(char c) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      return false;
    }
    if (c == '"') {
      in_string = true;
      return false;
    }
    return true;
  }
};

}  // namespace di::server::detail
