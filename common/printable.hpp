// Text from a file, made safe to put in an error message: a message goes to a terminal, a log
// and JSON (which needs valid UTF-8), so bytes a checkpoint or config holds must not reach it
// raw -- an invalid UTF-8 byte made the line invalid UTF-8, and a name holding "\u001b[2J" or a
// newline (valid JSON escapes) cleared the screen or split the line. Header-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace di {

namespace detail {

inline void append_escape(std::string& out, char kind, std::uint32_t value, int digits) {
  constexpr char hex[] = "0123456789ABCDEF";
  out += '\\';
  out += kind;
  for (int shift = 4 * (digits - 1); shift >= 0; shift -= 4) out += hex[(value >> shift) & 0xF];
}

/// Length of the valid UTF-8 sequence at s[i] and its code point, or 0 when the bytes there
/// are not one (a stray continuation byte, an overlong form, a surrogate, past U+10FFFF, cut).
inline std::size_t utf8_sequence(std::string_view s, std::size_t i, std::uint32_t& cp) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  std::size_t n = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(k) & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
  return n;
}

}  // namespace detail

/// `s` with what would not print as itself escaped: \n, \r, \t, other control characters
/// (C0, DEL, C1) as \xHH / \uHHHH, characters that reorder or break the line (U+2028, U+2029,
/// the bidirectional overrides and isolates) as \uHHHH, and each byte that is not part of
/// valid UTF-8 as \xHH. Printable ASCII and other valid UTF-8 (names in any script) are kept.
inline std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += char(c);
      ++i;
    } else if (c == '\n' || c == '\r' || c == '\t') {
      out += c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t";
      ++i;
    } else if (c < 0x80) {
      detail::append_escape(out, 'x', c, 2);
      ++i;
    } else if (std::uint32_t cp = 0; const std::size_t n = detail::utf8_sequence(s, i, cp)) {
      const bool hidden = cp <= 0x9F || cp == 0x2028 || cp == 0x2029 ||
                          (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
      if (hidden)
        detail::append_escape(out, 'u', cp, 4);
      else
        out.append(s.substr(i, n));
      i += n;
    } else {
      detail::append_escape(out, 'x', c, 2);
      ++i;
    }
  }
  return out;
}

}  // namespace di
