// Hand-written scanner equal to DeepSeek-V3's pre-tokenizer Splits (all Isolated):
//   1. \p{N}{1,3}   2. [一-龥぀-ゟ゠-ヿ]+   3. the word/punctuation/space alternation below.
// Steps 1 and 2 only cut, so one pass finds their boundaries; step 3 runs on each segment.
// Tested against the PCRE2 path on the golden set and the benchmark corpus.
#include "model/tokenizer/detail/char_classes.hpp"
#include "model/tokenizer/detail/pre_tokenizer.hpp"
#include "model/tokenizer/detail/utf8.hpp"

namespace di::tok::detail {

namespace {

using byte = unsigned char;

struct scanner {
  const byte* s;
  const char_class_table& classes;

  struct cp_info {
    std::uint8_t cls;
    std::uint8_t len;
    char32_t cp;
  };

  cp_info at(std::size_t i) const {
    if (s[i] < 0x80) return {classes(s[i]), 1, s[i]};
    char32_t cp;
    int len = decode_utf8(s + i, cp);
    return {classes(cp), std::uint8_t(len), cp};
  }

  // End of the run of characters whose class intersects `mask`, starting at `i`.
  std::size_t run_end(std::size_t i, std::size_t e, std::uint8_t mask) const {
    // ASCII letters first, without decoding: the bulk of English prose and code.
    if (mask & cc_letter) {
      while (i < e && is_ascii_letter(s[i])) ++i;
    }
    while (i < e) {
      cp_info c = at(i);
      if (!(c.cls & mask)) break;
      i += c.len;
    }
    return i;
  }

  static bool is_crlf(char32_t cp) { return cp == '\r' || cp == '\n'; }
  static bool is_ascii_letter(byte b) { return byte((b | 0x20) - 'a') < 26; }
  static bool is_ascii_punct(byte b) {
    return (b >= '!' && b <= '/') || (b >= ':' && b <= '@') || (b >= '[' && b <= '`') ||
           (b >= '{' && b <= '~');
  }

  std::size_t match_space(std::size_t i, std::size_t e) const;
  std::size_t match_at(std::size_t i, std::size_t e) const;
  void split_step3(std::size_t b, std::size_t e, std::vector<piece>& out) const;
};

// \s*[\r\n]+ | \s+(?!\S) | \s+  at i, where the character at i is a space.
std::size_t scanner::match_space(std::size_t i, std::size_t e) const {
  std::size_t j = i;
  std::size_t last_start = i;     // start of the last space character of the run
  std::size_t after_newline = 0;  // end of the last \r or \n in the run, 0 if none
  std::size_t num_chars = 0;
  while (j < e) {
    cp_info c = at(j);
    if (!(c.cls & cc_space)) break;
    last_start = j;
    j += c.len;
    ++num_chars;
    if (is_crlf(c.cp)) after_newline = j;
  }
  if (after_newline != 0) return after_newline;  // \s* backtracks to the last newline
  if (j == e || num_chars == 1) return j;        // (?!\S) holds at the end; else plain \s+
  return last_start;                             // leave one space to prefix the next word
}

// End of the step-3 match starting at i, or 0 when no alternative matches there.
std::size_t scanner::match_at(std::size_t i, std::size_t e) const {
  cp_info c0 = at(i);
  std::size_t i1 = i + c0.len;
  // [!"#...~][A-Za-z]+
  if (c0.len == 1 && is_ascii_punct(s[i]) && i1 < e && is_ascii_letter(s[i1])) {
    std::size_t j = i1 + 1;
    while (j < e && is_ascii_letter(s[j])) ++j;
    return j;
  }
  // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
  if (!is_crlf(c0.cp) && !(c0.cls & (cc_letter | cc_punct_symbol)) && i1 < e &&
      (at(i1).cls & (cc_letter | cc_mark))) {
    return run_end(i1, e, cc_letter | cc_mark);
  }
  if (c0.cls & (cc_letter | cc_mark)) return run_end(i, e, cc_letter | cc_mark);
  // ' '?[\p{P}\p{S}]+[\r\n]*
  std::size_t ps = (c0.cls & cc_punct_symbol) ? i : (c0.cp == ' ' && i1 < e) ? i1 : e;
  if (ps < e && (at(ps).cls & cc_punct_symbol)) {
    std::size_t j = run_end(ps, e, cc_punct_symbol);
    while (j < e && (s[j] == '\r' || s[j] == '\n')) ++j;
    return j;
  }
  if (c0.cls & cc_space) return match_space(i, e);
  return 0;
}

// Isolated split of [b, e) by step 3: matches and unmatched gaps both become pieces.
void scanner::split_step3(std::size_t b, std::size_t e, std::vector<piece>& out) const {
  std::size_t gap = b;
  std::size_t i = b;
  while (i < e) {
    std::size_t m = match_at(i, e);
    if (m == 0) {
      i += utf8_length(s[i]);
      continue;
    }
    if (gap < i) out.push_back({std::uint32_t(gap), std::uint32_t(i)});
    out.push_back({std::uint32_t(i), std::uint32_t(m)});
    i = gap = m;
  }
  if (gap < e) out.push_back({std::uint32_t(gap), std::uint32_t(e)});
}

bool is_cjk(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x30FF);
}

}  // namespace

void split_deepseek_v3(std::string_view text, std::vector<piece>& out) {
  scanner sc{reinterpret_cast<const byte*>(text.data()), char_class_table::get()};
  const std::size_t n = text.size();
  std::size_t segment = 0;
  std::size_t num_in_chunk = 0;  // digits in the current \p{N}{1,3} chunk
  bool prev_num = false;
  bool prev_cjk = false;
  for (std::size_t i = 0; i < n;) {
    if (!prev_num && !prev_cjk) {
      // Inside an ordinary segment, ASCII other than digits can never start a new one.
      while (i < n && sc.s[i] < 0x80 && !(sc.s[i] >= '0' && sc.s[i] <= '9')) ++i;
      if (i == n) break;
    }
    scanner::cp_info c = sc.at(i);
    bool num = c.cls & cc_number;
    bool cjk = c.cp >= 0x3040 && is_cjk(c.cp);
    bool num_boundary = num != prev_num || (num && num_in_chunk == 3);
    if (i > 0 && (num_boundary || cjk != prev_cjk)) {
      sc.split_step3(segment, i, out);
      segment = i;
    }
    if (num_boundary) num_in_chunk = 0;
    num_in_chunk += num;
    prev_num = num;
    prev_cjk = cjk;
    i += c.len;
  }
  sc.split_step3(segment, n, out);
}

}  // namespace di::tok::detail
