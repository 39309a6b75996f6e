// Helpers shared by the chat-template unit tests: render a source string with a JSON
// context, and capture the error a template raises.
#pragma once

#include "model/chat_template/chat_template.hpp"

#include <doctest/doctest.h>

#include <string>

namespace di::test {

/// Parses and renders `source` with `context` (a JSON object, key order kept).
inline std::string render(const std::string& source,
                          const nlohmann::ordered_json& context = nlohmann::ordered_json::object(),
                          const chat_template_limits& limits = {}) {
  return chat_template::parse(source).render(context, limits);
}

/// What parse+render raised; `message` is empty when nothing was raised.
struct template_failure {
  chat_template_error::kind kind = chat_template_error::kind::render;
  std::string message;
  int line = 0;
  int column = 0;
};

inline template_failure failure_of(
    const std::string& source,
    const nlohmann::ordered_json& context = nlohmann::ordered_json::object(),
    const chat_template_limits& limits = {}) {
  try {
    render(source, context, limits);
  } catch (const chat_template_error& e) {
    return {e.error_kind(), e.what(), e.template_line(), e.template_column()};
  }
  return {};
}

/// True when `text` contains `part`; doctest shows both on failure via CAPTURE.
inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace di::test
