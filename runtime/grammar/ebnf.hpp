// The EBNF front ends. GBNF (llama.cpp) and xgrammar's EBNF share one parser: `name ::= ...`
// rules, "strings", [classes], `.`, groups, | alternatives, * + ? {m} {m,} {m,n} {,n}, `#`
// comments, \x \u \U escapes; xgrammar's lookahead assertions `(= ...)` are parsed and not
// enforced (they only narrow what the surrounding rules already allow). Lark grammars
// (`start: ...`, terminals, /regex/, %import common, %ignore) have their own parser (lark.cpp).
#pragma once

#include "runtime/grammar/grammar.hpp"

#include <string>
#include <string_view>

namespace di::grammar {

struct ebnf_options {
  std::string root_rule = "root";  ///< GBNF/xgrammar start rule (Lark always uses `start`)
  std::size_t max_nesting = 200;   ///< parentheses nested deeper are an error
};

/// Parses GBNF / xgrammar EBNF. di::error names the line and column of a syntax error.
grammar parse_ebnf(std::string_view text, const ebnf_options& options = {});

/// Parses a Lark grammar (rule `start`).
grammar parse_lark(std::string_view text, const ebnf_options& options = {});

/// GBNF/xgrammar when the text defines rules with `::=`, Lark otherwise.
grammar parse_grammar_text(std::string_view text, const ebnf_options& options = {});

}  // namespace di::grammar
