// The GPT-2 byte-level alphabet: every byte maps to one printable code point so that BPE
// vocabularies can be stored as text. Encoding never builds these strings (it works on byte
// ids); they are needed to read the vocabulary and to decode tokens back to bytes.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace di::tok::detail {

/// The code point that stands for byte `b` in byte-level token strings.
char32_t byte_to_char(unsigned char b);

/// The byte that code point `c` stands for, or -1 if `c` is not in the byte-level alphabet.
int char_to_byte(char32_t c);

/// UTF-8 of the byte-level string for raw `bytes` (e.g. " a" -> "Ġa").
std::string bytes_to_token(std::string_view bytes);

/// Raw bytes of a byte-level token string, or nullopt if some character is outside the
/// alphabet (then the ByteLevel decoder emits the token's UTF-8 unchanged, as HF does).
std::optional<std::string> token_to_bytes(std::string_view token);

}  // namespace di::tok::detail
