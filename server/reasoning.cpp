// The reasoning parser (see reasoning.hpp).
#include "server/reasoning.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

namespace di::server {

namespace {

namespace think = deepseek_think_format;

/// The length of the longest end of `text` that begins `marker` (a marker that may complete).
std::size_t partial_marker_at_end(std::string_view text, std::string_view marker) {
  for (std::size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

/// Python's truth value of `v`, as vLLM reads a kwarg (`bool(chat_kwargs.get("thinking",
/// False))`) and as a Jinja `{% if thinking %}` in the template does: null, false, 0, 0.0, "",
/// [] and {} are false, every other value true -- the string "false" included.
bool python_truthy(const nlohmann::ordered_json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      return false;
    case nlohmann::json::value_t::boolean:
      return v.get<bool>();
    case nlohmann::json::value_t::number_integer:
      return v.get<std::int64_t>() != 0;
    case nlohmann::json::value_t::number_unsigned:
      return v.get<std::uint64_t>() != 0;
    case nlohmann::json::value_t::number_float:
      return v.get<double>() != 0.0;
    case nlohmann::json::value_t::string:
      return !v.get_ref<const std::string&>().empty();
    case nlohmann::json::value_t::array:
    case nlohmann::json::value_t::object:
    case nlohmann::json::value_t::binary:
      return !v.empty();
  }
  return false;
}

bool is_true(const nlohmann::ordered_json& kwargs, const char* key) {
  const auto it = kwargs.find(key);
  return it != kwargs.end() && python_truthy(*it);
}

}  // namespace

std::optional<reasoning_parser_kind> reasoning_parser_of(std::string_view name) {
  if (name.empty()) return reasoning_parser_kind::none;
  if (name == "deepseek_r1") return reasoning_parser_kind::deepseek_r1;
  if (name == "deepseek_v3") return reasoning_parser_kind::deepseek_v3;
  return std::nullopt;
}

bool splits_reasoning(reasoning_parser_kind kind, const nlohmann::ordered_json& chat_kwargs) {
  switch (kind) {
    case reasoning_parser_kind::none:
      return false;
    case reasoning_parser_kind::deepseek_r1:
      return true;
    case reasoning_parser_kind::deepseek_v3:
      return chat_kwargs.is_object() &&
             (is_true(chat_kwargs, "thinking") || is_true(chat_kwargs, "enable_thinking"));
  }
  return false;
}

reasoning_delta reasoning_parser::push(std::string_view text) {
  reasoning_delta d;
  if (stage_ == stage::content) {
    d.content = text;
    return d;
  }
  pending_ += text;
  if (stage_ == stage::start) {
    if (pending_.size() < think::begin.size() && think::begin.starts_with(pending_))
      return d;  // may still be the opening marker
    if (pending_.starts_with(think::begin)) pending_.erase(0, think::begin.size());
    stage_ = stage::reasoning;
  }
  if (const std::size_t at = pending_.find(think::end); at != std::string::npos) {
    d.reasoning = pending_.substr(0, at);
    d.content = pending_.substr(at + think::end.size());
    pending_.clear();
    stage_ = stage::content;
    return d;
  }
  const std::size_t keep = partial_marker_at_end(pending_, think::end);
  d.reasoning = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return d;
}

reasoning_delta reasoning_parser::finish() {
  reasoning_delta d;
  d.reasoning = std::move(pending_);  // no `</think>`: still reasoning
  pending_.clear();
  return d;
}

reasoning_delta split_reasoning(std::string_view text) {
  reasoning_parser p;
  reasoning_delta d = p.push(text);
  reasoning_delta rest = p.finish();
  d.reasoning += rest.reasoning;
  d.content += rest.content;
  return d;
}

std::string after_reasoning_spec(const std::string& spec) {
  return "after:" + std::to_string(think::end.size()) + ":" + std::string(think::end) + spec;
}

bool grammar_over_reasoning_allowed() {
  static const bool allowed = [] {
    const char* v = std::getenv("DEEPINFER_TEST_GRAMMAR_OVER_REASONING");
    return v != nullptr && std::string_view(v) == "1";
  }();
  return allowed;
}

}  // namespace di::server
