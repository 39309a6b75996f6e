// Tool-call parsing and grammars (see tool_calls.hpp). A call is read by a small scanner that
// says, of the text so far, whether it is a whole call, could still become one, or cannot:
// that three-way answer is what lets a stream hold back exactly what the whole text decides.
#include "server/tool_calls.hpp"
#include "server/detail/json_string_state.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace di::server {

namespace {

namespace fmt_ = deepseek_tool_format;

enum class scan_status { complete, incomplete, malformed };

/// The text from `pos` against `literal`: all of it there (pos moves past it), only a part
/// before the text ends, or something else.
scan_status expect(std::string_view text, std::size_t& pos, std::string_view literal) {
  const std::string_view rest = text.substr(pos);
  if (rest.starts_with(literal)) {
    pos += literal.size();
    return scan_status::complete;
  }
  return literal.starts_with(rest) ? scan_status::incomplete : scan_status::malformed;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

std::size_t skip_space(std::string_view text, std::size_t pos) {
  while (pos < text.size() && is_space(text[pos])) ++pos;
  return pos;
}

/// A JSON object from `pos`: its brackets closed outside strings, then checked whole.
scan_status scan_object(std::string_view text, std::size_t& pos) {
  if (pos == text.size()) return scan_status::incomplete;
  if (text[pos] != '{') return scan_status::malformed;
  int depth = 0;
  detail::json_string_state strings;
  for (std::size_t i = pos; i < text.size(); ++i) {
    const char c = text[i];
    if (!strings.is_structural(c)) continue;
    if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth > 0) continue;
      if (!nlohmann::json::accept(text.substr(pos, i + 1 - pos))) return scan_status::malformed;
      pos = i + 1;
      return scan_status::complete;
    }
  }
  return scan_status::incomplete;
}

struct call_scan {
  scan_status status = scan_status::incomplete;
  std::size_t end = 0;  ///< past the call, when complete
  tool_call call;
};

/// One call from `pos`: call_begin "function" sep NAME "\n```json" ARGS "```" call_end, with
/// whitespace allowed around ARGS and before call_end.
call_scan scan_call(std::string_view text, std::size_t pos) {
  call_scan s;
  for (std::string_view part : {fmt_::call_begin, std::string_view("function"), fmt_::sep})
    if ((s.status = expect(text, pos, part)) != scan_status::complete) return s;
  const std::size_t newline = text.find('\n', pos);
  if (newline == std::string_view::npos) {
    s.status =
        text.size() - pos > max_tool_name_bytes ? scan_status::malformed : scan_status::incomplete;
    return s;
  }
  std::string_view name = text.substr(pos, newline - pos);
  while (!name.empty() && is_space(name.back())) name.remove_suffix(1);
  while (!name.empty() && is_space(name.front())) name.remove_prefix(1);
  if (name.empty() || name.size() > max_tool_name_bytes ||
      name.find("<｜") != std::string_view::npos) {
    s.status = scan_status::malformed;
    return s;
  }
  s.call.name = std::string(name);
  pos = newline + 1;
  if ((s.status = expect(text, pos, "```json")) != scan_status::complete) return s;
  pos = skip_space(text, pos);
  const std::size_t args = pos;
  if ((s.status = scan_object(text, pos)) != scan_status::complete) return s;
  s.call.arguments = std::string(text.substr(args, pos - args));
  pos = skip_space(text, pos);
  if ((s.status = expect(text, pos, "```")) != scan_status::complete) return s;
  pos = skip_space(text, pos);
  if ((s.status = expect(text, pos, fmt_::call_end)) != scan_status::complete) return s;
  s.end = pos;
  return s;
}

/// The length of the longest end of `text` that begins `marker` (and is shorter than it).
std::size_t held_back(std::string_view text, std::string_view marker) {
  for (std::size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n)
    if (text.ends_with(marker.substr(0, n))) return n;
  return 0;
}

}  // namespace

tool_call_delta tool_call_parser::push(std::string_view text) {
  pending_ += text;
  return advance(false);
}

tool_call_delta tool_call_parser::finish() {
  return advance(true);
}

tool_call_delta tool_call_parser::advance(bool is_final) {
  tool_call_delta d;
  if (stage_ == stage::content) {
    const std::size_t at = pending_.find(fmt_::calls_begin);
    if (at == std::string::npos) {
      const std::size_t keep = is_final ? 0 : held_back(pending_, fmt_::calls_begin);
      d.content = pending_.substr(0, pending_.size() - keep);
      pending_.erase(0, pending_.size() - keep);
      return d;
    }
    d.content = pending_.substr(0, at);
    pending_.erase(0, at + fmt_::calls_begin.size());
    stage_ = stage::calls;
  }
  if (stage_ == stage::calls) read_calls(d, is_final);
  if (stage_ == stage::rest) {
    d.content += pending_;
    pending_.clear();
  }
  return d;
}

void tool_call_parser::read_calls(tool_call_delta& d, bool is_final) {
  for (;;) {
    // Whitespace (between calls the template's "\n"), then a call or, after one, the closing
    // marker.
    const std::size_t at = skip_space(pending_, 0);
    const std::string_view rest = std::string_view(pending_).substr(at);
    if (num_read_ > 0 && rest.starts_with(fmt_::calls_end)) {
      pending_.erase(0, at + fmt_::calls_end.size());
      stage_ = stage::rest;  // what follows the calls is content
      return;
    }
    const call_scan s = scan_call(pending_, at);
    if (s.status == scan_status::complete) {
      if (max_calls_ == 0 || num_kept_ < max_calls_) {
        d.calls.push_back(s.call);
        ++num_kept_;
      }
      ++num_read_;
      pending_.erase(0, s.end);
      continue;
    }
    const bool may_end = num_read_ > 0 && fmt_::calls_end.starts_with(rest);
    if (!is_final && (s.status == scan_status::incomplete || may_end)) return;  // wait
    if (num_read_ == 0)
      pending_.insert(0, fmt_::calls_begin);  // no call at all: the whole text is content
    else
      pending_.erase(0, at);  // after calls: the separator goes, what does not parse stays
    stage_ = stage::rest;
    return;
  }
}

std::string unreadable_tool_name(std::string_view name) {
  if (name.empty()) return "is empty";
  if (name.size() > max_tool_name_bytes)
    return "is longer than " + std::to_string(max_tool_name_bytes) + " bytes";
  if (name.find('\n') != std::string_view::npos) return "holds a newline";
  if (is_space(name.front()) || is_space(name.back())) return "begins or ends with whitespace";
  if (name.find("<｜") != std::string_view::npos) return "holds \"<｜\", which begins the markers";
  return "";
}

tool_call_delta parse_tool_calls(std::string_view text, std::size_t max_calls) {
  tool_call_parser p(max_calls);
  tool_call_delta d = p.push(text);
  tool_call_delta last = p.finish();
  d.content += last.content;
  d.calls.insert(d.calls.end(), last.calls.begin(), last.calls.end());
  return d;
}

std::string tool_call_grammar_spec(const request_json& tools, const std::string& only,
                                   bool parallel, const std::string& json_modifier) {
  request_json calls = request_json::array();
  for (const request_json& tool : tools) {
    const request_json& function = tool["function"];
    const std::string name = function["name"].get<std::string>();
    if (!only.empty() && name != only) continue;
    request_json schema =
        function.contains("parameters") && !function["parameters"].is_null()
            ? function["parameters"]
            : request_json{{"properties", request_json::object()}, {"additionalProperties", false}};
    // Arguments are an object, also where the schema does not say so.
    if (!schema.contains("type")) schema["type"] = "object";
    calls.push_back({{"begin", std::string(fmt_::call_begin) + "function" + std::string(fmt_::sep) +
                                   name + "\n```json\n"},
                     {"schema", std::move(schema)},
                     {"end", "\n```" + std::string(fmt_::call_end)},
                     {"name", name}});
  }
  const request_json spec = {{"begin", fmt_::calls_begin},
                             {"separator", "\n"},
                             {"end", fmt_::calls_end},
                             {"max_calls", parallel ? 0 : 1},
                             {"calls", std::move(calls)}};
  return "tool_calls" + json_modifier + ":" + spec.dump();
}

}  // namespace di::server
