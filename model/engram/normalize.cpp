// engram_normalize on ICU: NFKC and NFD through icu::Normalizer2, one pass over the code
// points for the accent strip and lowercase, then the whitespace rules. ICU is pinned to
// the Unicode versions of the Rust code HF tokenizers runs (9.0 normalization data, 17.0
// lowercase); checked over every code point against tokenizers 0.23.3.
#include "model/engram/normalize.hpp"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/uniset.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <memory>

#include "common/error.hpp"

namespace di {

namespace {

constexpr UChar32 sentinel = 0xE000;  // a private-use char the reference parks " " in

/// HF tokenizers normalizes with the `unicode-normalization-alignments` crate, whose tables
/// are Unicode 9.0: code points assigned later have no decomposition, no combining class
/// and are no marks there. ICU filtered to the 9.0 repertoire behaves the same, because
/// decompositions of assigned characters never change (Unicode's stability policy).
constexpr const char16_t* crate_repertoire = u"[:age=9.0:]";
/// The crate's combining marks (general category M in 9.0): U+1CF2 and U+1CF3 were marks
/// in 9.0 (letters since 10.0); U+111C9 was punctuation in 9.0 (a mark since 11.0).
constexpr const char16_t* crate_marks = u"[[[:M:]&[:age=9.0:]][\\u1CF2\\u1CF3]-[\\U000111C9]]";

/// The ICU objects the normalizer needs, built once (all are thread-safe for reading).
struct unicode_tables {
  icu::UnicodeSet repertoire;
  icu::UnicodeSet marks;
  std::unique_ptr<icu::Normalizer2> nfkc;  // FilteredNormalizer2 over `repertoire`
  std::unique_ptr<icu::Normalizer2> nfd;

  unicode_tables() {
    UErrorCode status = U_ZERO_ERROR;
    repertoire.applyPattern(icu::UnicodeString(crate_repertoire), status);
    marks.applyPattern(icu::UnicodeString(crate_marks), status);
    const icu::Normalizer2* full_nfkc = icu::Normalizer2::getNFKCInstance(status);
    const icu::Normalizer2* full_nfd = icu::Normalizer2::getNFDInstance(status);
    DI_CHECK(U_SUCCESS(status), "ICU Unicode data unavailable: {}", u_errorName(status));
    repertoire.freeze();
    marks.freeze();
    nfkc = std::make_unique<icu::FilteredNormalizer2>(*full_nfkc, repertoire);
    nfd = std::make_unique<icu::FilteredNormalizer2>(*full_nfd, repertoire);
  }
};

const unicode_tables& tables() {
  static const unicode_tables instance;
  return instance;
}

/// The reference's NFKC then NFD, as UTF-16.
icu::UnicodeString nfkc_then_nfd(std::string_view text) {
  const unicode_tables& t = tables();
  UErrorCode status = U_ZERO_ERROR;
  const auto utf16 =
      icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), int32_t(text.size())));
  icu::UnicodeString composed = t.nfkc->normalize(utf16, status);
  icu::UnicodeString decomposed = t.nfd->normalize(composed, status);
  DI_CHECK(U_SUCCESS(status), "ICU normalization failed: {}", u_errorName(status));
  return decomposed;
}

/// Lowercase pairs of Unicode 16 and 17, which Rust's char::to_lowercase (in the
/// tokenizers 0.23 wheels) knows and ICU 72 (Unicode 15) does not; found by comparing
/// every code point against HF tokenizers.
struct lowercase_pair {
  UChar32 upper;
  UChar32 lower;
};
constexpr lowercase_pair newer_pairs[] = {
    {0x1C89, 0x1C8A}, {0xA7CB, 0x0264}, {0xA7CC, 0xA7CD}, {0xA7CE, 0xA7CF},
    {0xA7D2, 0xA7D3}, {0xA7D4, 0xA7D5}, {0xA7DA, 0xA7DB}, {0xA7DC, 0x019B},
};

UChar32 newer_lowercase(UChar32 c) {
  if (c >= 0x10D50 && c <= 0x10D65) return c + 0x20;  // Garay
  if (c >= 0x16EA0 && c <= 0x16EB8) return c + 0x1B;  // Beria Erfe
  for (const lowercase_pair& pair : newer_pairs)
    if (pair.upper == c) return pair.lower;
  return c;
}

/// Rust's char::to_lowercase: the unconditional full mapping, never context dependent (no
/// final sigma). It differs from ICU's simple mapping only for U+0130 ("i" + U+0307).
void append_lowercase(UChar32 c, std::u32string& out) {
  if (c == 0x0130) {
    out += U'i';
    out += char32_t(0x0307);
    return;
  }
  const UChar32 newer = newer_lowercase(c);
  out += char32_t(newer != c ? newer : u_tolower(c));
}

bool is_collapsed_space(char32_t c) {
  return c == U' ' || c == U'\t' || c == U'\r' || c == U'\n';
}

/// Replace(Regex("[ \t\r\n]+"), " ").
std::u32string collapse_spaces(const std::u32string& in) {
  std::u32string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (!is_collapsed_space(in[i])) {
      out += in[i];
      continue;
    }
    out += U' ';
    while (i + 1 < in.size() && is_collapsed_space(in[i + 1])) ++i;
  }
  return out;
}

std::string to_utf8(const std::u32string& chars) {
  std::string out;
  out.reserve(chars.size() * 3);
  for (char32_t c : chars) {
    char buf[U8_MAX_LENGTH];
    int32_t len = 0;
    U8_APPEND_UNSAFE(buf, len, UChar32(c));  // ICU output holds only valid code points
    out.append(buf, std::size_t(len));
  }
  return out;
}

/// NFKC, NFD, StripAccents and Lowercase, as code points. ASCII (most tokens) skips ICU:
/// it has no decompositions and no marks, and lowercases within ASCII.
std::u32string fold(std::string_view text) {
  std::u32string chars;
  if (std::all_of(text.begin(), text.end(), [](char c) { return (unsigned char)c < 0x80; })) {
    chars.reserve(text.size());
    for (char c : text) chars += char32_t(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    return chars;
  }
  const icu::UnicodeSet& marks = tables().marks;
  const icu::UnicodeString decomposed = nfkc_then_nfd(text);
  chars.reserve(std::size_t(decomposed.length()));
  for (int32_t i = 0; i < decomposed.length(); i = decomposed.moveIndex32(i, 1)) {
    const UChar32 c = decomposed.char32At(i);
    if (!marks.contains(c)) append_lowercase(c, chars);
  }
  return chars;
}

}  // namespace

std::string engram_normalize(std::string_view text) {
  const std::u32string chars = collapse_spaces(fold(text));
  // Replace("^ $", sentinel) then Strip then Replace(sentinel, " "): a lone space survives
  // the strip, and every sentinel (also ones in the input) ends up as a space.
  if (chars == U" ") return " ";
  std::size_t begin = 0;
  std::size_t end = chars.size();
  while (begin < end && u_isUWhiteSpace(UChar32(chars[begin]))) ++begin;
  while (end > begin && u_isUWhiteSpace(UChar32(chars[end - 1]))) --end;
  std::u32string stripped = chars.substr(begin, end - begin);
  for (char32_t& c : stripped)
    if (c == char32_t(sentinel)) c = U' ';
  return to_utf8(stripped);
}

}  // namespace di
