// Per-code-point Unicode classes used by the hand-written DeepSeek pre-tokenizer. The table is
// built once by matching the same translated PCRE2 classes that the PCRE2 path uses, so the
// two paths agree on every code point by construction.
#pragma once

#include <cstdint>
#include <vector>

namespace di::tok::detail {

/// Bit flags of one code point.
enum char_class : std::uint8_t {
  cc_letter = 1,        ///< \p{L}
  cc_mark = 2,          ///< \p{M}
  cc_number = 4,        ///< \p{N}
  cc_punct_symbol = 8,  ///< \p{P} or \p{S}
  cc_space = 16,        ///< Oniguruma \s: U+0009..U+000D, U+0085, \p{Z}
};

/// Two-stage lookup table from code point to char_class bits.
class char_class_table {
 public:
  /// The process-wide table (built on first use, about 50 ms; the pre-tokenizer builds it
  /// at load time so that no encode call pays for it).
  static const char_class_table& get();

  std::uint8_t operator()(char32_t cp) const {
    if (cp < 0x80) return ascii_[cp];
    return blocks_[std::size_t(block_index_[cp >> 8]) * 256 + (cp & 0xFF)];
  }

 private:
  char_class_table();

  std::vector<std::uint16_t> block_index_;  // [0x1100] block number per 256 code points
  std::vector<std::uint8_t> blocks_;        // [num_blocks * 256] deduplicated blocks
  std::uint8_t ascii_[0x80] = {};           // copy of the first block, one lookup for ASCII
};

}  // namespace di::tok::detail
