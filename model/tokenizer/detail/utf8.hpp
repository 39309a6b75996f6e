// UTF-8 helpers for the tokenizer: validation, decoding one code point, and a lossy decoder
// that replaces invalid sequences with U+FFFD exactly like Rust's String::from_utf8_lossy
// (one U+FFFD per maximal invalid subpart), usable incrementally for streaming output.
#pragma once

#include "common/utf8.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace di::tok::detail {

/// Offset of the first byte that is not part of valid UTF-8, or `text.size()` if all valid.
std::size_t find_invalid_utf8(std::string_view text);

/// Decodes the code point at `p` (valid UTF-8 guaranteed by the caller); returns its length.
inline int decode_utf8(const unsigned char* p, char32_t& cp) {
  unsigned char b = p[0];
  if (b < 0x80) {
    cp = b;
    return 1;
  }
  if (b < 0xE0) {
    cp = (char32_t(b & 0x1F) << 6) | (p[1] & 0x3F);
    return 2;
  }
  if (b < 0xF0) {
    cp = (char32_t(b & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    return 3;
  }
  cp = (char32_t(b & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) | (char32_t(p[2] & 0x3F) << 6) |
       (p[3] & 0x3F);
  return 4;
}

/// Length of the UTF-8 sequence that starts with lead byte `b` (valid input assumed).
inline int utf8_length(unsigned char b) {
  return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

/// Incremental lossy UTF-8 decoder: complete, valid sequences pass through; an invalid
/// maximal subpart becomes one U+FFFD; up to 3 bytes of a possibly valid prefix are held back
/// until the next bytes (or `finish`) decide them. Feeding a byte string in any split gives the
/// same output as feeding it whole.
class utf8_lossy_decoder {
 public:
  /// Appends to `out` everything that the bytes so far determine.
  void feed(std::string_view bytes, std::string& out);
  /// Ends the input: a held-back incomplete sequence becomes U+FFFD. The decoder is reset.
  void finish(std::string& out);
  /// True when bytes of an incomplete sequence are being held back.
  bool has_pending() const { return num_pending_ > 0; }
  /// True when bytes are held back and `b` cannot continue them: feeding it first emits the
  /// held bytes as one U+FFFD.
  bool abandons_pending(unsigned char b) const {
    return num_needed_ > 0 && (b < lower_ || b > upper_);
  }

 private:
  void feed_byte(unsigned char b, std::string& out);
  void reset_sequence();

  unsigned char pending_[4] = {};
  int num_pending_ = 0;
  int num_needed_ = 0;  // continuation bytes still expected
  unsigned char lower_ = 0x80;
  unsigned char upper_ = 0xBF;
};

/// Whole-string lossy conversion (from_utf8_lossy); returns `bytes` unchanged if valid.
std::string utf8_lossy(std::string_view bytes);

}  // namespace di::tok::detail
