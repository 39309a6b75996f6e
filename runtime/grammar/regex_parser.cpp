// Regex structure: alternation, concatenation, groups and inline flags, quantifiers, and the
// anchor rules (full match: an anchor may only sit at the start or end of the pattern or of a
// top-level alternative; search mode keeps each path's text by the anchors it passes, exactly,
// and pads unanchored ends with "any character").
#include "runtime/grammar/detail/regex_parser.hpp"

#include "common/error.hpp"
#include "runtime/grammar/compile_interrupt.hpp"
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
  if (surrogates_only_ && options_.flavor == regex_flavor::python && matches_nothing(flatten(p)))
    fail(
        "the pattern matches only text holding a lone surrogate (U+D800..U+DFFF, e.g. \\ud800), "
        "which cannot be encoded in UTF-8, so it matches no UTF-8 text and nothing could be "
        "generated (a character beyond U+FFFF is one escape, \\U0001F600, not a surrogate pair)");
  return options_.search ? search(p) : flatten(p);
}

regex_parser::piece regex_parser::anchor(bool start) const {
  piece p;
  p.cell[start ? 1 : 0][start ? 0 : 1] = g_.empty();
  p.anchor_only = true;
  return p;
}

regex_parser::piece regex_parser::parse_alternation(std::size_t depth) {
  std::vector<piece> alts{parse_concat(depth)};
  while (eat('|')) {
    at_pattern_start_ = false;
    alts.push_back(parse_concat(depth));
  }
  if (alts.size() == 1) return alts[0];
  piece out;
  for (int s : {0, 1}) {
    for (int e : {0, 1}) {
      std::vector<expr_id> es;
      for (const piece& a : alts)
        if (a.cell[s][e]) es.push_back(*a.cell[s][e]);
      if (!es.empty()) out.cell[s][e] = g_.choice(std::move(es));
    }
  }
  return out;
}

expr_id regex_parser::flatten(const piece& p) const {
  std::vector<expr_id> es;
  for (const auto& row : p.cell)
    for (const auto& c : row)
      if (c) es.push_back(*c);
  return g_.choice(std::move(es));
}

regex_parser::piece regex_parser::join(const piece& a, const piece& b) const {
  // '$' asserts the end of the input, so what follows it there matched empty (ECMAScript, no m
  // flag); '^' asserts its start, so what precedes it matched empty from the start. Both: the
  // input is empty.
  std::vector<expr_id> out[2][2];
  for (int sa : {0, 1}) {
    for (int ea : {0, 1}) {
      for (int sb : {0, 1}) {
        for (int eb : {0, 1}) {
          if (!a.cell[sa][ea] || !b.cell[sb][eb]) continue;
          const expr_id x = *a.cell[sa][ea], y = *b.cell[sb][eb];
          if (ea && sb) {
            if (matches_empty(x) && matches_empty(y)) out[1][1].push_back(g_.empty());
          } else if (ea) {
            if (matches_empty(y)) out[sa][1].push_back(x);
          } else if (sb) {
            if (matches_empty(x)) out[1][eb].push_back(y);
          } else {
            out[sa][eb].push_back(g_.sequence({x, y}));
          }
        }
      }
    }
  }
  piece p;
  p.anchor_only = a.anchor_only && b.anchor_only;
  for (int s : {0, 1})
    for (int e : {0, 1})
      if (!out[s][e].empty()) p.cell[s][e] = g_.choice(std::move(out[s][e]));
  return p;
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
    if (++num_atoms_ % 4096 == 0) check_interrupt();  // a pattern of 100,000s of characters
    std::optional<piece> a = parse_atom(depth);
    if (!a) continue;
    at_pattern_start_ = false;
    items.push_back(apply_quantifier(*a));
    offsets.push_back(offset);
  }
  offsets.push_back(pos_);
  // Runs of items without anchors are one sequence each: joined one by one, the growing
  // sequence would be copied at every item.
  std::vector<piece> segments;
  std::vector<std::size_t> segment_offsets;
  std::vector<expr_id> run;
  const auto end_run = [&] {
    if (!run.empty()) segments.emplace_back(g_.sequence(std::move(run)));
    run.clear();
  };
  for (std::size_t k = 0; k < items.size(); ++k) {
    const piece& it = items[k];
    const bool plain = !it.anchor_only && !it.start() && !it.end();
    if (!plain || run.empty()) segment_offsets.push_back(offsets[k]);
    if (plain) {
      run.push_back(*it.cell[0][0]);
      continue;
    }
    end_run();
    segments.push_back(it);
  }
  end_run();
  segment_offsets.push_back(offsets.back());
  return join_all(segments, segment_offsets);
}

regex_parser::piece regex_parser::join_all(const std::vector<piece>& items,
                                           const std::vector<std::size_t>& offsets) {
  piece out(g_.empty());
  out.anchor_only = !items.empty();
  std::optional<std::size_t> ended_at;  // the item after which every path has ended the input
  for (std::size_t k = 0; k < items.size(); ++k) {
    const piece& it = items[k];
    if (!options_.search) {
      // Full match: '$' and '^' only at the ends ((a$|b)c* would also match "bc" there).
      if (out.end() && !it.anchor_only)
        fail("'$' or '\\z' in the middle of a pattern is not supported (only at its end)");
      if (it.start() && !out.anchor_only)
        fail("'^' or '\\A' in the middle of a pattern is not supported (only at its start)");
    }
    piece next = join(out, it);
    if (!next.any()) anchors_leave_no_path(offsets, items, k, ended_at);
    out = next;
    if (!ended_at && !out.open()) ended_at = k;
  }
  return out;
}

void regex_parser::anchors_leave_no_path(const std::vector<std::size_t>& offsets,
                                         const std::vector<piece>& items, std::size_t k,
                                         std::optional<std::size_t> ended_at) {
  const auto text = [&](std::size_t from, std::size_t to) {
    return p_.substr(offsets[from], offsets[to] - offsets[from]);
  };
  if (ended_at) {
    const std::size_t j = *ended_at;
    const std::string_view rest = text(j + 1, offsets.size() - 1);
    pos_ = offsets[j + 1];
    const std::string why =
        "in a JSON Schema pattern (ECMAScript, no m flag) '$' matches only at the end of the "
        "string";
    if (items[j].anchor_only)
      fail(fmt::format(
          "'{}' cannot follow '{}': {}, so this part of the pattern matches no string (a literal "
          "dollar sign is \\$)",
          rest, text(j, j + 1), why));
    if (!items[j].open())
      fail(fmt::format(
          "'{}' cannot follow '{}', which ends with '$' in every alternative: {}, so this part of "
          "the pattern matches no string",
          rest, text(j, j + 1), why));
    fail(fmt::format(
        "'{}' cannot follow '{}', every match of which ends the string: {}, so this part of the "
        "pattern matches no string",
        rest, text(0, j + 1), why));
  }
  // Item k ties every path to the start, and what precedes it needs text.
  pos_ = offsets[k];
  const std::string why =
      "in a JSON Schema pattern (ECMAScript, no m flag) '^' matches only at the start of the "
      "string, so this part of the pattern matches no string";
  if (items[k].anchor_only)
    fail(fmt::format("'^' cannot follow '{}': {} (a literal caret is \\^)", text(0, k), why));
  fail(fmt::format("'{}' cannot follow '{}', as it starts with '^' in every alternative: {}",
                   text(k, k + 1), text(0, k), why));
}

std::optional<regex_parser::piece> regex_parser::parse_atom(std::size_t depth) {
  char c = p_[pos_];
  switch (c) {
    case '(':
      return parse_group(depth);
    case '[':
      return piece(class_expr(parse_class()));
    case '.':
      ++pos_;
      return piece(any_char());
    case '^':
    case '$':
      if (flags_.multi_line) fail("'^' and '$' in multi-line mode are not supported");
      ++pos_;
      return anchor(c == '^');
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
      return piece(g_.literal("{"));
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
          return anchor(e == 'A');
        }
      }
      return piece(parse_escape_atom());
    }
    default:
      return piece(char_expr(next_cp()));
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
    if (p.start() || p.end()) fail("a quantifier on an anchor is not supported");
    if (lo > hi)
      fail("repetition {" + std::to_string(lo) + "," + std::to_string(hi) + "} has min > max");
    if ((hi != k_unbounded && hi > k_max_repeat) || lo > k_max_repeat)
      fail("repetition count too large (the limit is " + std::to_string(k_max_repeat) + ")");
    p.cell[0][0] = g_.repeat(*p.cell[0][0], lo, hi);
    if (eat('+')) {
      // Possessive (Python): a*+ is (?>a*), the same as a* where that cannot end in two places.
      if (options_.flavor != regex_flavor::python || !is_prefix_free(*p.cell[0][0]))
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
      if (!is_prefix_free(flatten(inner)))
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
