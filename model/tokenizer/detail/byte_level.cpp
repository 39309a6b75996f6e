// Byte-level alphabet tables (bytes_to_unicode of GPT-2), built once.
#include "model/tokenizer/detail/byte_level.hpp"

#include <array>

#include "model/tokenizer/detail/utf8.hpp"

namespace di::tok::detail {

namespace {

// Printable Latin-1 bytes stand for themselves; the other 68 bytes take 256, 257, ... in order.
struct byte_tables {
  std::array<char32_t, 256> to_char{};
  std::array<short, 512> to_byte{};

  byte_tables() {
    to_byte.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      char32_t c = printable ? char32_t(b) : char32_t(next++);
      to_char[std::size_t(b)] = c;
      to_byte[std::size_t(c)] = short(b);
    }
  }
};

const byte_tables& tables() {
  static const byte_tables t;
  return t;
}

}  // namespace

char32_t byte_to_char(unsigned char b) {
  return tables().to_char[b];
}

int char_to_byte(char32_t c) {
  return c < 512 ? tables().to_byte[c] : -1;
}

std::string bytes_to_token(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char b : bytes) append_utf8(out, byte_to_char(static_cast<unsigned char>(b)));
  return out;
}

std::optional<std::string> token_to_bytes(std::string_view token) {
  if (find_invalid_utf8(token) != token.size()) return std::nullopt;
  std::string out;
  out.reserve(token.size());
  const auto* p = reinterpret_cast<const unsigned char*>(token.data());
  const auto* end = p + token.size();
  while (p < end) {
    char32_t c;
    p += decode_utf8(p, c);
    int b = char_to_byte(c);
    if (b < 0) return std::nullopt;
    out.push_back(char(b));
  }
  return out;
}

}  // namespace di::tok::detail
