// Turning values into text the way Python does: str() for `{{ }}` output, repr() for values
// inside containers, and json.dumps() for the tojson filter (as transformers configures it).
#pragma once

#include "model/chat_template/detail/value.hpp"

#include <optional>
#include <string>

namespace di::jinja {

/// Python's repr(float): shortest round-trip digits, "1.0", "1e+16", "inf", "nan".
std::string float_repr(double d);
/// Python's str(): strings as-is, undefined as "", None as "None", containers as repr().
void append_str(std::string& out, const value& v);
std::string to_str(const value& v);
/// Python's repr(): strings quoted and escaped.
void append_repr(std::string& out, const value& v);

/// Options of json.dumps as transformers' tojson passes them.
struct json_options {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: one line
  std::string item_separator = ", ";  // json.dumps uses "," when indent is set
  std::string key_separator = ": ";
  bool sort_keys = false;
};
/// json.dumps(); throws eval_error for values JSON cannot hold (Undefined, namespaces).
std::string json_dumps(const value& v, const json_options& options);

}  // namespace di::jinja
