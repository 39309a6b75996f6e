// Strings: length bounds, ECMAScript `pattern`s (search semantics) and `format`s, each a
// regular language over the decoded characters written in their canonical JSON escaping;
// several of them are intersected as DFAs. Also the scalar checks behind enum filtering.
#include "common/error.hpp"
#include "runtime/grammar/earley_parser.hpp"
#include "runtime/grammar/json_schema/formats.hpp"
#include "runtime/grammar/json_schema/schema_compiler.hpp"
#include "runtime/grammar/regex.hpp"
#include "runtime/grammar/regular_language.hpp"

#include <algorithm>
#include <functional>

namespace di::grammar::json_detail {

namespace {

constexpr std::uint64_t k_max_length_bound = 100'000;

regex_options ecma_options(bool search, json_whitespace ws) {
  regex_options o;
  o.flavor = regex_flavor::ecmascript;
  o.search = search;
  o.unicode_classes = false;
  o.ecma_dot = true;
  o.char_mapper = [ws](grammar& g, const codepoint_set& cs) { return json_text(g, ws).json_char(cs); };
  return o;
}

bool has_string_constraints(const schema_node& n) {
  return n.min_length > 0 || n.max_length != UINT64_MAX || !n.patterns.empty() || !n.formats.empty() ||
         !n.anti_patterns.empty() || !n.excluded_strings.empty();
}

}  // namespace

expr_id string_content(schema_compiler& c, const schema_node& n, grammar& target) {
  using piece = std::function<expr_id(grammar&)>;
  std::vector<piece> pieces;
  json_whitespace ws = c.options().whitespace;
  if (n.min_length > 0 || n.max_length != UINT64_MAX) {
    if (n.min_length > n.max_length) return target.nothing();
    std::uint64_t hi = n.max_length;
    if (hi != UINT64_MAX && hi > k_max_length_bound) {
      c.unsupported("maxLength", "bounds above 100000 characters are not supported", {nullptr, ""});
      hi = UINT64_MAX;
    }
    DI_CHECK(n.min_length <= k_max_length_bound, "JSON Schema: minLength {} above the supported 100000", n.min_length);
    std::uint32_t lo32 = std::uint32_t(n.min_length), hi32 = hi == UINT64_MAX ? k_unbounded : std::uint32_t(hi);
    pieces.push_back([=](grammar& g) {
      return g.repeat(json_text(g, ws).json_char(codepoint_set::all()), lo32, hi32);
    });
  }
  for (const auto& p : n.patterns)
    pieces.push_back([=](grammar& g) { return compile_regex(g, p, ecma_options(true, ws)); });
  for (const auto& f : n.formats) {
    std::string re = *format_regex(f);
    pieces.push_back([=](grammar& g) { return compile_regex(g, re, ecma_options(false, ws)); });
  }
  // Complemented pieces (from `not`): strings matching an anti-pattern or equal to an excluded value.
  std::vector<piece> holes;
  for (const auto& p : n.anti_patterns)
    holes.push_back([=](grammar& g) { return compile_regex(g, p, ecma_options(true, ws)); });
  if (!n.excluded_strings.empty()) {
    std::vector<std::string> excluded = n.excluded_strings;
    holes.push_back([=](grammar& g) {
      std::vector<expr_id> alts;
      for (const auto& x : excluded) {
        std::vector<expr_id> chars;
        for (char32_t cp : decode_utf8(x)) chars.push_back(json_text(g, ws).json_char(codepoint_set::single(cp)));
        alts.push_back(g.sequence(std::move(chars)));
      }
      return g.choice(std::move(alts));
    });
  }
  if (!holes.empty() && pieces.empty())
    pieces.push_back([=](grammar& g) { return g.repeat(json_text(g, ws).json_char(codepoint_set::all()), 0, k_unbounded); });
  if (pieces.empty()) return target.repeat(json_text(target, ws).json_char(codepoint_set::all()), 0, k_unbounded);
  if (pieces.size() == 1 && holes.empty()) return pieces[0](target);
  // Several constraints on one string meet in a product automaton of at most `limit` states.
  // Each character of the length bound takes a few dozen states of JSON escapes and UTF-8, so
  // a bound past about 200 characters beside a pattern, format or not exceeds it.
  const std::size_t limit = c.options().max_string_states;
  grammar scratch;
  byte_dfa all;
  try {
    all = byte_dfa::from_expr(scratch, pieces[0](scratch), limit);
    for (std::size_t k = 1; k < pieces.size(); ++k)
      all =
          all.intersect(byte_dfa::from_expr(scratch, pieces[k](scratch), limit), limit).minimize();
    for (const auto& h : holes)
      all = all.intersect(byte_dfa::from_expr(scratch, h(scratch), limit).complement(), limit)
                .minimize();
  } catch (const di::error& e) {
    DI_FAIL(
        "JSON Schema: a string's constraints together (minLength/maxLength {}..{} with {} "
        "pattern(s), {} format(s) and {} excluded form(s)) need an automaton of more than {} "
        "states, the limit: a length bound past about 200 characters cannot be combined "
        "with a pattern, format or not ({})",
        n.min_length,
        n.max_length == UINT64_MAX ? std::string("inf") : std::to_string(n.max_length),
        n.patterns.size(), n.formats.size(), n.anti_patterns.size() + n.excluded_strings.size(),
        limit, e.what());
  }
  return all.emit(target, "string");
}

expr_id string_schema(schema_compiler& c, const schema_node& n) {
  if (!has_string_constraints(n)) return c.text().any_string();
  return c.text().quoted(string_content(c, n, c.g()));
}

bool schema_compiler::regex_matches(const std::string& regex, bool search, std::string_view text) {
  std::string key = (search ? "s:" : "f:") + regex;
  auto it = regex_cache_.find(key);
  if (it == regex_cache_.end()) {
    regex_options o;
    o.flavor = regex_flavor::ecmascript;
    o.search = search;
    o.unicode_classes = false;
    o.ecma_dot = true;
    it = regex_cache_.emplace(key, compiled_grammar::compile(regex_grammar(regex, o))).first;
  }
  earley_parser p(*it->second);
  return p.push_all(text) == text.size() && p.is_accepting();
}

bool scalar_matches(schema_compiler& c, const json& v, const schema_node& n, bool listed) {
  if (n.never) return false;  // e.g. the schema `false`
  if (n.enum_values && !listed &&
      std::find(n.enum_values->begin(), n.enum_values->end(), v) == n.enum_values->end())
    return false;
  if (v.is_null()) return n.types & t_null;
  if (v.is_boolean()) return n.types & t_boolean;
  if (v.is_object()) return n.types & t_object;
  if (v.is_array()) return n.types & t_array;
  if (v.is_string()) {
    if (!(n.types & t_string)) return false;
    const std::string& s = v.get_ref<const std::string&>();
    std::size_t len = decode_utf8(s).size();
    if (len < n.min_length || len > n.max_length) return false;
    for (const auto& p : n.patterns)
      if (!c.regex_matches(p, true, s)) return false;
    for (const auto& f : n.formats)
      if (!c.regex_matches(*format_regex(f), false, s)) return false;
    for (const auto& p : n.anti_patterns)
      if (c.regex_matches(p, true, s)) return false;
    for (const auto& x : n.excluded_strings)
      if (x == s) return false;
    return true;
  }
  decimal d = to_decimal(v);
  if (!(n.types & (d.is_integer() ? (t_integer | t_number) : t_number))) return false;
  if (n.minimum && (n.minimum->exclusive ? compare(d, n.minimum->value) <= 0 : compare(d, n.minimum->value) < 0)) return false;
  if (n.maximum && (n.maximum->exclusive ? compare(d, n.maximum->value) >= 0 : compare(d, n.maximum->value) > 0)) return false;
  for (const auto& m : n.multiple_of) {
    // d / m integral <=> d * 10^s / (m * 10^s) integral with both scaled to integers.
    std::size_t s = std::max(d.frac_digits.size(), m.frac_digits.size());
    auto scaled = [&](const decimal& x) {
      std::string digits = x.int_digits + x.frac_digits + std::string(s - x.frac_digits.size(), '0');
      return digits;
    };
    std::string num = scaled(d), den = scaled(m);
    // Long division of the digit string by a (small) denominator.
    if (den.size() > 18) return false;
    unsigned long long q = std::stoull(den), rem = 0;
    for (char ch : num) rem = (rem * 10 + std::uint64_t(ch - '0')) % q;
    if (rem != 0) return false;
  }
  return true;
}

}  // namespace di::grammar::json_detail
