// Splits a chat template into tokens exactly as Jinja's lexer does under transformers'
// settings: trim_blocks and lstrip_blocks on, `-`/`+` whitespace control, comments dropped,
// {% raw %} kept verbatim, newlines normalized to '\n' and one trailing newline removed.
#pragma once

#include "model/chat_template/template_error.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace di::jinja {

/// 1-based line and column (in code points) in the template source.
struct source_pos {
  int line = 1;
  int column = 1;
};

enum class token_kind {
  text,            // template data outside tags
  variable_begin,  // {{
  variable_end,    // }}
  block_begin,     // {%
  block_end,       // %}
  name,
  string,  // `text` holds the decoded literal
  integer,
  floating,
  op,  // `text` holds the operator: "+", "//", "(", ...
  end_of_input,
};

struct token {
  token_kind kind = token_kind::end_of_input;
  std::string text;
  std::int64_t int_value = 0;
  double float_value = 0;
  source_pos pos;
};

/// Tokenizes `source`; the last token is end_of_input. Throws chat_template_error (syntax).
std::vector<token> tokenize(std::string_view source);

/// Throws a chat_template_error of kind `k` at `pos`.
[[noreturn]] void throw_template_error(chat_template_error::kind k, source_pos pos,
                                       const std::string& message);

}  // namespace di::jinja
