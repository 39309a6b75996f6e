// The error a chat template raises: a syntax error found by parse(), a failure while
// rendering, or the template's own raise_exception(). It carries the template position so a
// user can find the offending tag.
#pragma once

#include "common/error.hpp"

#include <string>

namespace di {

/// A chat template that does not parse or fails to render. The message reads
/// "chat template syntax error at LINE:COLUMN: ..." (or "error", or "raised an exception").
class chat_template_error : public error {
 public:
  enum class kind {
    syntax,  // parse() rejected the template
    render,  // rendering failed (undefined variable, type error, sandbox limit)
    raised,  // the template called raise_exception(message)
  };

  chat_template_error(kind k, const std::string& message, int line, int column, const char* file,
                      int source_line);

  kind error_kind() const { return kind_; }
  /// 1-based position in the template source (newlines normalized to '\n').
  int template_line() const { return template_line_; }
  int template_column() const { return template_column_; }

 private:
  kind kind_;
  int template_line_;
  int template_column_;
};

}  // namespace di
