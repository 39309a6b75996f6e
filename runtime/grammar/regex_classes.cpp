// Regex escapes and bracket classes: \n \xHH \u{...} \cX style character escapes, the Perl
// classes \d \w \s, Unicode properties \p{..}, POSIX [:name:] classes, nested classes and
// Rust's set operations (&& -- ~~), case folding under (?i). A '[' inside a class is literal
// (ECMAScript, PCRE, Python), not a nested class. The Python flavour (Lark terminals) reads
// `&&`, `--`, `~~` and `[:` as literal characters or ranges, as CPython's re does, and gives
// \w and \s Python's sets.
#include "common/error.hpp"
#include "runtime/grammar/detail/regex_parser.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <iterator>

namespace di::grammar::detail {

namespace {

codepoint_set posix_class(std::string_view name, bool& ok) {
  ok = true;
  codepoint_set s;
  if (name == "alnum")
    s.add('0', '9'), s.add('A', 'Z'), s.add('a', 'z');
  else if (name == "alpha")
    s.add('A', 'Z'), s.add('a', 'z');
  else if (name == "ascii")
    s.add(0, 0x7F);
  else if (name == "blank")
    s.add('\t', '\t'), s.add(' ', ' ');
  else if (name == "cntrl")
    s.add(0, 0x1F), s.add(0x7F, 0x7F);
  else if (name == "digit")
    s.add('0', '9');
  else if (name == "graph")
    s.add('!', '~');
  else if (name == "lower")
    s.add('a', 'z');
  else if (name == "print")
    s.add(' ', '~');
  else if (name == "punct")
    s.add('!', '/'), s.add(':', '@'), s.add('[', '`'), s.add('{', '~');
  else if (name == "space")
    s.add('\t', '\r'), s.add(' ', ' ');
  else if (name == "upper")
    s.add('A', 'Z');
  else if (name == "word")
    s.add('0', '9'), s.add('A', 'Z'), s.add('_', '_'), s.add('a', 'z');
  else if (name == "xdigit")
    s.add('0', '9'), s.add('A', 'F'), s.add('a', 'f');
  else
    ok = false;
  return s;
}

// Python's \d \w \s (CPython's re on str patterns): Unicode by default, ASCII under (?a).
codepoint_set python_class(char c, bool unicode) {
  codepoint_set s;
  if (c == 'd') {
    if (!unicode) return codepoint_set::range('0', '9');
    unicode_property("Nd", s);
  } else if (c == 'w') {
    if (!unicode) return word_class(false);
    for (const char* p : {"L", "N"}) {  // str.isalnum(): letters and all numbers, no marks
      codepoint_set part;
      unicode_property(p, part);
      s.add(part);
    }
    s.add('_', '_');
  } else {
    s.add('\t', '\r');  // str.isspace() adds U+001C..U+001F to White_Space; ASCII: \t-\r, ' '
    s.add(' ', ' ');
    if (unicode) s.add(space_class(true)), s.add(0x1C, 0x1F);
  }
  return s;
}

}  // namespace

char32_t regex_parser::peek_cp() const {
  std::size_t save = pos_;
  auto* self = const_cast<regex_parser*>(this);
  char32_t cp = self->next_cp();
  self->pos_ = save;
  return cp;
}

char32_t regex_parser::next_cp() {
  auto b = [&](std::size_t i) { return std::uint8_t(p_[i]); };
  if (at_end()) fail("unexpected end of pattern");
  std::uint8_t c = b(pos_);
  int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || pos_ + std::size_t(n) > p_.size()) fail("the pattern is not valid UTF-8");
  char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < n; ++k) {
    if ((b(pos_ + std::size_t(k)) & 0xC0) != 0x80) fail("the pattern is not valid UTF-8");
    cp = (cp << 6) | (b(pos_ + std::size_t(k)) & 0x3F);
  }
  pos_ += std::size_t(n);
  return cp;
}

bool regex_parser::eat(char c) {
  if (at_end() || p_[pos_] != c) return false;
  ++pos_;
  return true;
}

void regex_parser::skip_extended() {
  while (!at_end()) {
    char c = p_[pos_];
    if (options_.flavor == regex_flavor::python && p_.substr(pos_, 3) == "(?#") {
      // Python's comment group, up to the first ')': transparent, even before a quantifier.
      const std::size_t close = p_.find(')', pos_);
      if (close == std::string_view::npos) fail("missing ), unterminated comment");
      pos_ = close + 1;
    } else if (!flags_.extended) {
      break;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++pos_;
    } else if (c == '#') {
      while (!at_end() && p_[pos_] != '\n') ++pos_;
    } else {
      break;
    }
  }
}

std::uint32_t regex_parser::parse_hex(std::size_t min_digits, std::size_t max_digits) {
  std::uint32_t v = 0;
  std::size_t n = 0;
  while (n < max_digits && !at_end() && std::isxdigit(static_cast<unsigned char>(p_[pos_]))) {
    char c = p_[pos_++];
    v = v * 16 + std::uint32_t(std::isdigit(static_cast<unsigned char>(c))
                                   ? c - '0'
                                   : (std::tolower(c) - 'a' + 10));
    if (v > 0x10FFFF) fail("code point escape above U+10FFFF");
    ++n;
  }
  if (n < min_digits)
    fail("escape must be followed by " + std::to_string(min_digits) + " hexadecimal digits");
  return v;
}

char32_t regex_parser::parse_escaped_char() {
  char c = p_[pos_++];
  // ECMAScript with the u flag has none of these (without it, \a is a and \x{41} is 41 x's).
  if (options_.flavor == regex_flavor::ecmascript &&
      (c == 'a' || c == 'e' || c == 'U' || (c == 'x' && p_.substr(pos_, 1) == "{")))
    fail(std::string("'\\") + c + (c == 'x' ? "{" : "") +
         "' is not an escape of ECMAScript with the u flag, which reads JSON Schema patterns "
         "(\\x41, \\u0041 or \\u{41} write a code point)");
  switch (c) {
    case 'n':
      return '\n';
    case 't':
      return '\t';
    case 'r':
      return '\r';
    case 'f':
      return '\f';
    case 'v':
      return '\v';
    case 'a':
      return 0x07;
    case 'e':
      return 0x1B;
    case '0': {
      char32_t v = 0;
      for (int k = 0; k < 2 && !at_end() && p_[pos_] >= '0' && p_[pos_] <= '7'; ++k)
        v = v * 8 + char32_t(p_[pos_++] - '0');
      return v;
    }
    case '1':
    case '2':
    case '3':
    case '4':
    case '5':
    case '6':
    case '7': {
      // Python: an octal escape of up to three digits in a class (`[\1]` is U+0001), and of
      // exactly three outside one (`\101` is A; the atom refuses `\1`, `\12` as backreferences).
      if (options_.flavor != regex_flavor::python)
        fail(std::string("unknown escape '\\") + c + "'");
      char32_t v = char32_t(c - '0');
      for (int k = 0; k < 2 && !at_end() && p_[pos_] >= '0' && p_[pos_] <= '7'; ++k)
        v = v * 8 + char32_t(p_[pos_++] - '0');
      if (v > 0377) fail("octal escape value above \\377");
      return v;
    }
    case 'x':
      if (options_.flavor == regex_flavor::python && p_.substr(pos_, 1) == "{")
        fail(
            "incomplete escape \\x: Python's re takes exactly two hex digits (\\x41); \\x{...} "
            "is not its syntax");
      if (eat('{')) {
        char32_t v = parse_hex(1, 8);
        if (!eat('}')) fail("missing '}' after \\x{");
        return v;
      }
      return parse_hex(2, 2);
    case 'u': {
      if (options_.flavor == regex_flavor::python && p_.substr(pos_, 1) == "{")
        fail(
            "incomplete escape \\u: Python's re takes exactly four hex digits (\\u00e9, or "
            "\\U0001f600); \\u{...} is not its syntax");
      if (eat('{')) {
        char32_t v = parse_hex(1, 8);
        if (!eat('}')) fail("missing '}' after \\u{");
        return v;
      }
      char32_t v = parse_hex(4, 4);
      // A UTF-16 surrogate pair written as two escapes (ECMAScript, JSON Schema patterns). Python
      // reads two code points, each a lone surrogate that no UTF-8 text holds.
      if (options_.flavor != regex_flavor::python && v >= 0xD800 && v <= 0xDBFF &&
          p_.substr(pos_, 2) == "\\u") {
        std::size_t save = pos_;
        pos_ += 2;
        char32_t lo = parse_hex(4, 4);
        if (lo >= 0xDC00 && lo <= 0xDFFF) return 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
        pos_ = save;
      }
      return v;
    }
    case 'U':
      return parse_hex(8, 8);
    case 'c': {
      if (at_end() || !std::isalpha(static_cast<unsigned char>(p_[pos_])))
        fail("\\c must be followed by a letter");
      return char32_t(p_[pos_++] & 0x1F);
    }
    case 'N':
      if (options_.flavor == regex_flavor::python)
        fail(
            "\\N{...} (a character by its Unicode name) is not supported: write the character "
            "itself or its \\u escape");
      fail("unknown escape '\\N'");
    default:
      if (static_cast<unsigned char>(c) >= 0x80) {
        --pos_;
        const std::size_t at = pos_;
        const char32_t cp = next_cp();
        // Python's re: an escaped non-ASCII character is itself (\é is é).
        if (options_.flavor == regex_flavor::python) return cp;
        fail("unknown escape '\\" + std::string(p_.substr(at, pos_ - at)) + "'");
      }
      if (std::isalnum(static_cast<unsigned char>(c)))
        fail(std::string("unknown escape '\\") + c + "'");
      return char32_t(static_cast<unsigned char>(c));
  }
}

void regex_parser::check_python_escape(bool in_class) const {
  if (options_.flavor != regex_flavor::python || at_end()) return;
  const char c = p_[pos_];
  if (!std::isalpha(static_cast<unsigned char>(c))) return;  // ASCII letters only
  // CPython 3.11's re on str patterns: \b is a backspace in a class, a word boundary outside;
  // \A \B \Z are assertions (outside a class only); other letters are "bad escape".
  if (std::strchr(in_class ? "abfnrtvxuUNdDsSwW" : "abfnrtvxuUNdDsSwWABZ", c) != nullptr) return;
  std::string hint;
  if (c == 'e') hint = "; ESC is \\x1b";
  if (c == 'z') hint = "; the end of the string is \\Z";
  if (c == 'c') hint = "; a control character is \\xHH";
  if (c == 'p' || c == 'P') hint = ": Python's re has no Unicode property classes";
  if (in_class && std::strchr("ABZ", c) != nullptr) hint = ": no assertions inside a class";
  fail(std::string("bad escape \\") + c + " (not an escape of Python 3.11's re" + hint + ")");
}

codepoint_set regex_parser::parse_property(bool negated) {
  std::string name;
  if (eat('{')) {
    while (!at_end() && p_[pos_] != '}') name.push_back(p_[pos_++]);
    if (!eat('}')) fail("missing '}' after \\p{");
  } else {
    if (at_end()) fail("missing property name after \\p");
    name.push_back(p_[pos_++]);
  }
  if (!name.empty() && name[0] == '^') negated = !negated, name.erase(0, 1);
  std::size_t eq = name.find_first_of("=:");
  if (eq != std::string::npos) {
    std::string key = name.substr(0, eq);
    for (auto& ch : key) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    if (key != "gc" && key != "generalcategory" && key != "general_category")
      fail("Unicode property '" + name + "' is not supported (general categories only)");
    name = name.substr(eq + 1);
  }
  codepoint_set s;
  if (!unicode_property(name, s))
    fail("Unicode property '" + name + "' is not supported (general categories only)");
  return negated ? s.complement() : s;
}

bool regex_parser::parse_class_escape(codepoint_set& out) {
  char c = p_[pos_];
  bool unicode = options_.unicode_classes && flags_.unicode;
  if (options_.flavor == regex_flavor::python && std::strchr("dDwWsS", c) != nullptr) {
    const bool upper = c >= 'A' && c <= 'Z';
    out = python_class(char(upper ? c - 'A' + 'a' : c), unicode);
    if (upper) out = out.complement();
    ++pos_;
    return true;
  }
  switch (c) {
    case 'd':
      out = digit_class(unicode);
      break;
    case 'D':
      out = digit_class(unicode).complement();
      break;
    case 'w':
      out = word_class(unicode);
      break;
    case 'W':
      out = word_class(unicode).complement();
      break;
    case 's':
      out = space_class(unicode);
      break;
    case 'S':
      out = space_class(unicode).complement();
      break;
    case 'p':
    case 'P':
      ++pos_;
      out = parse_property(c == 'P');
      return true;
    default:
      return false;
  }
  ++pos_;
  return true;
}

expr_id regex_parser::parse_escape_atom() {
  ++pos_;  // '\'
  if (at_end()) fail("trailing backslash");
  check_python_escape(false);
  char c = p_[pos_];
  codepoint_set set;
  if (parse_class_escape(set)) return class_expr(set);
  if (c == 'b' || c == 'B') fail("word boundary assertions (\\b, \\B) are not supported");
  auto octal = [&](std::size_t i) { return i < p_.size() && p_[i] >= '0' && p_[i] <= '7'; };
  if (options_.flavor == regex_flavor::python && c != '0' && octal(pos_) && octal(pos_ + 1) &&
      octal(pos_ + 2))
    return char_expr(parse_escaped_char());  // Python's three-digit octal escape: \101 is A
  if ((c >= '1' && c <= '9') || c == 'k' || c == 'g') fail("backreferences are not supported");
  return char_expr(parse_escaped_char());
}

codepoint_set regex_parser::parse_class() {
  ++pos_;  // '['
  bool negated = eat('^');
  // ECMAScript: `[]` matches nothing and `[^]` any character; a ']' there is no member.
  if (options_.flavor == regex_flavor::ecmascript && eat(']'))
    return negated ? codepoint_set::all() : codepoint_set{};
  if (!at_end() && p_[pos_] == ']' && p_.find(']', pos_ + 1) == std::string_view::npos)
    fail("empty character class");
  codepoint_set set = parse_class_items(0);
  if (!eat(']')) fail("unterminated character class");
  if (flags_.case_insensitive) set = fold_case(set);
  return negated ? set.complement() : set;
}

bool regex_parser::at_class_operator(bool first) const {
  if (!options_.unicode_classes || options_.flavor == regex_flavor::python) return false;
  const std::string_view op = p_.substr(pos_, 2);
  if (op == "&&") return true;
  // `--` and `~~` need a left side and a right one: `[--0]` and `[+--]` keep their ranges.
  return !first && (op == "--" || op == "~~") && pos_ + 2 < p_.size() && p_[pos_ + 2] != ']';
}

codepoint_set regex_parser::parse_class_items(std::size_t depth, bool nested, bool operand) {
  if (depth > options_.max_nesting) fail("character classes nested too deeply");
  codepoint_set acc;
  for (bool first = true;; first = false) {
    if (at_end()) fail("unterminated character class");
    if (p_[pos_] == ']' && !first) return acc;
    if (operand && !first && at_class_operator(false)) return acc;
    // POSIX classes in Rust's reading; CPython's re and ECMAScript (JSON Schema `pattern`,
    // unicode_classes off) read `[:` as two class members.
    if (options_.flavor != regex_flavor::python && options_.unicode_classes &&
        p_.substr(pos_, 2) == "[:") {
      std::size_t close = p_.find(":]", pos_ + 2);
      if (close != std::string_view::npos) {
        std::string_view name = p_.substr(pos_ + 2, close - pos_ - 2);
        bool neg = !name.empty() && name[0] == '^';
        bool ok;
        codepoint_set s = posix_class(neg ? name.substr(1) : name, ok);
        if (!ok) fail("unknown POSIX class [:" + std::string(name) + ":]");
        acc.add(neg ? s.complement() : s);
        pos_ = close + 2;
        continue;
      }
    }
    // Rust syntax (unicode_classes): `&&` intersects, `--` subtracts and `~~` keeps what is in
    // one side only, all at one precedence, left to right; the right operand may hold nested
    // classes (`[\w&&[^_]]`, `[a-z--[aeiou]]`). Elsewhere `[` inside a class is a literal, as
    // Python's re and the xgrammar cases read it; ECMAScript (JSON Schema `pattern`, without the
    // v flag) reads `&&` as literal characters too and `--` as a range.
    if (at_class_operator(first)) {
      const char op = p_[pos_];
      pos_ += 2;
      const codepoint_set rhs = parse_class_items(depth + 1, true, true);
      if (op == '&') {
        acc = acc.intersect(rhs);
      } else if (op == '-') {
        acc = acc.minus(rhs);
      } else {  // '~': what one side has and the other has not
        codepoint_set one_side = acc.minus(rhs);
        one_side.add(rhs.minus(acc));
        acc = one_side;
      }
      continue;
    }
    if (nested && p_[pos_] == '[') {
      ++pos_;
      const bool negated = eat('^');
      codepoint_set inner = parse_class_items(depth + 1, true);
      if (!eat(']')) fail("unterminated character class");
      acc.add(negated ? inner.complement() : inner);
      continue;
    }
    codepoint_set escaped;
    char32_t lo;
    if (p_[pos_] == '\\') {
      ++pos_;
      if (at_end()) fail("trailing backslash");
      check_python_escape(true);
      if (parse_class_escape(escaped)) {
        acc.add(escaped);
        continue;
      }
      lo = p_[pos_] == 'b' ? (++pos_, char32_t(8)) : parse_escaped_char();
    } else {
      lo = next_cp();
    }
    char32_t hi = lo;
    if (pos_ + 1 < p_.size() && p_[pos_] == '-' && p_[pos_ + 1] != ']' &&
        !at_class_operator(false)) {
      ++pos_;
      if (p_[pos_] == '\\') {
        ++pos_;
        if (at_end()) fail("trailing backslash");
        check_python_escape(true);
        codepoint_set dummy;
        std::size_t save = pos_;
        if (parse_class_escape(dummy)) pos_ = save, fail("a class like \\d cannot end a range");
        hi = p_[pos_] == 'b' ? (++pos_, char32_t(8)) : parse_escaped_char();
      } else {
        hi = next_cp();
      }
      if (hi < lo) fail("invalid character range (end before start)");
    }
    acc.add(lo, hi);
  }
}

expr_id regex_parser::class_expr(codepoint_set set) const {
  const codepoint_set surrogates = codepoint_set::range(0xD800, 0xDFFF);
  if (!set.empty() && set.minus(surrogates).empty()) surrogates_only_ = true;
  // Characters in their target form (e.g. escaped inside a JSON string), or their UTF-8 bytes.
  const expr_id e = options_.char_mapper ? options_.char_mapper(g_, set) : g_.codepoints(set);
  note_char(e, set);
  return e;
}

expr_id regex_parser::char_expr(char32_t cp) const {
  codepoint_set s = codepoint_set::single(cp);
  if (flags_.case_insensitive) s = fold_case(s);
  return class_expr(s);
}

codepoint_set regex_parser::fold_case(const codepoint_set& set) const {
  if (options_.flavor != regex_flavor::python) return set.case_folded();
  if (flags_.unicode) {
    // CPython's re also treats each of these groups as one letter under (?i) (by lower(): U+0130
    // lowers to i, and its table of extra cases: i and U+0131); found comparing every code point
    // with re 3.11. Groups of two repeat their last member.
    static constexpr char32_t k_extra[][4] = {
        {'I', 'i', 0x130, 0x131}, {0x390, 0x1FD3, 0x1FD3, 0x1FD3}, {0x3B0, 0x1FE3, 0x1FE3, 0x1FE3}};
    codepoint_set out = set.case_folded();
    for (const auto& group : k_extra) {
      if (std::none_of(std::begin(group), std::end(group),
                       [&](char32_t c) { return out.contains(c); }))
        continue;
      for (char32_t c : group) out.add(c, c);
    }
    return out;
  }
  // Python's (?a)(?i): ASCII letters only, so KELVIN SIGN does not match k.
  codepoint_set out = set;
  for (char32_t c = 'A'; c <= 'Z'; ++c) {
    if (set.contains(c) || set.contains(c + 32)) out.add(c, c), out.add(c + 32, c + 32);
  }
  return out;
}

}  // namespace di::grammar::detail
