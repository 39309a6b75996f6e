// Python str semantics over UTF-8 (see text.hpp). Case tables cover the scripts chat
// templates meet in practice; everything works on code points, never on bytes.
#include "model/chat_template/detail/text.hpp"

#include <algorithm>

namespace di::jinja {

namespace {

constexpr char32_t replacement_char = 0xFFFD;

bool in(char32_t c, char32_t lo, char32_t hi) {
  return c >= lo && c <= hi;
}

// Upper-case partner of a lower-case letter, or 0 when `c` is not a lower-case letter.
char32_t upper_of(char32_t c) {
  if (in(c, 'a', 'z')) return c - 32;
  if (c < 0x80) return 0;
  if ((in(c, 0xE0, 0xFE) && c != 0xF7)) return c - 0x20;
  if (c == 0xFF) return 0x178;
  if (in(c, 0x100, 0x12F) || in(c, 0x132, 0x137) || in(c, 0x14A, 0x177))
    return (c % 2 == 1) ? c - 1 : 0;
  if (in(c, 0x139, 0x148) || in(c, 0x179, 0x17E)) return (c % 2 == 0) ? c - 1 : 0;
  if (c == 0x3C2) return 0x3A3;
  if (in(c, 0x3B1, 0x3C1) || in(c, 0x3C3, 0x3C9)) return c - 0x20;
  if (c == 0x3AC) return 0x386;
  if (in(c, 0x3AD, 0x3AF)) return c - 0x25;
  if (c == 0x3CC) return 0x38C;
  if (in(c, 0x3CD, 0x3CE)) return c - 0x3F;
  if (in(c, 0x430, 0x44F)) return c - 0x20;
  if (in(c, 0x450, 0x45F)) return c - 0x50;
  if (in(c, 0xFF41, 0xFF5A)) return c - 0x20;
  return 0;
}

// Lower-case partner of an upper-case letter, or 0 when `c` is not an upper-case letter.
char32_t lower_of(char32_t c) {
  if (in(c, 'A', 'Z')) return c + 32;
  if (c < 0x80) return 0;
  if ((in(c, 0xC0, 0xDE) && c != 0xD7)) return c + 0x20;
  if (c == 0x178) return 0xFF;
  if (in(c, 0x100, 0x12F) || in(c, 0x132, 0x137) || in(c, 0x14A, 0x177))
    return (c % 2 == 0) ? c + 1 : 0;
  if (in(c, 0x139, 0x148) || in(c, 0x179, 0x17E)) return (c % 2 == 1) ? c + 1 : 0;
  if ((in(c, 0x391, 0x3A1) || in(c, 0x3A3, 0x3A9))) return c + 0x20;
  if (c == 0x386) return 0x3AC;
  if (in(c, 0x388, 0x38A)) return c + 0x25;
  if (c == 0x38C) return 0x3CC;
  if (in(c, 0x38E, 0x38F)) return c + 0x3F;
  if (in(c, 0x410, 0x42F)) return c + 0x20;
  if (in(c, 0x400, 0x40F)) return c + 0x50;
  if (in(c, 0xFF21, 0xFF3A)) return c + 0x20;
  return 0;
}

// Punctuation, symbols, marks and private use: never letters.
bool is_non_letter_block(char32_t c) {
  return in(c, 0x80, 0xBF) || c == 0xD7 || c == 0xF7 || in(c, 0x2B0, 0x36F) ||
         in(c, 0x2000, 0x2BFF) || in(c, 0x3000, 0x303F) || in(c, 0xD800, 0xF8FF) ||
         in(c, 0xFE00, 0xFE6F) || in(c, 0xFF00, 0xFF20) || in(c, 0xFF3B, 0xFF40) ||
         in(c, 0xFF5B, 0xFF65) || in(c, 0xFFF0, 0xFFFF) || in(c, 0x1F000, 0x1FAFF);
}

template <class Fn>
std::string map_code_points(std::string_view s, Fn fn) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : utf8_decode(s)) append_utf8(out, fn(c));
  return out;
}

bool contains(std::u32string_view set, char32_t c) {
  return set.find(c) != std::u32string_view::npos;
}

}  // namespace

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    auto b0 = static_cast<unsigned char>(s[i]);
    int len = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
    char32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    bool ok = len > 0 && i + len <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      auto b = static_cast<unsigned char>(s[i + k]);
      ok = (b & 0xC0) == 0x80;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (ok && len > 1) {
      constexpr char32_t min_of_len[5] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= min_of_len[len] && cp <= 0x10FFFF && !in(cp, 0xD800, 0xDFFF);
    }
    if (!ok) {
      out.push_back(replacement_char);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

std::size_t utf8_length(std::string_view s) {
  bool all_ascii = std::all_of(s.begin(), s.end(), [](char c) { return (c & 0x80) == 0; });
  return all_ascii ? s.size() : utf8_decode(s).size();
}

bool py_isspace(char32_t c) {
  return in(c, 0x09, 0x0D) || in(c, 0x1C, 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         in(c, 0x2000, 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool py_isdigit(char32_t c) {
  return in(c, '0', '9') || c == 0xB2 || c == 0xB3 || c == 0xB9 || in(c, 0x660, 0x669) ||
         in(c, 0x6F0, 0x6F9) || in(c, 0x966, 0x96F) || in(c, 0xFF10, 0xFF19);
}

bool py_isalpha(char32_t c) {
  if (c < 0x80) return in(c, 'a', 'z') || in(c, 'A', 'Z');
  if (c == 0xAA || c == 0xB5 || c == 0xBA) return true;
  if (py_isspace(c) || py_isdigit(c) || is_non_letter_block(c)) return false;
  return true;
}

bool py_isword(char32_t c) {
  return c == '_' || py_isalpha(c) || py_isdigit(c);
}

char32_t py_toupper(char32_t c) {
  char32_t u = upper_of(c);
  return u ? u : c;
}

char32_t py_tolower(char32_t c) {
  char32_t l = lower_of(c);
  return l ? l : c;
}

bool py_iscased(char32_t c) {
  return upper_of(c) != 0 || lower_of(c) != 0;
}

std::string py_strip(std::string_view s, strip_side side, const std::string* chars) {
  std::u32string cps = utf8_decode(s);
  std::u32string set = chars ? utf8_decode(*chars) : std::u32string{};
  auto strippable = [&](char32_t c) { return chars ? contains(set, c) : py_isspace(c); };
  std::size_t begin = 0, end = cps.size();
  if (side != strip_side::right)
    while (begin < end && strippable(cps[begin])) ++begin;
  if (side != strip_side::left)
    while (end > begin && strippable(cps[end - 1])) --end;
  return utf8_encode(std::u32string_view(cps).substr(begin, end - begin));
}

namespace {

std::vector<std::string> split_whitespace(std::string_view s, std::int64_t maxsplit) {
  std::u32string cps = utf8_decode(s);
  std::vector<std::string> parts;
  std::size_t i = 0, n = cps.size();
  while (true) {
    while (i < n && py_isspace(cps[i])) ++i;
    if (i == n) break;
    if (maxsplit >= 0 && std::int64_t(parts.size()) == maxsplit) {
      parts.push_back(utf8_encode(std::u32string_view(cps).substr(i)));  // keeps trailing space
      break;
    }
    std::size_t start = i;
    while (i < n && !py_isspace(cps[i])) ++i;
    parts.push_back(utf8_encode(std::u32string_view(cps).substr(start, i - start)));
  }
  return parts;
}

std::vector<std::string> split_sep(std::string_view s, std::string_view sep,
                                   std::int64_t maxsplit) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (maxsplit < 0 || std::int64_t(parts.size()) < maxsplit) {
    std::size_t hit = s.find(sep, start);
    if (hit == std::string_view::npos) break;
    parts.emplace_back(s.substr(start, hit - start));
    start = hit + sep.size();
  }
  parts.emplace_back(s.substr(start));
  return parts;
}

std::string reverse_code_points(std::string_view s) {
  std::u32string cps = utf8_decode(s);
  std::reverse(cps.begin(), cps.end());
  return utf8_encode(cps);
}

}  // namespace

std::vector<std::string> py_split(std::string_view s, const std::string* sep, std::int64_t maxsplit,
                                  bool from_right) {
  if (!from_right || maxsplit < 0)
    return sep ? split_sep(s, *sep, maxsplit) : split_whitespace(s, maxsplit);
  // rsplit with a limit: split the reversed text with the reversed separator.
  std::string reversed_sep = sep ? reverse_code_points(*sep) : std::string{};
  std::vector<std::string> parts = sep ? split_sep(reverse_code_points(s), reversed_sep, maxsplit)
                                       : split_whitespace(reverse_code_points(s), maxsplit);
  std::reverse(parts.begin(), parts.end());
  for (auto& part : parts) part = reverse_code_points(part);
  return parts;
}

std::vector<std::string> py_splitlines(std::string_view s) {
  std::u32string cps = utf8_decode(s);
  std::vector<std::string> lines;
  std::u32string current;
  for (std::size_t i = 0; i < cps.size(); ++i) {
    char32_t c = cps[i];
    bool is_break = c == '\n' || c == '\r' || in(c, 0x0B, 0x0C) || in(c, 0x1C, 0x1E) || c == 0x85 ||
                    c == 0x2028 || c == 0x2029;
    if (!is_break) {
      current.push_back(c);
      continue;
    }
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    lines.push_back(utf8_encode(current));
    current.clear();
  }
  if (!current.empty()) lines.push_back(utf8_encode(current));
  return lines;
}

std::string py_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : utf8_decode(s)) {
    if (c == 0xDF)
      out += "SS";  // Python upper-cases sharp s to two letters
    else
      append_utf8(out, py_toupper(c));
  }
  return out;
}
std::string py_lower(std::string_view s) {
  return map_code_points(s, py_tolower);
}

std::string py_capitalize(std::string_view s) {
  std::u32string cps = utf8_decode(s);
  for (std::size_t i = 0; i < cps.size(); ++i)
    cps[i] = i == 0 ? py_toupper(cps[i]) : py_tolower(cps[i]);
  return utf8_encode(cps);
}

std::string py_title(std::string_view s) {
  std::u32string cps = utf8_decode(s);
  bool previous_is_cased = false;
  for (char32_t& c : cps) {
    c = previous_is_cased ? py_tolower(c) : py_toupper(c);
    previous_is_cased = py_iscased(c);
  }
  return utf8_encode(cps);
}

std::string py_replace(std::string_view s, std::string_view old_text, std::string_view new_text,
                       std::int64_t count) {
  std::string out;
  if (old_text.empty()) {
    std::u32string cps = utf8_decode(s);
    std::int64_t done = 0;
    for (char32_t c : cps) {
      if (count < 0 || done < count) out += new_text, ++done;
      append_utf8(out, c);
    }
    if (count < 0 || done < count) out += new_text;
    return out;
  }
  std::size_t start = 0;
  for (std::int64_t done = 0; count < 0 || done < count; ++done) {
    std::size_t hit = s.find(old_text, start);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(start, hit - start));
    out.append(new_text);
    start = hit + old_text.size();
  }
  out.append(s.substr(start));
  return out;
}

std::int64_t py_count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return std::int64_t(utf8_length(s)) + 1;
  std::int64_t n = 0;
  for (std::size_t at = s.find(sub); at != std::string_view::npos;
       at = s.find(sub, at + sub.size()))
    ++n;
  return n;
}

std::int64_t py_find(std::string_view s, std::string_view sub, bool from_right) {
  std::size_t hit = from_right ? s.rfind(sub) : s.find(sub);
  if (hit == std::string_view::npos) return -1;
  return std::int64_t(utf8_length(s.substr(0, hit)));
}

}  // namespace di::jinja
