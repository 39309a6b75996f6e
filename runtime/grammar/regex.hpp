// The regex front end: a pattern in the usual syntax (Rust/PCRE/ECMAScript common subset:
// classes, Unicode escapes and properties, quantifiers incl. {m,n}, alternation, groups,
// inline flags) becomes a grammar expression over bytes. Default semantics are full match;
// search mode gives JSON Schema `pattern` semantics (matches anywhere unless anchored).
// Constructs a context-free grammar cannot express exactly (backreferences, lookaround,
// word boundaries, anchors inside a full-match pattern) are clear errors, never approximations;
// in search mode anchors are read exactly wherever they sit (each path is kept by the anchors it
// passes; a part of the pattern they leave no way through is refused, saying so).
#pragma once

#include "runtime/grammar/grammar.hpp"

#include <functional>
#include <string_view>

namespace di::grammar {

/// The dialect a pattern is written in, where dialects read the same text differently.
enum class regex_flavor {
  /// Rust's regex crate (`regex:` response formats): a class may take `&&`, `--` and `~~`
  /// with nested classes, and POSIX `[:name:]` items; `{ m , n }` may hold spaces.
  rust,
  /// ECMAScript (JSON Schema `pattern`; callers add `unicode_classes = false` and `ecma_dot`):
  /// Rust's syntax less what ECMA-262 refuses or reads otherwise. Its reading is the u flag's
  /// (code points, `\p{..}`, `\u{..}`), as JSON Schema's test suite expects, so `\z`, `\A`,
  /// `\Z`, `\a`, `\e`, `\x{41}`, `\U..`, `\é`, inline flags, `(?P<n>` and `(?'n'` groups and a
  /// quantifier right after another are refused; `{ 2 }` (spaces) is literal text, `[]` matches
  /// nothing and `[^]` any character.
  ecmascript,
  /// Python's `re` (Lark terminals): `&&`, `--`, `~~`, `[` and `[:` inside a class are literal
  /// characters or ranges; `{,n}` is `{0,n}` and `{1, 2}` (with a space) is literal text;
  /// `\w` is letters, numbers and `_`, `\s` adds U+001C..U+001F; `(?a)` makes them and (?i)
  /// ASCII; (?i) adds re's extra cases (i ~ U+0130 ~ U+0131); `\101` and `[\1]` are octal
  /// escapes; `(?#...)` is a comment. What CPython 3.11's re refuses is refused (`\e`, `\z`,
  /// `\x{41}`, `(?<n>...)`, `a**`, flags after the start, ...); atomic groups and possessive
  /// quantifiers are taken where their text cannot end in two places (then they keep the plain
  /// language), else refused, as are `\N{name}` and conditional groups.
  python,
};

struct regex_options {
  regex_flavor flavor = regex_flavor::rust;
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
