// The regex front end: a pattern in the usual syntax (Rust/PCRE/ECMAScript common subset:
// classes, Unicode escapes and properties, quantifiers incl. {m,n}, alternation, groups,
// inline flags) becomes a grammar expression over bytes. Default semantics are full match;
// search mode gives JSON Schema `pattern` semantics (matches anywhere unless anchored).
// Constructs a context-free grammar cannot express exactly (backreferences, lookaround,
// word boundaries, anchors inside the pattern) are clear errors, never approximations.
#pragma once

#include "runtime/grammar/grammar.hpp"

#include <functional>
#include <string_view>

namespace di::grammar {

struct regex_options {
  /// Match anywhere in the input unless the pattern anchors itself with ^ / $ / \A / \z.
  bool search = false;
  /// \d \w \s and POSIX classes in their Unicode forms (Rust, Python); false gives the ASCII
  /// forms of ECMAScript (JSON Schema `pattern`).
  bool unicode_classes = true;
  /// ECMAScript line terminators: `.` excludes \r, U+2028 and U+2029 as well as \n.
  bool ecma_dot = false;
  bool case_insensitive = false;  ///< as if the pattern began with (?i)
  bool dot_all = false;           ///< as if the pattern began with (?s)
  std::size_t max_nesting = 200;  ///< groups nested deeper are an error
  /// How one character from a set is written in the target text; default: its UTF-8 bytes.
  /// The JSON Schema compiler maps characters to their escaped form inside a JSON string.
  std::function<expr_id(grammar&, const codepoint_set&)> char_mapper;
};

/// Compiles `pattern` into an expression of `g`. di::error with the position on bad syntax.
expr_id compile_regex(grammar& g, std::string_view pattern, const regex_options& options = {});

/// A grammar whose root is the regex (convenience for `--regex` and tests).
grammar regex_grammar(std::string_view pattern, const regex_options& options = {});

}  // namespace di::grammar
