// GBNF / xgrammar EBNF -> grammar IR. A rule runs until the next `name ::=` (so both the
// newline-sensitive GBNF layout and free-form layouts parse); errors carry line and column.
#include "common/error.hpp"
#include "common/utf8.hpp"
#include "runtime/grammar/ebnf.hpp"

#include <cctype>

namespace di::grammar {

namespace {

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
}

class ebnf_parser {
 public:
  ebnf_parser(std::string_view text, const ebnf_options& options) : s_(text), options_(options) {}

  grammar parse() {
    for (skip_ws(); !at_end(); skip_ws()) {
      std::size_t name_pos = pos_;
      std::string name = parse_name();
      skip_ws();
      if (s_.substr(pos_, 3) != "::=") fail("expected '::=' after rule name '" + name + "'");
      pos_ += 3;
      rule_id r = g_.declare_rule(name);
      if (g_.rule_at(r).body)
        pos_ = name_pos, fail("rule '" + name + "' is defined more than once");
      lookahead_seen_ = false;
      g_.define_rule(r, parse_alternatives(0));
    }
    for (rule_id r = 0; r < g_.num_rules(); ++r)
      DI_CHECK(g_.rule_at(r).body, "EBNF: rule '{}' is used but never defined", g_.rule_at(r).name);
    auto root = g_.find_rule(options_.root_rule);
    DI_CHECK(root.has_value(), "EBNF: the grammar has no rule named '{}' (the start rule)",
             options_.root_rule);
    g_.set_root(*root);
    return std::move(g_);
  }

 private:
  bool at_end() const { return pos_ >= s_.size(); }

  [[noreturn]] void fail(const std::string& what) const {
    std::size_t line = 1, col = 1;
    for (std::size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n')
        ++line, col = 1;
      else
        ++col;
    }
    DI_FAIL("EBNF: line {}, column {}: {}", line, col, what);
  }

  void skip_ws() {
    while (!at_end()) {
      char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && s_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    std::size_t start = pos_;
    while (!at_end() && is_name_char(s_[pos_])) ++pos_;
    if (pos_ == start) fail(std::string("expected a rule name, found '") + s_[pos_] + "'");
    return std::string(s_.substr(start, pos_ - start));
  }

  /// An identifier followed by ::= begins the next rule.
  bool at_rule_start() const {
    std::size_t p = pos_;
    while (p < s_.size() && is_name_char(s_[p])) ++p;
    if (p == pos_) return false;
    while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t' || s_[p] == '\n' || s_[p] == '\r')) ++p;
    return s_.substr(p, 3) == "::=";
  }

  expr_id parse_alternatives(std::size_t depth) {
    if (depth > options_.max_nesting) fail("parentheses nested too deeply");
    std::vector<expr_id> alts{parse_sequence(depth)};
    for (skip_ws(); !at_end() && s_[pos_] == '|'; skip_ws()) {
      ++pos_;
      skip_ws();
      if (at_end() || (depth == 0 && at_rule_start())) fail("expected an element after '|'");
      alts.push_back(parse_sequence(depth));
    }
    return g_.choice(std::move(alts));
  }

  expr_id parse_sequence(std::size_t depth) {
    std::vector<expr_id> items;
    for (skip_ws(); !at_end(); skip_ws()) {
      char c = s_[pos_];
      if (c == '|' || c == ')' || at_rule_start()) break;
      if (lookahead_seen_) fail("a lookahead assertion (= ...) must be the last element of a rule");
      items.push_back(parse_postfix(parse_primary(depth)));
    }
    return g_.sequence(std::move(items));
  }

  expr_id parse_postfix(expr_id item) {
    for (;;) {
      std::size_t save = pos_;
      skip_ws();
      if (at_end()) return item;
      char c = s_[pos_];
      if (c == '*')
        ++pos_, item = g_.repeat(item, 0, k_unbounded);
      else if (c == '+')
        ++pos_, item = g_.repeat(item, 1, k_unbounded);
      else if (c == '?')
        ++pos_, item = g_.repeat(item, 0, 1);
      else if (c == '{')
        item = parse_braces(item);
      else
        return pos_ = save, item;
    }
  }

  std::uint32_t parse_count() {
    skip_ws();
    std::size_t start = pos_;
    std::uint64_t v = 0;
    while (!at_end() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      v = v * 10 + std::uint64_t(s_[pos_++] - '0');
      if (v > 1'000'000) fail("repetition count too large (the limit is 1000000)");
    }
    if (pos_ == start) return UINT32_MAX;
    skip_ws();
    return std::uint32_t(v);
  }

  expr_id parse_braces(expr_id item) {
    ++pos_;  // '{'
    std::uint32_t lo = parse_count();
    std::uint32_t hi = lo;
    if (!at_end() && s_[pos_] == ',') {
      ++pos_;
      hi = parse_count();
      if (lo == UINT32_MAX) lo = 0;
      if (hi == UINT32_MAX) hi = k_unbounded;
    }
    if (lo == UINT32_MAX) fail("expected a repetition count after '{'");
    if (at_end() || s_[pos_] != '}') fail("expected '}' after repetition count");
    ++pos_;
    if (hi != k_unbounded && lo > hi) fail("repetition {m,n} with m > n");
    return g_.repeat(item, lo, hi);
  }

  expr_id parse_primary(std::size_t depth);
  expr_id parse_string();
  expr_id parse_class();
  char32_t parse_char(bool in_class);
  std::uint32_t parse_hex_digits(std::size_t n);
  char32_t next_cp();

  grammar g_;
  std::string_view s_;
  std::size_t pos_ = 0;
  ebnf_options options_;
  bool lookahead_seen_ = false;  // the rule's lookahead assertion was parsed (it must end it)
};

char32_t ebnf_parser::next_cp() {
  auto b = [&](std::size_t i) { return std::uint8_t(s_[i]); };
  std::uint8_t c = b(pos_);
  int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || pos_ + std::size_t(n) > s_.size()) fail("the grammar is not valid UTF-8");
  char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < n; ++k) {
    if ((b(pos_ + std::size_t(k)) & 0xC0) != 0x80) fail("the grammar is not valid UTF-8");
    cp = (cp << 6) | (b(pos_ + std::size_t(k)) & 0x3F);
  }
  pos_ += std::size_t(n);
  return cp;
}

std::uint32_t ebnf_parser::parse_hex_digits(std::size_t n) {
  std::uint32_t v = 0;
  for (std::size_t k = 0; k < n; ++k) {
    if (at_end() || !std::isxdigit(static_cast<unsigned char>(s_[pos_])))
      fail("expected " + std::to_string(n) + " hexadecimal digits in escape");
    char c = s_[pos_++];
    v = v * 16 + std::uint32_t(std::isdigit(static_cast<unsigned char>(c))
                                   ? c - '0'
                                   : std::tolower(c) - 'a' + 10);
  }
  if (v > 0x10FFFF) fail("escape above U+10FFFF");
  return v;
}

char32_t ebnf_parser::parse_char(bool in_class) {
  if (s_[pos_] != '\\') return next_cp();
  ++pos_;
  if (at_end()) fail("unterminated escape");
  char c = s_[pos_++];
  switch (c) {
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    case 'f':
      return '\f';
    case 'v':
      return '\v';
    case 'a':
      return 0x07;
    case 'b':
      return 0x08;
    case 'e':
      return 0x1B;
    case '0':
      return 0;
    case 'x':
      return parse_hex_digits(2);
    case 'u':
      return parse_hex_digits(4);
    case 'U':
      return parse_hex_digits(8);
    case '\\':
    case '"':
    case '\'':
    case '[':
    case ']':
    case '-':
    case '^':
    case '/':
    case '.':
    case '(':
    case ')':
    case '|':
    case '*':
    case '+':
    case '?':
    case '{':
    case '}':
    case '$':
      return char32_t(c);
    default:
      pos_ -= 2;
      fail(std::string("unknown escape '\\") + c +
           (in_class ? "' in character class" : "' in string"));
  }
}

expr_id ebnf_parser::parse_string() {
  char quote = s_[pos_++];
  std::string bytes;
  for (;;) {
    if (at_end()) fail(std::string("unterminated string literal (expected ") + quote + ")");
    if (s_[pos_] == quote) break;
    char32_t cp = parse_char(false);
    if (cp >= 0xD800 && cp <= 0xDFFF) fail("surrogate code point in string");
    append_utf8(bytes, cp);
  }
  ++pos_;
  return g_.literal(bytes);
}

expr_id ebnf_parser::parse_class() {
  ++pos_;  // '['
  bool negated = !at_end() && s_[pos_] == '^';
  if (negated) ++pos_;
  codepoint_set set;
  for (;;) {
    if (at_end()) fail("unterminated character class (expected ])");
    if (s_[pos_] == ']') break;
    if (s_[pos_] == '\n') fail("a character class must not contain a raw newline (write \\n)");
    if (s_[pos_] == '\\' && pos_ + 1 < s_.size() &&
        std::string_view("dwsDWS").find(s_[pos_ + 1]) != std::string_view::npos) {
      char k = s_[pos_ + 1];
      pos_ += 2;
      codepoint_set cls = k == 'd' || k == 'D'   ? digit_class(false)
                          : k == 'w' || k == 'W' ? word_class(false)
                                                 : space_class(false);
      set.add(std::isupper(static_cast<unsigned char>(k)) ? cls.complement() : cls);
      continue;
    }
    char32_t lo = parse_char(true);
    char32_t hi = lo;
    if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
      ++pos_;
      hi = parse_char(true);
      if (hi < lo) fail("character range with its end before its start");
    }
    set.add(lo, hi);
  }
  ++pos_;
  return g_.codepoints(negated ? set.complement() : set);
}

expr_id ebnf_parser::parse_primary(std::size_t depth) {
  char c = s_[pos_];
  if (c == '"' || c == '\'') return parse_string();
  if (c == '[') return parse_class();
  if (c == '.') return ++pos_, g_.codepoints(codepoint_set::all());
  if (c == '(') {
    ++pos_;
    skip_ws();
    bool lookahead = !at_end() && s_[pos_] == '=';
    if (lookahead) ++pos_;
    expr_id inner = parse_alternatives(depth + 1);
    skip_ws();
    if (at_end() || s_[pos_] != ')') fail("expected ')'");
    ++pos_;
    lookahead_seen_ = lookahead;
    return lookahead ? g_.empty() : inner;
  }
  if (is_name_char(c)) return g_.ref(g_.declare_rule(parse_name()));
  fail(std::string("unexpected character '") + c + "'");
}

}  // namespace

grammar parse_ebnf(std::string_view text, const ebnf_options& options) {
  return ebnf_parser(text, options).parse();
}

grammar parse_grammar_text(std::string_view text, const ebnf_options& options) {
  if (text.find("::=") != std::string_view::npos) return parse_ebnf(text, options);
  return parse_lark(text, options);
}

}  // namespace di::grammar
