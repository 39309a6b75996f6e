// Jinja's lexer, rewritten as a hand-written scanner over the rules it compiles to regexes
// (see lexer.hpp). The whitespace rules are subtle and templates depend on them byte for
// byte, so each rule below names the Jinja behaviour it reproduces.
#include "model/chat_template/detail/lexer.hpp"

#include "model/chat_template/detail/text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <functional>

namespace di::jinja {

void throw_template_error(chat_template_error::kind k, source_pos pos, const std::string& message) {
  throw chat_template_error(k, message, pos.line, pos.column, __FILE__, __LINE__);
}

namespace {

constexpr bool trim_blocks = true;  // transformers' environment: trim_blocks=True

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

// \r\n and \r become \n; one trailing newline is dropped (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Length in bytes of the Python-whitespace code point at `p`, or 0.
std::size_t space_at(std::string_view s, std::size_t p) {
  if (p >= s.size()) return 0;
  auto c = static_cast<unsigned char>(s[p]);
  if (c < 0x80) return py_isspace(c) ? 1 : 0;
  std::size_t len = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
  std::u32string cp = utf8_decode(s.substr(p, len));
  return cp.size() == 1 && py_isspace(cp[0]) ? len : 0;
}

std::size_t skip_spaces(std::string_view s, std::size_t p) {
  while (std::size_t n = space_at(s, p)) p += n;
  return p;
}

// Python's str.rstrip() on UTF-8: strips trailing whitespace code points.
std::string_view rstrip(std::string_view text) {
  std::u32string cps = utf8_decode(text);
  std::size_t keep_cps = cps.size();
  while (keep_cps > 0 && py_isspace(cps[keep_cps - 1])) --keep_cps;
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < keep_cps; ++i) {
    auto c = static_cast<unsigned char>(text[bytes]);
    bytes += c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  }
  return text.substr(0, std::min(bytes, text.size()));
}

class lexer {
 public:
  explicit lexer(std::string source) : src_(std::move(source)) {
    line_starts_.push_back(0);
    for (std::size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<token> run();

 private:
  enum class tag { variable, block, comment, raw };

  source_pos pos_of(std::size_t offset) const;
  [[noreturn]] void fail(std::size_t offset, const std::string& message) const {
    throw_template_error(chat_template_error::kind::syntax, pos_of(offset), message);
  }
  void emit(token_kind kind, std::size_t offset, std::string text = {});
  void emit_text(std::string_view text, char sign, bool strip_allowed, std::size_t offset);
  std::size_t match_raw_begin(std::size_t p) const;
  std::size_t lex_comment(std::size_t p, std::size_t open_offset);
  std::size_t lex_raw(std::size_t p, std::size_t open_offset);
  std::size_t lex_tag(std::size_t p, tag kind, std::size_t open_offset);
  std::size_t lex_number(std::size_t p);
  std::size_t lex_string(std::size_t p);
  std::size_t lex_operator(std::size_t p, std::vector<char>& balance);

  std::string src_;
  std::vector<std::size_t> line_starts_;
  std::vector<token> tokens_;
  bool line_starting_ = true;  // did the previous match end with '\n'?
  // pos_of's last answer: tokens come in source order, so the next column is counted on from
  // it (counting from the line start each time made one long line quadratic).
  mutable std::size_t last_offset_ = 0;
  mutable source_pos last_pos_{1, 1};
};

source_pos lexer::pos_of(std::size_t offset) const {
  auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
  std::size_t line = std::size_t(it - line_starts_.begin());
  std::size_t start = line_starts_[line - 1];
  std::size_t column = 0;
  if (std::size_t(last_pos_.line) == line && last_offset_ >= start && last_offset_ <= offset)
    column = std::size_t(last_pos_.column) +
             utf8_length(std::string_view(src_).substr(last_offset_, offset - last_offset_));
  else
    column = utf8_length(std::string_view(src_).substr(start, offset - start)) + 1;
  last_offset_ = offset;
  last_pos_ = {int(line), int(column)};
  return last_pos_;
}

void lexer::emit(token_kind kind, std::size_t offset, std::string text) {
  tokens_.push_back(token{kind, std::move(text), 0, 0, pos_of(offset)});
}

// Text before a tag: `{%-` strips all whitespace before it; otherwise lstrip_blocks removes
// spaces between the start of the line and a block or comment tag (not `{{`, not `{%+`).
void lexer::emit_text(std::string_view text, char sign, bool strip_allowed, std::size_t offset) {
  if (sign == '-') {
    text = rstrip(text);
  } else if (sign != '+' && strip_allowed) {
    std::size_t nl = text.rfind('\n');
    std::size_t line_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if (line_pos > 0 || line_starting_) {
      std::string_view tail = text.substr(line_pos);
      if (!tail.empty() && skip_spaces(tail, 0) == tail.size()) text = text.substr(0, line_pos);
    }
  }
  if (!text.empty()) emit(token_kind::text, offset, std::string(text));
}

std::vector<token> lexer::run() {
  std::size_t p = 0;
  while (p < src_.size()) {
    std::size_t k = p;
    while ((k = src_.find('{', k)) != std::string::npos) {
      if (k + 1 < src_.size() && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#'))
        break;
      ++k;
    }
    if (k == std::string::npos) {
      emit(token_kind::text, p, src_.substr(p));
      break;
    }
    std::size_t raw_end = src_[k + 1] == '%' ? match_raw_begin(k) : 0;
    tag kind = raw_end              ? tag::raw
               : src_[k + 1] == '{' ? tag::variable
               : src_[k + 1] == '%' ? tag::block
                                    : tag::comment;
    std::size_t after = k + 2;
    char sign = 0;
    if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
    emit_text(std::string_view(src_).substr(p, k - p), sign, kind != tag::variable, p);
    line_starting_ = false;
    switch (kind) {
      case tag::comment:
        p = lex_comment(after, k);
        break;
      case tag::raw:
        p = lex_raw(raw_end, k);
        break;
      default:
        p = lex_tag(after, kind, k);
        break;
    }
  }
  emit(token_kind::end_of_input, src_.size());
  return std::move(tokens_);
}

// `{%[-+]? raw [-]%}`: returns the offset after the tag, or 0 when `p` does not start one.
// Unlike other block ends, `%}` here does not eat the following newline (Jinja's rule).
std::size_t lexer::match_raw_begin(std::size_t p) const {
  std::size_t q = p + 2;
  if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ++q;
  q = skip_spaces(src_, q);
  if (src_.compare(q, 3, "raw") != 0) return 0;
  q = skip_spaces(src_, q + 3);
  if (src_.compare(q, 3, "-%}") == 0) return skip_spaces(src_, q + 3);
  if (src_.compare(q, 2, "%}") == 0) return q + 2;
  return 0;
}

// After a tag end: `-%}` eats all following whitespace, `+%}` nothing, plain `%}` (and `#}`)
// one newline (trim_blocks). `close` is "%}" or "#}"; `q` points at it.
std::size_t end_tag(std::string_view src, std::size_t q, char sign_before) {
  std::size_t p = q + 2;
  if (sign_before == '-') return skip_spaces(src, p);
  if (sign_before == '+') return p;
  if (trim_blocks && p < src.size() && src[p] == '\n') ++p;
  return p;
}

std::size_t lexer::lex_comment(std::size_t p, std::size_t open_offset) {
  if (p >= src_.size()) return p;  // Jinja accepts a bare '{#' as the very last characters
  std::size_t close = src_.find("#}", p);
  if (close == std::string::npos) fail(open_offset, "missing end of comment tag '#}'");
  char sign = close > p && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : 0;
  std::size_t next = end_tag(src_, close, sign);
  line_starting_ = next > 0 && src_[next - 1] == '\n';
  return next;
}

std::size_t lexer::lex_raw(std::size_t p, std::size_t open_offset) {
  line_starting_ = p > 0 && src_[p - 1] == '\n';
  for (std::size_t k = src_.find("{%", p); k != std::string::npos; k = src_.find("{%", k + 1)) {
    std::size_t q = k + 2;
    char sign = 0;
    if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
    q = skip_spaces(src_, q);
    if (src_.compare(q, 6, "endraw") != 0) continue;
    q = skip_spaces(src_, q + 6);
    char end_sign = 0;
    if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) end_sign = src_[q++];
    if (src_.compare(q, 2, "%}") != 0) continue;
    emit_text(std::string_view(src_).substr(p, k - p), sign, true, p);
    std::size_t next = end_tag(src_, q, end_sign);
    line_starting_ = next > 0 && src_[next - 1] == '\n';
    return next;
  }
  fail(open_offset, "missing end of raw directive ({% endraw %})");
}

std::size_t lexer::lex_tag(std::size_t p, tag kind, std::size_t open_offset) {
  bool is_block = kind == tag::block;
  emit(is_block ? token_kind::block_begin : token_kind::variable_begin, open_offset);
  std::vector<char> balance;  // closing brackets we still expect
  while (true) {
    p = skip_spaces(src_, p);
    if (p >= src_.size())
      fail(open_offset,
           fmt::format("unexpected end of template: '{}' is never closed", is_block ? "{%" : "{{"));
    if (balance.empty()) {
      char c = src_[p];
      bool signed_end = (c == '-' || (c == '+' && is_block)) &&
                        src_.compare(p + 1, 2, is_block ? "%}" : "}}") == 0;
      if (signed_end || src_.compare(p, 2, is_block ? "%}" : "}}") == 0) {
        std::size_t close = signed_end ? p + 1 : p;
        char sign = signed_end ? c : 0;
        std::size_t next = is_block      ? end_tag(src_, close, sign)
                           : sign == '-' ? skip_spaces(src_, close + 2)
                                         : close + 2;
        emit(is_block ? token_kind::block_end : token_kind::variable_end, p);
        line_starting_ = src_[next - 1] == '\n';
        return next;
      }
    }
    char c = src_[p];
    if (is_digit(c))
      p = lex_number(p);
    else if (is_name_start(c)) {
      std::size_t q = p;
      while (q < src_.size() && is_name_char(src_[q])) ++q;
      emit(token_kind::name, p, src_.substr(p, q - p));
      p = q;
    } else if (c == '\'' || c == '"')
      p = lex_string(p);
    else
      p = lex_operator(p, balance);
  }
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Digits grouped by single underscores, Jinja's `(\d+_)*\d+`; returns `q` when none match.
template <class Pred>
std::size_t digits_end(std::string_view s, std::size_t q, Pred is_valid) {
  if (q >= s.size() || !is_valid(s[q])) return q;
  std::size_t e = q;
  while (true) {
    while (e < s.size() && is_valid(s[e])) ++e;
    if (e + 1 < s.size() && s[e] == '_' && is_valid(s[e + 1])) {
      ++e;
      continue;
    }
    return e;
  }
}

std::string without_underscores(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != '_') out.push_back(c);
  return out;
}

// Jinja's float rule at `p`: digits, then a fraction and/or an exponent; 0 when it is not a
// float. A float never follows a '.' (so `x.0` is an item lookup).
std::size_t float_end(std::string_view src, std::size_t p) {
  if (p > 0 && src[p - 1] == '.') return 0;
  std::size_t q = digits_end(src, p, is_digit);
  bool has_fraction = false;
  if (q < src.size() && src[q] == '.') {
    std::size_t f = digits_end(src, q + 1, is_digit);
    if (f > q + 1) q = f, has_fraction = true;
  }
  if (q < src.size() && (src[q] == 'e' || src[q] == 'E')) {
    std::size_t d = q + 1;
    if (d < src.size() && (src[d] == '+' || src[d] == '-')) ++d;
    std::size_t x = digits_end(src, d, is_digit);
    if (x > d) return x;
  }
  return has_fraction ? q : 0;
}

// Jinja's integer rule at `p`: 0b/0o/0x prefixed, [1-9](_?digit)*, or 0(_?0)*.
struct integer_match {
  std::size_t digits_begin, end;
  int base;
};
integer_match integer_at(std::string_view src, std::size_t p) {
  auto prefixed_end = [&](auto is_valid) {  // (_?digit)+ after the prefix
    std::size_t q = p + 2;
    while (true) {
      if (q < src.size() && is_valid(src[q]))
        ++q;
      else if (q + 1 < src.size() && src[q] == '_' && is_valid(src[q + 1]))
        q += 2;
      else
        return q;
    }
  };
  char prefix = p + 1 < src.size() ? char(src[p + 1] | 0x20) : 0;
  if (src[p] == '0' && (prefix == 'b' || prefix == 'o' || prefix == 'x')) {
    int base = prefix == 'b' ? 2 : prefix == 'o' ? 8 : 16;
    std::size_t end = prefixed_end([base](char c) {
      int v = hex_value(c);
      return v >= 0 && v < base;
    });
    if (end > p + 2) return {p + 2, end, base};
    return {p, p + 1, 10};  // a lone "0"
  }
  if (src[p] == '0') return {p, digits_end(src, p, [](char c) { return c == '0'; }), 10};
  return {p, digits_end(src, p, is_digit), 10};
}

std::size_t lexer::lex_number(std::size_t p) {
  if (std::size_t end = float_end(src_, p)) {
    token t{token_kind::floating, src_.substr(p, end - p), 0, 0, pos_of(p)};
    t.float_value = std::strtod(without_underscores(t.text).c_str(), nullptr);
    tokens_.push_back(std::move(t));
    return end;
  }
  integer_match m = integer_at(src_, p);
  std::string digits =
      without_underscores(std::string_view(src_).substr(m.digits_begin, m.end - m.digits_begin));
  std::int64_t v = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, m.base);
  if (ec != std::errc() || ptr != digits.data() + digits.size())
    fail(p, fmt::format("integer literal '{}' does not fit in 64 bits", src_.substr(p, m.end - p)));
  tokens_.push_back(token{token_kind::integer, src_.substr(p, m.end - p), v, 0, pos_of(p)});
  return m.end;
}

using fail_fn = std::function<void(const std::string&)>;

// The character a one-letter escape stands for (\n, \t, ...), or -1.
int simple_escape(char c) {
  switch (c) {
    case '\\':
      return '\\';
    case '\'':
      return '\'';
    case '"':
      return '"';
    case 'a':
      return '\a';
    case 'b':
      return '\b';
    case 'f':
      return '\f';
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    case 'v':
      return '\v';
    default:
      return -1;
  }
}

// \xhh, \uhhhh, \Uhhhhhhhh, \ooo at raw[i] (the letter or first digit); returns the code
// point and advances `i` to the escape's last character.
char32_t numeric_escape(std::string_view raw, std::size_t& i, const fail_fn& fail) {
  char c = raw[i];
  if (c >= '0' && c <= '7') {
    std::uint32_t cp = std::uint32_t(c - '0');
    for (int k = 0; k < 2 && i + 1 < raw.size() && raw[i + 1] >= '0' && raw[i + 1] <= '7'; ++k)
      cp = cp * 8 + std::uint32_t(raw[++i] - '0');
    return char32_t(cp);
  }
  int num_digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
  std::uint32_t cp = 0;
  for (int k = 1; k <= num_digits; ++k) {
    int digit = i + k < raw.size() ? hex_value(raw[i + k]) : -1;
    if (digit < 0) fail(fmt::format("truncated \\{} escape in a string literal", c));
    cp = cp * 16 + std::uint32_t(digit);
  }
  i += std::size_t(num_digits);
  if (cp > 0x10FFFF) fail("illegal Unicode character in a string literal escape");
  return char32_t(cp);
}

// Python's unicode-escape decoding of a string literal's body; unknown escapes stay as written.
std::string decode_escapes(std::string_view raw, const fail_fn& fail) {
  std::string out;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\\' || i + 1 >= raw.size()) {
      out.push_back(raw[i]);
      continue;
    }
    char c = raw[++i];
    if (c == '\n') continue;  // line continuation
    if (int simple = simple_escape(c); simple >= 0) {
      out.push_back(char(simple));
    } else if (c == 'x' || c == 'u' || c == 'U' || (c >= '0' && c <= '7')) {
      append_utf8(out, numeric_escape(raw, i, fail));
    } else if (c == 'N') {
      fail("\\N{...} escapes are not supported in chat templates");
    } else {
      out.push_back('\\');
      out.push_back(c);
    }
  }
  return out;
}

std::size_t lexer::lex_string(std::size_t p) {
  char quote = src_[p];
  std::size_t q = p + 1;
  while (q < src_.size() && src_[q] != quote) q += src_[q] == '\\' ? 2 : 1;
  if (q >= src_.size()) fail(p, "unterminated string literal");
  std::string text = decode_escapes(std::string_view(src_).substr(p + 1, q - p - 1),
                                    [&](const std::string& message) { fail(p, message); });
  emit(token_kind::string, p, std::move(text));
  return q + 1;
}

std::size_t lexer::lex_operator(std::size_t p, std::vector<char>& balance) {
  static constexpr std::string_view two_char[] = {"//", "**", "==", "!=", ">=", "<="};
  for (std::string_view op : two_char) {
    if (src_.compare(p, 2, op) == 0) {
      emit(token_kind::op, p, std::string(op));
      return p + 2;
    }
  }
  char c = src_[p];
  if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos)
    fail(p, fmt::format("unexpected character '{}'", c));
  if (c == '(' || c == '[' || c == '{') {
    balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
  } else if (c == ')' || c == ']' || c == '}') {
    if (balance.empty()) fail(p, fmt::format("unexpected '{}'", c));
    if (balance.back() != c)
      fail(p, fmt::format("unexpected '{}', expected '{}'", c, balance.back()));
    balance.pop_back();
  }
  emit(token_kind::op, p, std::string(1, c));
  return p + 1;
}

}  // namespace

std::vector<token> tokenize(std::string_view source) {
  return lexer(normalize_newlines(source)).run();
}

}  // namespace di::jinja
