// Regex structure: alternation, concatenation, groups and inline flags, quantifiers, and the
// anchor rules (an anchor may only sit at the start or end of the pattern or of a top-level
// alternative; search mode pads unanchored ends with "any character").
#include "runtime/grammar/detail/regex_parser.hpp"

#include "common/error.hpp"
#include "runtime/grammar/regular_language.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace di::grammar {

namespace detail {

namespace {
constexpr std::uint32_t k_max_repeat = 100000;
}

regex_parser::regex_parser(grammar& g, std::string_view pattern, const regex_options& options)
    : g_(g), p_(pattern), options_(options) {
  flags_.case_insensitive = options.case_insensitive;
  flags_.dot_all = options.dot_all;
}

void regex_parser::fail(const std::string& what) const {
  DI_FAIL("regex /{}/: {} (at offset {})", p_, what, pos_);
}

expr_id regex_parser::any_char() const {
  codepoint_set s = codepoint_set::all();
  if (!flags_.dot_all) {
    s = s.minus(codepoint_set::single('\n'));
    if (options_.ecma_dot) {
      s = s.minus(codepoint_set::single('\r'));
      s = s.minus(codepoint_set::range(0x2028, 0x2029));
    }
  }
  return class_expr(s);
}

expr_id regex_parser::parse() {
  piece p = parse_alternation(0);
  if (!at_end()) fail("unmatched ')'");
  if (surrogates_only_ && options_.flavor == regex_flavor::python && matches_nothing(p.e))
    fail(
        "the pattern matches only text holding a lone surrogate (U+D800..U+DFFF, e.g. \\ud800), "
        "which cannot be encoded in UTF-8, so it matches no UTF-8 text and nothing could be "
        "generated (a character beyond U+FFFF is one escape, \\U0001F600, not a surrogate pair)");
  if (!options_.search) return p.e;
  expr_id pad = g_.repeat(class_expr(codepoint_set::all()), 0, k_unbounded);
  std::vector<expr_id> items;
  if (!p.start) items.push_back(pad);
  items.push_back(p.e);
  if (!p.end) items.push_back(pad);
  return g_.sequence(std::move(items));
}

regex_parser::piece regex_parser::parse_alternation(std::size_t depth) {
  std::vector<piece> alts{parse_concat(depth)};
  while (eat('|')) {
    at_pattern_start_ = false;
    alts.push_back(parse_concat(depth));
  }
  if (alts.size() == 1) return alts[0];
  auto count = [&](bool piece::*flag) {
    return std::count_if(alts.begin(), alts.end(), [&](const piece& a) { return a.*flag; });
  };
  std::size_t starts = count(&piece::start), ends = count(&piece::end);
  piece out{0, starts > 0, ends > 0, false};
  expr_id pad = g_.repeat(class_expr(codepoint_set::all()), 0, k_unbounded);
  std::vector<expr_id> es, open;
  for (piece& a : alts) {
    // Search mode: an unanchored alternative beside anchored ones may match anywhere.
    if (options_.search && starts > 0 && !a.start) {
      a.e = g_.sequence({pad, a.e});
      if (a.open) a.open = g_.sequence({pad, *a.open});
    }
    if (a.end ? a.open.has_value() : true) {
      open.push_back(a.end ? *a.open : a.e);
      out.open_start = out.open_start || (a.end ? a.open_start : a.start);
    }
    if (options_.search && ends > 0 && !a.end) a.e = g_.sequence({a.e, pad});
    es.push_back(a.e);
  }
  out.e = g_.choice(std::move(es));
  if (!open.empty()) out.open = g_.choice(std::move(open));
  return out;
}

bool regex_parser::matches_empty(expr_id id) const {
  const expr& x = g_.at(id);
  switch (x.kind) {
    case expr_kind::empty:
      return true;
    case expr_kind::sequence:
      return std::all_of(x.children.begin(), x.children.end(),
                         [&](expr_id c) { return matches_empty(c); });
    case expr_kind::choice:
      return std::any_of(x.children.begin(), x.children.end(),
                         [&](expr_id c) { return matches_empty(c); });
    case expr_kind::repeat:
      return x.min == 0 || matches_empty(x.children[0]);
    case expr_kind::bytes:
    case expr_kind::rule_ref:
      return false;  // a rule (none in regexes) counts as non-empty: the caller then refuses
  }
  return false;
}

bool regex_parser::matches_nothing(expr_id id) const {
  const expr& x = g_.at(id);
  switch (x.kind) {
    case expr_kind::bytes:
      return x.bytes.empty();
    case expr_kind::sequence:
      return std::any_of(x.children.begin(), x.children.end(),
                         [&](expr_id c) { return matches_nothing(c); });
    case expr_kind::choice:
      return std::all_of(x.children.begin(), x.children.end(),
                         [&](expr_id c) { return matches_nothing(c); });
    case expr_kind::repeat:
      return x.min > 0 && matches_nothing(x.children[0]);
    case expr_kind::empty:
    case expr_kind::rule_ref:
      return false;
  }
  return false;
}

regex_parser::piece regex_parser::parse_concat(std::size_t depth) {
  std::vector<piece> items;
  std::vector<std::size_t> offsets;  // where each item starts, then where the last one ends
  for (;;) {
    skip_extended();
    if (at_end() || p_[pos_] == '|' || p_[pos_] == ')') break;
    const std::size_t offset = pos_;
    std::optional<piece> a = parse_atom(depth);
    if (!a) continue;
    at_pattern_start_ = false;
    items.push_back(apply_quantifier(*a));
    offsets.push_back(offset);
  }
  offsets.push_back(pos_);
  piece out{g_.empty(), false, false, !items.empty()};
  std::vector<expr_id> es;
  for (std::size_t k = 0; k < items.size(); ++k) {
    const piece& it = items[k];
    bool before_all_anchors = std::all_of(items.begin(), items.begin() + std::ptrdiff_t(k),
                                          [](const piece& q) { return q.anchor_only; });
    bool after_all_anchors = std::all_of(items.begin() + std::ptrdiff_t(k) + 1, items.end(),
                                         [](const piece& q) { return q.anchor_only; });
    // `$` asserts the end of the input, so what follows it can match only the empty string
    // there: `^$[a-z]*$` is `^$`. Search mode only, items after it that can match empty are
    // dropped: that is exact for the paths of `it` that end the input, and for its others,
    // which an alternation pads with `.*`, where the rest can match empty without ending the
    // input too (`(a$|b)c*`; not `(a$|b)(c*$|d)`, where b must be followed by c* at the end).
    // In full-match mode `(a$|b)c*` would lose `bc`.
    const auto rest_empty = [&](bool open) {
      return options_.search &&
             std::all_of(items.begin() + std::ptrdiff_t(k) + 1, items.end(), [&](const piece& q) {
               if (q.start) return false;
               if (open && q.end) return q.open && matches_empty(*q.open);
               return matches_empty(q.e);
             });
    };
    const bool rest_matches_empty = rest_empty(false);
    const bool drop_rest = rest_matches_empty && (!it.open || rest_empty(true));
    // Search mode: where the rest cannot match empty, the paths of `it` through '$' match
    // nothing and its others remain: `(a$|c)b` is `cb`.
    if (it.end && !after_all_anchors && !rest_matches_empty && options_.search && it.open)
      items[k] = piece{*it.open, it.open_start, false, false};
    if (it.start && !before_all_anchors) {
      // Search mode: '^' asserts the start of the input, so what precedes it matched empty
      // there: `x*^a` is `^a`; where that cannot match empty, this part matches nothing.
      const bool before_match_empty =
          std::all_of(items.begin(), items.begin() + std::ptrdiff_t(k),
                      [&](const piece& q) { return !q.end && matches_empty(q.e); });
      if (options_.search && it.anchor_only && before_match_empty)
        es.clear();
      else if (options_.search && it.anchor_only)
        start_anchor_preceded(offsets, k);
      else
        fail("'^' or '\\A' in the middle of a pattern is not supported (only at its start)");
    }
    if (it.end && !after_all_anchors && !drop_rest) {
      if (options_.search) end_anchor_followed(offsets, k, it.anchor_only, !rest_matches_empty);
      fail("'$' or '\\z' in the middle of a pattern is not supported (only at its end)");
    }
    out.start = out.start || it.start;
    out.end = out.end || it.end;
    out.anchor_only = out.anchor_only && it.anchor_only;
    es.push_back(it.e);
    if (it.end && !after_all_anchors) break;  // the rest can only match empty (checked above)
  }
  out.e = g_.sequence(std::move(es));
  if (out.end) set_open(out, items);
  return out;
}

void regex_parser::set_open(piece& out, const std::vector<piece>& items) const {
  std::vector<expr_id> es;
  bool start = false;
  for (const piece& it : items) {
    if (it.end && !it.open) return;       // every path of `it` ends the input
    if (it.start && !it.end) es.clear();  // '^' after what matched empty (parse_concat)
    es.push_back(it.end ? *it.open : it.e);
    start = start || (it.end ? it.open_start : it.start);
  }
  out.open = g_.sequence(std::move(es));
  out.open_start = start;
}

void regex_parser::start_anchor_preceded(const std::vector<std::size_t>& offsets, std::size_t k) {
  const std::string_view before = p_.substr(offsets[0], offsets[k] - offsets[0]);
  pos_ = offsets[k];
  fail(
      fmt::format("'^' cannot follow '{}': in a JSON Schema pattern (ECMAScript, no m flag) '^' "
                  "matches only at the start of the string, so this part of the pattern matches "
                  "no string (a literal caret is \\^)",
                  before));
}

void regex_parser::end_anchor_followed(const std::vector<std::size_t>& offsets, std::size_t k,
                                       bool anchor_only, bool dead) {
  const std::string_view item = p_.substr(offsets[k], offsets[k + 1] - offsets[k]);
  const std::string_view rest = p_.substr(offsets[k + 1], offsets.back() - offsets[k + 1]);
  pos_ = offsets[k + 1];
  const std::string why =
      "in a JSON Schema pattern (ECMAScript, no m flag) '$' matches only at the end of the string";
  if (anchor_only)
    fail(
        fmt::format("'{}' cannot follow '{}': {}, so this part of the pattern matches no string "
                    "(a literal dollar sign is \\$)",
                    rest, item, why));
  if (dead)
    fail(fmt::format(
        "'{}' cannot follow '{}', which ends with '$' in every alternative: {}, so this part of "
        "the pattern matches no string",
        rest, item, why));
  fail(
      fmt::format("'{}' cannot follow '{}', which may end with '$': {}; after a group that ends "
                  "the string in some of its alternatives, text that matches empty only at the "
                  "end of the string is not supported (write it into each alternative)",
                  rest, item, why));
}

std::optional<regex_parser::piece> regex_parser::parse_atom(std::size_t depth) {
  char c = p_[pos_];
  switch (c) {
    case '(':
      return parse_group(depth);
    case '[':
      return piece{class_expr(parse_class())};
    case '.':
      ++pos_;
      return piece{any_char()};
    case '^':
    case '$':
      if (flags_.multi_line) fail("'^' and '$' in multi-line mode are not supported");
      ++pos_;
      return piece{g_.empty(), c == '^', c == '$', true};
    case '*':
    case '+':
    case '?':
      fail(std::string("quantifier '") + c + "' has nothing to repeat");
    case '{': {
      std::size_t save = pos_;
      std::uint32_t lo, hi;
      if (parse_counted(lo, hi)) {
        pos_ = save;
        fail("quantifier '{' has nothing to repeat");
      }
      ++pos_;
      return piece{g_.literal("{")};
    }
    case '\\': {
      if (pos_ + 1 < p_.size()) {
        char e = p_[pos_ + 1];
        if (options_.flavor == regex_flavor::ecmascript && (e == 'A' || e == 'z' || e == 'Z')) {
          ++pos_;
          fail(std::string("'\\") + e +
               "' is not an escape of ECMAScript with the u flag, which reads JSON Schema "
               "patterns (without it, it would be the letter " +
               e + "); the start of the string is '^', its end '$'");
        }
        const bool python_z = e == 'z' && options_.flavor == regex_flavor::python;  // bad escape
        if (e == 'A' || (e == 'z' && !python_z) || e == 'Z') {
          pos_ += 2;
          return piece{g_.empty(), e == 'A', e != 'A', true};
        }
      }
      return piece{parse_escape_atom()};
    }
    default:
      return piece{char_expr(next_cp())};
  }
}

bool regex_parser::parse_counted(std::uint32_t& min, std::uint32_t& max) {
  std::size_t save = pos_;
  auto number = [&](std::uint32_t& out) {
    std::size_t start = pos_;
    std::uint64_t v = 0;
    while (!at_end() && p_[pos_] >= '0' && p_[pos_] <= '9') {
      v = std::min<std::uint64_t>(v * 10 + std::uint64_t(p_[pos_] - '0'), UINT32_MAX);
      ++pos_;
    }
    out = std::uint32_t(v);
    return pos_ > start;
  };
  // Rust allows spaces around the numbers; Python and ECMAScript read `{1, 2}` as literal text.
  const bool python = options_.flavor == regex_flavor::python;
  auto skip_space = [&] {
    while (options_.flavor == regex_flavor::rust && !at_end() && p_[pos_] == ' ') ++pos_;
  };
  ++pos_;  // '{'
  skip_space();
  bool has_min = number(min);
  skip_space();
  if (!has_min) min = 0;
  if (eat('}')) {
    if (!has_min) return pos_ = save, false;
    max = min;
    return true;
  }
  if (!eat(',')) return pos_ = save, false;
  skip_space();
  bool has_max = number(max);
  skip_space();
  if (!has_min && !python) fail("repetition '{,n}' needs a minimum (write {0,n})");
  if (!eat('}')) return pos_ = save, false;
  if (!has_max) max = k_unbounded;
  return true;
}

regex_parser::piece regex_parser::apply_quantifier(piece p) {
  for (bool repeated = false;; repeated = true) {
    skip_extended();
    if (at_end()) return p;
    const std::size_t start = pos_;
    std::uint32_t lo = 0, hi = 0;
    char c = p_[pos_];
    if (c == '*')
      lo = 0, hi = k_unbounded, ++pos_;
    else if (c == '+')
      lo = 1, hi = k_unbounded, ++pos_;
    else if (c == '?')
      lo = 0, hi = 1, ++pos_;
    else if (c == '{' && parse_counted(lo, hi)) {
    } else {
      return p;
    }
    if (repeated && options_.flavor == regex_flavor::python) {
      pos_ = start;
      fail(
          "multiple repeat: Python's re takes no quantifier right after another (a** or "
          "a{2}*); group the first, (?:a*)*");
    }
    if (repeated && options_.flavor == regex_flavor::ecmascript) {
      pos_ = start;
      fail(
          "nothing to repeat: ECMAScript takes no quantifier right after another (a**, a*?? or "
          "a{2}*); group the first, (?:a*)*");
    }
    if (p.start || p.end) fail("a quantifier on an anchor is not supported");
    if (lo > hi)
      fail("repetition {" + std::to_string(lo) + "," + std::to_string(hi) + "} has min > max");
    if ((hi != k_unbounded && hi > k_max_repeat) || lo > k_max_repeat)
      fail("repetition count too large (the limit is " + std::to_string(k_max_repeat) + ")");
    p.e = g_.repeat(p.e, lo, hi);
    if (eat('+')) {
      // Possessive (Python): a*+ is (?>a*), the same as a* where that cannot end in two places.
      if (options_.flavor != regex_flavor::python || !is_prefix_free(p.e))
        fail(
            "possessive quantifiers (a*+, a++, a?+, a{m,n}+) are not supported where what they "
            "repeat could end in more than one place: they never give back what they matched, "
            "so which strings match depends on backtracking (a*+a matches nothing), which a "
            "grammar cannot express; without the '+' it is a plain quantifier");
    } else {
      eat('?');  // lazy: the same language
    }
  }
}

std::optional<regex_parser::piece> regex_parser::parse_group(std::size_t depth) {
  if (depth + 1 > options_.max_nesting) fail("groups nested too deeply");
  ++pos_;  // '('
  flags saved = flags_;
  const bool python = options_.flavor == regex_flavor::python;
  if (eat('?')) {
    if (p_.substr(pos_, 1) == "=" || p_.substr(pos_, 1) == "!")
      fail("lookahead assertions are not supported");
    if (p_.substr(pos_, 2) == "<=" || p_.substr(pos_, 2) == "<!")
      fail("lookbehind assertions are not supported");
    if (options_.flavor == regex_flavor::ecmascript && p_.substr(pos_, 1) != ":" &&
        p_.substr(pos_, 1) != "<")
      fail("invalid group '(?" + std::string(p_.substr(pos_, 1)) +
           "': ECMAScript has no inline flags ((?i), (?s:...)), atomic groups or (?P<name>...) "
           "and (?'name'...) groups; a named group is (?<name>...)");
    if (eat('>')) {
      if (!python) fail("atomic groups (?>...) are not supported");
      // Python: (?>X) keeps the first match of X that it finds. Where no match of X can end in
      // two places (no string of X is a prefix of another), that is X's only match, so the
      // group is (?:X); elsewhere it depends on backtracking and is refused.
      at_pattern_start_ = false;
      piece inner = parse_alternation(depth + 1);
      if (!eat(')')) fail("missing ')'");
      if (!is_prefix_free(inner.e))
        fail(
            "atomic groups (?>...) are not supported where their text could end in more than "
            "one place: they never give back what they matched, so which strings match depends "
            "on backtracking ((?>a*)a matches nothing), which a grammar cannot express; (?:...) "
            "is the group without that");
      flags_ = saved;
      return inner;
    }
    if (p_.substr(pos_, 1) == "(") fail("conditional groups (?(name)yes|no) are not supported");
    if (p_.substr(pos_, 2) == "P=") fail("backreferences are not supported");
    if (python && (p_.substr(pos_, 1) == "<" || p_.substr(pos_, 1) == "'"))
      fail(std::string("(?") + p_[pos_] +
           "name...) is not Python 3.11's syntax (re: unknown extension); a named group is "
           "(?P<name>...)");
    if (eat('P') || p_.substr(pos_, 1) == "<" || p_.substr(pos_, 1) == "'") {
      char close = eat('\'') ? '\'' : (eat('<') ? '>' : 0);
      if (!close) fail("expected '<' after (?P");
      const std::size_t name_start = pos_;
      while (!at_end() && p_[pos_] != close) ++pos_;
      if (!eat(close)) fail("unterminated group name");
      if (python) check_python_group_name(p_.substr(name_start, pos_ - 1 - name_start));
    } else if (!eat(':') && parse_flag_group()) {
      return std::nullopt;  // (?flags): they stay set until the enclosing group ends
    }
  }
  at_pattern_start_ = false;
  piece inner = parse_alternation(depth + 1);
  if (!eat(')')) fail("missing ')'");
  flags_ = saved;
  return inner;
}

bool regex_parser::parse_flag_group() {
  const std::size_t start = pos_;
  bool negate = false;
  std::string on_letters, off_letters;
  for (;;) {
    if (at_end()) fail("unterminated flag group");
    char c = p_[pos_++];
    if (c == ')') {
      if (options_.flavor == regex_flavor::python)
        check_python_flags(on_letters, off_letters, negate, true);
      return true;
    }
    if (c == ':') {
      if (options_.flavor == regex_flavor::python)
        check_python_flags(on_letters, off_letters, negate, false);
      return false;
    }
    if (c == '-' && !negate) {
      negate = true;
      continue;
    }
    bool on = !negate;
    (on ? on_letters : off_letters).push_back(c);
    switch (c) {
      case 'i':
        flags_.case_insensitive = on;
        break;
      case 's':
        flags_.dot_all = on;
        break;
      case 'm':
        flags_.multi_line = on;
        break;
      case 'x':
        flags_.extended = on;
        break;
      case 'u':
        flags_.unicode = on;
        break;
      case 'a':  // Python's ASCII flag: \d \w \s and (?i) in their ASCII forms
        if (options_.flavor != regex_flavor::python) fail("unknown flag 'a'");
        flags_.unicode = !on;
        break;
      case 'U':  // swaps greediness: the same language (Rust; Python has no such flag)
        if (options_.flavor == regex_flavor::python)
          fail("unknown flag 'U' (Python's re has none)");
        break;
      default:
        pos_ = start;
        fail(std::string("unknown flag '") + c + "'");
    }
  }
}

bool regex_parser::is_prefix_free(expr_id e) const {
  try {
    return byte_dfa::from_expr(g_, e, 10'000).prefix_free();
  } catch (const di::error&) {
    return false;  // too large to tell (or matching nothing): refused as if not
  }
}

void regex_parser::check_python_flags(const std::string& on, const std::string& off, bool negated,
                                      bool global) {
  // CPython 3.11's rules (re/_parser.py): global flags only before anything else, never turned
  // off; a and u exclude each other and stay on once set.
  auto has = [](const std::string& s, char c) { return s.find(c) != std::string::npos; };
  if (global && negated)
    fail("(?-...) needs a ':' (Python's re turns flags off only in a scoped group (?-i:...))");
  if (negated && off.empty()) fail("missing flag after '-'");
  if (global && on.empty()) fail("unknown extension '(?)' (no flag)");
  for (char c : off) {
    if (c == 'a' || c == 'u')
      fail(std::string("flag '") + c + "' cannot be turned off (Python's re)");
    if (has(on, c)) fail(std::string("flag '") + c + "' is turned on and off in one group");
  }
  if (has(on, 'a') && has(on, 'u')) fail("flags 'a' and 'u' are incompatible (Python's re)");
  if (!global) return;
  if (!at_pattern_start_)
    fail(
        "global flags not at the start of the expression (Python 3.11's re refuses them "
        "elsewhere; a scoped group (?i:...) applies to its own text)");
  if ((has(on, 'a') && global_unicode_) || (has(on, 'u') && global_ascii_))
    fail("flags 'a' and 'u' are incompatible (Python's re)");
  global_ascii_ = global_ascii_ || has(on, 'a');
  global_unicode_ = global_unicode_ || has(on, 'u');
}

void regex_parser::check_python_group_name(std::string_view name) {
  // Python takes any identifier (str.isidentifier); here ASCII ones, non-ASCII ones refused by
  // name rather than checked against an approximation of Unicode's identifier classes.
  if (name.empty()) fail("missing group name");
  if (std::any_of(name.begin(), name.end(),
                  [](char c) { return static_cast<unsigned char>(c) >= 0x80; }))
    fail("group name '" + std::string(name) +
         "': non-ASCII group names are not supported (use an ASCII identifier)");
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  if (std::isdigit(static_cast<unsigned char>(name[0])) ||
      !std::all_of(name.begin(), name.end(), word))
    fail("bad character in group name '" + std::string(name) + "' (Python's re takes identifiers)");
  if (std::find(group_names_.begin(), group_names_.end(), name) != group_names_.end())
    fail("redefinition of group name '" + std::string(name) + "'");
  group_names_.emplace_back(name);
}

}  // namespace detail

expr_id compile_regex(grammar& g, std::string_view pattern, const regex_options& options) {
  return detail::regex_parser(g, pattern, options).parse();
}

grammar regex_grammar(std::string_view pattern, const regex_options& options) {
  grammar g;
  rule_id root = g.declare_rule("root");
  g.define_rule(root, compile_regex(g, pattern, options));
  g.set_root(root);
  return g;
}

}  // namespace di::grammar
