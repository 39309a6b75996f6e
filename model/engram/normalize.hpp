// The text normalizer Engram's compressed token map keys tokens by: HF tokenizers'
// Sequence[NFKC, NFD, StripAccents, Lowercase, Replace("[ \t\r\n]+" -> " "),
// Replace("^ $" -> sentinel), Strip, Replace(sentinel -> " ")], rebuilt on ICU so that
// " The", "the" and "THE" land on one compressed id exactly as in the reference.
#pragma once

#include <string>
#include <string_view>

namespace di {

/// The normalized form of valid UTF-8 `text` (may be empty; the token map then keys the
/// token by its decoded text instead). A text that is exactly whitespace that collapses
/// to one space normalizes to " " rather than "".
std::string engram_normalize(std::string_view text);

}  // namespace di
