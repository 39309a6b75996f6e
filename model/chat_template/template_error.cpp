// chat_template_error: composes "chat template <what> at LINE:COLUMN: <message>".
#include "model/chat_template/template_error.hpp"

#include <fmt/format.h>

namespace di {

namespace {

const char* describe(chat_template_error::kind k) {
  switch (k) {
    case chat_template_error::kind::syntax:
      return "chat template syntax error";
    case chat_template_error::kind::render:
      return "chat template error";
    case chat_template_error::kind::raised:
      return "chat template raised an exception";
  }
  return "chat template error";
}

}  // namespace

chat_template_error::chat_template_error(kind k, const std::string& message, int line, int column,
                                         const char* file, int source_line)
    : error(fmt::format("{} at {}:{}: {}", describe(k), line, column, message), file, source_line),
      kind_(k),
      template_line_(line),
      template_column_(column) {}

}  // namespace di
