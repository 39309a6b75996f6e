// Python str semantics over UTF-8 strings: code points, whitespace, strip/split/case mapping.
// Chat templates are written against Python strings, so lengths, slices and str methods must
// count code points and use Python's whitespace set, not bytes and isspace().
#pragma once

#include "common/utf8.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace di::jinja {

/// Decodes UTF-8; each byte of an invalid sequence decodes to U+FFFD.
std::u32string utf8_decode(std::string_view s);
/// Encodes code points as UTF-8 (one code point: di::append_utf8 in common/utf8.hpp).
std::string utf8_encode(std::u32string_view s);
/// Number of code points (what Python's len() returns for a str).
std::size_t utf8_length(std::string_view s);

/// Python's str.isspace() for one code point (includes U+00A0, U+3000, U+001C..U+001F...).
bool py_isspace(char32_t c);
/// str.isalpha()/isdigit() for ASCII, Latin, Greek, Cyrillic and CJK; other scripts are
/// approximated (letters outside these blocks count as alphabetic if they are not spaces
/// or punctuation).
bool py_isalpha(char32_t c);
bool py_isdigit(char32_t c);
/// Word characters of Python's `\w` (letters, digits, underscore).
bool py_isword(char32_t c);
/// Simple case mapping for ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic and fullwidth
/// Latin (one code point to one code point, as Python does for these blocks).
char32_t py_toupper(char32_t c);
char32_t py_tolower(char32_t c);
bool py_iscased(char32_t c);

enum class strip_side { left, right, both };
/// str.strip()/lstrip()/rstrip(): whitespace when `chars` is null, else the given characters.
std::string py_strip(std::string_view s, strip_side side, const std::string* chars = nullptr);
/// str.split(): on runs of whitespace when `sep` is null, else on `sep` (must be non-empty).
/// `maxsplit` < 0 means no limit; `from_right` gives str.rsplit().
std::vector<std::string> py_split(std::string_view s, const std::string* sep, std::int64_t maxsplit,
                                  bool from_right = false);
/// str.splitlines(keepends=False) with Python's set of line boundaries.
std::vector<std::string> py_splitlines(std::string_view s);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
/// str.capitalize(): first code point upper-cased, the rest lower-cased.
std::string py_capitalize(std::string_view s);
/// str.title(): upper-cases a cased character that follows an uncased one.
std::string py_title(std::string_view s);
/// str.replace(old, new, count); an empty `old` inserts `new` around every code point.
std::string py_replace(std::string_view s, std::string_view old_text, std::string_view new_text,
                       std::int64_t count);
/// str.count(sub): non-overlapping occurrences; an empty `sub` gives len(s) + 1.
std::int64_t py_count(std::string_view s, std::string_view sub);
/// str.find()/rfind() as a code-point index, or -1.
std::int64_t py_find(std::string_view s, std::string_view sub, bool from_right);

}  // namespace di::jinja
