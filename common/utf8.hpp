// UTF-8 encoding of one code point, shared by the tokenizer, the chat templates and the grammar
// front ends, and a strict well-formedness check. Header-only; lossy decoding stays with its
// users, whose rules differ (the tokenizer replaces maximal invalid subparts as Rust does,
// templates as Python does).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace di {

/// Bytes of the UTF-8 encoding of `cp` (1..4); code points past U+FFFF take 4.
constexpr int utf8_encoded_length(char32_t cp) {
  return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

/// Writes the UTF-8 encoding of `cp` to `out` (room for 4 bytes); returns its length. The
/// caller decides what a surrogate or a value past U+10FFFF means; they are encoded as is.
constexpr int encode_utf8(char32_t cp, std::uint8_t* out) {
  const int n = utf8_encoded_length(cp);
  if (n == 1) {
    out[0] = std::uint8_t(cp);
    return 1;
  }
  constexpr std::uint8_t lead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
  for (int k = n - 1; k > 0; --k, cp >>= 6) out[k] = std::uint8_t(0x80 | (cp & 0x3F));
  out[0] = std::uint8_t(lead[n] | cp);
  return n;
}

/// Appends the UTF-8 encoding of `cp` to `out`.
inline void append_utf8(std::string& out, char32_t cp) {
  std::uint8_t bytes[4];
  const int n = encode_utf8(cp, bytes);
  out.append(reinterpret_cast<const char*>(bytes), std::size_t(n));
}

/// The offset of the first byte that is not part of well-formed UTF-8 (RFC 3629: no overlong
/// forms, no surrogates, nothing past U+10FFFF), or std::string_view::npos when `s` is valid.
inline std::size_t utf8_error_offset(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b = std::uint8_t(s[i]);
    int n = 0;
    std::uint8_t lo = 0x80, hi = 0xBF;  // the second byte's range
    if (b < 0x80)
      n = 1;
    else if (b >= 0xC2 && b <= 0xDF)
      n = 2;
    else if (b >= 0xE0 && b <= 0xEF)
      n = 3, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
    else if (b >= 0xF0 && b <= 0xF4)
      n = 4, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
    else
      return i;
    if (i + std::size_t(n) > s.size()) return i;
    for (int k = 1; k < n; ++k) {
      const auto c = std::uint8_t(s[i + std::size_t(k)]);
      if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return i;
    }
    i += std::size_t(n);
  }
  return std::string_view::npos;
}

}  // namespace di
