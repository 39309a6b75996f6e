// Lark expansions: alternatives (continued on lines starting with '|'), sequences, aliases,
// postfix repetition (? * + ~n ~n..m {n,m}), groups, optional [..], "strings"i, "a".."z"
// ranges, /regex/flags and name references. Unsupported Lark/xgrammar extensions fail clearly.
#include "common/error.hpp"
#include "common/utf8.hpp"
#include "runtime/grammar/detail/lark_parser.hpp"
#include "runtime/grammar/regex.hpp"

#include <cctype>

namespace di::grammar::detail {

namespace {

/// Decodes one UTF-8 code point from `s` at `i` (advancing it); U+FFFD on malformed input.
char32_t decode_one(std::string_view s, std::size_t& i) {
  auto c = std::uint8_t(s[i]);
  int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + std::size_t(n) > s.size()) return ++i, 0xFFFD;
  char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (std::uint8_t(s[i + std::size_t(k)]) & 0x3F);
  i += std::size_t(n);
  return cp;
}

}  // namespace

expr_id lark_parser::token(expr_id e) {
  return ctx_.terminal ? e : g_.sequence({g_.ref(ignore_rule_), e});
}

expr_id lark_parser::parse_expansions(bool nested, std::size_t depth) {
  std::vector<expr_id> alts{parse_sequence(nested, depth)};
  for (;;) {
    if (nested)
      skip_all();
    else
      skip_inline();
    if (peek() != '|' && (nested || !continues_with_bar())) break;
    ++pos_;
    alts.push_back(parse_sequence(nested, depth));
  }
  return g_.choice(std::move(alts));
}

expr_id lark_parser::parse_sequence(bool nested, std::size_t depth) {
  std::vector<expr_id> items;
  for (;;) {
    if (nested)
      skip_all();
    else
      skip_inline();
    char c = peek();
    if (at_end() || c == '|' || c == ')' || c == ']' || c == '\n') break;
    if (s_.substr(pos_, 2) == "->") {
      pos_ += 2;
      skip_inline();
      if (!std::isalpha(static_cast<unsigned char>(peek())) && peek() != '_')
        fail("expected alias name after '->'");
      parse_identifier();
      continue;
    }
    items.push_back(parse_postfix(parse_atom(nested, depth)));
  }
  return g_.sequence(std::move(items));
}

std::uint32_t lark_parser::parse_number() {
  std::size_t start = pos_;
  std::uint64_t v = 0;
  while (std::isdigit(static_cast<unsigned char>(peek()))) {
    v = v * 10 + std::uint64_t(s_[pos_++] - '0');
    if (v > 1'000'000) fail("invalid repetition count (the limit is 1000000)");
  }
  if (pos_ == start) fail("invalid repetition count");
  return std::uint32_t(v);
}

expr_id lark_parser::parse_postfix(expr_id item) {
  for (;;) {
    skip_inline();
    char c = peek();
    if (c == '?' || c == '*' || c == '+') {
      ++pos_;
      item = g_.repeat(item, c == '+' ? 1 : 0, c == '?' ? 1 : k_unbounded);
    } else if (c == '~') {
      ++pos_;
      skip_inline();
      std::uint32_t lo = parse_number(), hi = lo;
      if (s_.substr(pos_, 2) == "..") pos_ += 2, hi = parse_number();
      if (hi < lo) fail("repetition end must be greater than or equal to its start");
      item = g_.repeat(item, lo, hi);
    } else if (c == '{') {
      ++pos_;
      skip_inline();
      if (!std::isdigit(static_cast<unsigned char>(peek())) && peek() != ',') {
        if (peek() == '-') fail("invalid repetition count");
        fail("Lark templates are not supported");
      }
      std::uint32_t lo = peek() == ',' ? 0 : parse_number(), hi = lo;
      skip_inline();
      if (peek() == ',') {
        ++pos_;
        skip_inline();
        hi = std::isdigit(static_cast<unsigned char>(peek())) ? parse_number() : k_unbounded;
      }
      skip_inline();
      if (peek() != '}') fail("expected '}' after repetition count");
      ++pos_;
      if (hi < lo) fail("repetition end must be greater than or equal to its start");
      item = g_.repeat(item, lo, hi);
    } else {
      return item;
    }
  }
}

expr_id lark_parser::parse_atom(bool nested, std::size_t depth) {
  if (depth > options_.max_nesting) fail("groups nested too deeply");
  char c = peek();
  switch (c) {
    case '(': {
      ++pos_;
      expr_id inner = parse_expansions(true, depth + 1);
      skip_all();
      if (peek() != ')') fail("expected ')' after group");
      ++pos_;
      return inner;
    }
    case '[': {
      ++pos_;
      expr_id inner = parse_expansions(true, depth + 1);
      skip_all();
      if (peek() != ']') fail("expected ']' after optional group");
      ++pos_;
      return g_.optional(inner);
    }
    case '"':
      return parse_string_atom();
    case '/':
      return parse_regex_atom();
    case '<':
      if (s_.find('>', pos_) == std::string_view::npos) fail("unterminated special token");
      fail("special tokens (<...>) are not supported: grammars here constrain text");
    case '%':
      fail("inline %" + std::string(s_.substr(pos_ + 1, 4)) + " values are not supported");
    case '@':
      fail("grammar references (@name) are not supported");
    case '~':
      fail("complement '~' is not supported");
    case '&':
      fail("intersection '&' is not supported");
    default:
      break;
  }
  if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') return parse_name_ref();
  fail(std::string("unexpected character '") + c + "'");
}

expr_id lark_parser::parse_name_ref() {
  std::size_t at = pos_;
  std::string name = parse_identifier();
  skip_inline();
  if (peek() == '{' && !std::isdigit(static_cast<unsigned char>(s_[pos_ + 1])) &&
      s_[pos_ + 1] != ',')
    fail("Lark templates are not supported");
  if (s_.substr(pos_, 2) == "::") fail("parametric grammar is not supported");
  first_use_.emplace(name, at);
  bool terminal = !name.empty() && [&] {
    for (char ch : name)
      if (ch != '_') return std::isupper(static_cast<unsigned char>(ch)) != 0;
    return false;
  }();
  if (!terminal && ctx_.terminal)
    pos_ = at, fail("terminal '" + ctx_.name + "' cannot reference rule '" + name + "'");
  expr_id e = g_.ref(g_.declare_rule(name));
  if (!terminal) return e;
  if (ctx_.terminal) terminal_refs_[ctx_.name].insert(name);
  return token(e);
}

std::string lark_parser::parse_string_body() {
  ++pos_;  // '"'
  std::string out;
  for (;;) {
    if (at_end() || peek() == '\n') fail("unterminated string literal");
    char c = s_[pos_++];
    if (c == '"') return out;
    if (c != '\\') {
      out.push_back(c);
      continue;
    }
    if (at_end()) fail("unterminated string literal");
    char e = s_[pos_++];
    auto hex = [&](int n) {
      char32_t v = 0;
      for (int k = 0; k < n; ++k) {
        if (!std::isxdigit(static_cast<unsigned char>(peek())))
          fail("invalid string literal: \\x/\\u needs hexadecimal digits");
        char h = s_[pos_++];
        v = v * 16 + char32_t(std::isdigit(static_cast<unsigned char>(h))
                                  ? h - '0'
                                  : std::tolower(h) - 'a' + 10);
      }
      return v;
    };
    switch (e) {
      case 'n':
        out.push_back('\n');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case '0':
        out.push_back('\0');
        break;
      case '\\':
      case '"':
      case '\'':
        out.push_back(e);
        break;
      case 'x':
        append_utf8(out, hex(2));
        break;
      case 'u':
        append_utf8(out, hex(4));
        break;
      case 'U':
        append_utf8(out, hex(8));
        break;
      default:
        pos_ -= 2, fail(std::string("invalid string literal: unknown escape '\\") + e + "'");
    }
  }
}

expr_id lark_parser::parse_string_atom() {
  std::string lo = parse_string_body();
  bool ci = peek() == 'i' &&
            !std::isalnum(static_cast<unsigned char>(pos_ + 1 < s_.size() ? s_[pos_ + 1] : ' '));
  if (ci) ++pos_;
  if (s_.substr(pos_, 2) == "..") {
    if (ci) fail("flags are not allowed on character ranges");
    pos_ += 2;
    if (peek() != '"') fail("expected a string after '..'");
    std::string hi = parse_string_body();
    if (peek() == 'i') fail("flags are not allowed on character ranges");
    std::size_t i = 0, j = 0;
    char32_t a = lo.empty() ? 0 : decode_one(lo, i), b = hi.empty() ? 0 : decode_one(hi, j);
    if (lo.empty() || hi.empty() || i != lo.size() || j != hi.size())
      fail("range endpoints must be one character");
    if (a > b) fail("range start must not exceed end");
    return token(g_.codepoints(codepoint_set::range(a, b)));
  }
  if (!ci) return token(g_.literal(lo));
  std::vector<expr_id> chars;
  for (char c : lo) {
    if (static_cast<unsigned char>(c) >= 0x80)
      fail("case-insensitive string literals currently support ASCII characters only");
    codepoint_set s = codepoint_set::single(char32_t(c));
    s.add(char32_t(std::toupper(c)), char32_t(std::toupper(c)));
    s.add(char32_t(std::tolower(c)), char32_t(std::tolower(c)));
    chars.push_back(g_.codepoints(s));
  }
  return token(g_.sequence(std::move(chars)));
}

expr_id lark_parser::parse_regex_atom() {
  std::size_t start = ++pos_;
  while (!at_end() && peek() != '/' && peek() != '\n') pos_ += peek() == '\\' ? 2 : 1;
  if (at_end() || peek() != '/') fail("unterminated regular expression");
  std::string pattern(s_.substr(start, pos_ - start));
  ++pos_;
  regex_options ro;
  ro.flavor = regex_flavor::python;  // Lark terminals are Python regexes (`re`)
  // Lark applies /.../flags by wrapping, /x/i as (?i:x), so a global flag inside (/(?i)a/i, now
  // (?i:(?i)a)) is no longer at the start and CPython 3.11 refuses it; so do we.
  std::string wrapped;
  while (std::isalpha(static_cast<unsigned char>(peek()))) {
    char f = s_[pos_++];
    if (f != 'i' && f != 's' && f != 'u')
      pos_--, fail(std::string("regular-expression flag '") + f + "' is not supported");
    if (wrapped.find(f) == std::string::npos) wrapped.push_back(f);  // Lark keeps a set
  }
  for (char f : wrapped) pattern = std::string("(?") + f + ":" + pattern + ")";
  try {
    return token(compile_regex(g_, pattern, ro));
  } catch (const error& e) {
    fail(std::string("failed to compile regular expression: ") + e.what());
  }
}

}  // namespace di::grammar::detail
