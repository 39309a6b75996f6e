// UTF-8 encoding of one code point, shared by the tokenizer, the chat templates and the grammar
// front ends. Header-only; validation and lossy decoding stay with their users, whose rules
// differ (the tokenizer replaces maximal invalid subparts as Rust does, templates as Python
// does).
#pragma once

#include <cstdint>
#include <string>

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

}  // namespace di
