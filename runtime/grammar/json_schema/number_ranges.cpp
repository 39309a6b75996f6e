// Numeric bounds as digit languages (see number_ranges.hpp). Naturals in a range are built
// from fixed-length pieces: a common prefix, then "greater than the rest of lo" / "any" /
// "less than the rest of hi". Fractions compare digit by digit the same way.
#include "runtime/grammar/json_schema/number_ranges.hpp"
#include "common/json_brief.hpp"

#include "common/error.hpp"
#include "runtime/grammar/regular_language.hpp"

#include <algorithm>
#include <optional>

namespace di::grammar::json_detail {

namespace {

std::string strip_leading_zeros(std::string s) {
  std::size_t p = s.find_first_not_of('0');
  return p == std::string::npos ? "0" : s.substr(p);
}

int compare_naturals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a < b ? -1 : a > b ? 1 : 0;
}

std::string natural_minus_one(std::string s) {  // s >= 1
  for (std::size_t i = s.size(); i-- > 0;) {
    if (s[i] != '0') {
      --s[i];
      break;
    }
    s[i] = '9';
  }
  return strip_leading_zeros(s);
}

std::string natural_plus_one(std::string s) {
  for (std::size_t i = s.size(); i-- > 0;) {
    if (s[i] != '9') {
      ++s[i];
      return s;
    }
    s[i] = '0';
  }
  return "1" + s;
}

struct digits_builder {
  grammar& g;

  expr_id range(char lo, char hi) { return lo > hi ? g.nothing() : g.byte_range(std::uint8_t(lo), std::uint8_t(hi)); }
  expr_id any(std::size_t n) { return g.repeat(range('0', '9'), std::uint32_t(n), std::uint32_t(n)); }
  expr_id lit(char c) { return g.byte_range(std::uint8_t(c), std::uint8_t(c)); }

  /// Fixed-length digit strings (leading zeros allowed) >= s, <= s, and in [lo, hi].
  expr_id ge(std::string_view s) {
    if (s.empty()) return g.empty();
    return g.choice({g.sequence({lit(s[0]), ge(s.substr(1))}), g.sequence({range(char(s[0] + 1), '9'), any(s.size() - 1)})});
  }
  expr_id le(std::string_view s) {
    if (s.empty()) return g.empty();
    return g.choice({g.sequence({range('0', char(s[0] - 1)), any(s.size() - 1)}), g.sequence({lit(s[0]), le(s.substr(1))})});
  }
  expr_id between(std::string_view lo, std::string_view hi) {
    if (lo.empty()) return g.empty();
    if (lo[0] == hi[0]) return g.sequence({lit(lo[0]), between(lo.substr(1), hi.substr(1))});
    return g.choice({g.sequence({lit(lo[0]), ge(lo.substr(1))}),
                     g.sequence({range(char(lo[0] + 1), char(hi[0] - 1)), any(lo.size() - 1)}),
                     g.sequence({lit(hi[0]), le(hi.substr(1))})});
  }

  /// Naturals without leading zeros in [lo, hi] (hi absent: unbounded).
  expr_id naturals(const std::string& lo, const std::optional<std::string>& hi) {
    if (hi && compare_naturals(lo, *hi) > 0) return g.nothing();
    const std::size_t n = lo.size();
    if (!hi)
      return g.choice({between(lo, std::string(n, '9')),
                       g.sequence({range('1', '9'), g.repeat(range('0', '9'), std::uint32_t(n), k_unbounded)})});
    const std::size_t m = hi->size();
    if (n == m) return between(lo, *hi);
    std::vector<expr_id> alts{between(lo, std::string(n, '9'))};
    if (m >= n + 2)
      alts.push_back(g.sequence({range('1', '9'), g.repeat(range('0', '9'), std::uint32_t(n), std::uint32_t(m - 2))}));
    alts.push_back(between("1" + std::string(m - 1, '0'), *hi));
    return g.choice(std::move(alts));
  }

  /// Fraction digits D (one or more) with 0.D >= 0.f (> when strict); f has no trailing zeros.
  expr_id frac_ge(std::string_view f, bool strict, bool need_digit) {
    if (f.empty()) {
      expr_id any_digits = g.repeat(range('0', '9'), need_digit ? 1 : 0, k_unbounded);
      if (!strict) return any_digits;
      return g.sequence({g.repeat(range('0', '9'), 0, k_unbounded), range('1', '9'), g.repeat(range('0', '9'), 0, k_unbounded)});
    }
    return g.choice({g.sequence({lit(f[0]), frac_ge(f.substr(1), strict, false)}),
                     g.sequence({range(char(f[0] + 1), '9'), g.repeat(range('0', '9'), 0, k_unbounded)})});
  }
  /// Fraction digits D (one or more) with 0.D <= 0.f (< when strict).
  expr_id frac_le(std::string_view f, bool strict, bool need_digit) {
    if (f.empty()) return strict ? g.nothing() : g.repeat(lit('0'), need_digit ? 1 : 0, k_unbounded);
    std::vector<expr_id> alts{g.sequence({range('0', char(f[0] - 1)), g.repeat(range('0', '9'), 0, k_unbounded)}),
                              g.sequence({lit(f[0]), frac_le(f.substr(1), strict, false)})};
    if (!need_digit) alts.push_back(g.empty());  // 0.D stops short of f: smaller
    return g.choice(std::move(alts));
  }
};

/// After an integer part equal to floor(bound): nothing, or "." and fraction digits.
expr_id tail_ge(grammar& g, const bound& a) {
  digits_builder d{g};
  std::vector<expr_id> alts{g.sequence({g.literal("."), d.frac_ge(a.value.frac_digits, a.exclusive, true)})};
  if (a.value.frac_digits.empty() && !a.exclusive) alts.push_back(g.empty());
  return g.choice(std::move(alts));
}

expr_id tail_le(grammar& g, const bound& b) {
  digits_builder d{g};
  std::vector<expr_id> alts{g.sequence({g.literal("."), d.frac_le(b.value.frac_digits, b.exclusive, true)})};
  if (!b.exclusive || !b.value.frac_digits.empty()) alts.push_back(g.empty());
  return g.choice(std::move(alts));
}

/// Magnitudes (no sign) between a (lower) and b (upper, optional); both non-negative.
expr_id magnitudes(grammar& g, const bound& a, const std::optional<bound>& b) {
  digits_builder d{g};
  expr_id any_fraction = g.optional(g.sequence({g.literal("."), g.repeat(d.range('0', '9'), 1, k_unbounded)}));
  const std::string& A = a.value.int_digits;
  if (!b)
    return g.choice({g.sequence({d.naturals(natural_plus_one(A), std::nullopt), any_fraction}),
                     g.sequence({g.literal(A), tail_ge(g, a)})});
  const std::string& B = b->value.int_digits;
  if (A == B) {
    // Both fraction bounds apply: intersect the two tails as regular languages.
    grammar scratch;
    byte_dfa lo = byte_dfa::from_expr(scratch, tail_ge(scratch, a));
    byte_dfa hi = byte_dfa::from_expr(scratch, tail_le(scratch, *b));
    return g.sequence({g.literal(A), lo.intersect(hi).minimize().emit(g, "fraction")});
  }
  std::vector<expr_id> alts{g.sequence({g.literal(A), tail_ge(g, a)}), g.sequence({g.literal(B), tail_le(g, *b)})};
  std::string lo = natural_plus_one(A);
  if (compare_naturals(lo, B) < 0) alts.push_back(g.sequence({d.naturals(lo, natural_minus_one(B)), any_fraction}));
  return g.choice(std::move(alts));
}

decimal negate(decimal d) {
  if (!d.is_zero()) d.negative = !d.negative;
  return d;
}

bool in_range(const decimal& x, const std::optional<bound>& lo, const std::optional<bound>& hi) {
  if (lo && (lo->exclusive ? compare(x, lo->value) <= 0 : compare(x, lo->value) < 0)) return false;
  if (hi && (hi->exclusive ? compare(x, hi->value) >= 0 : compare(x, hi->value) > 0)) return false;
  return true;
}

}  // namespace

decimal parse_decimal(std::string_view text) {
  decimal d;
  std::size_t i = 0;
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) d.negative = text[i++] == '-';
  std::string digits;
  long long point = -1, exponent = 0;
  for (; i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'); ++i) {
    if (text[i] == '.') point = (long long)digits.size();
    else digits.push_back(text[i]);
  }
  if (point < 0) point = (long long)digits.size();
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) exponent = std::stoll(std::string(text.substr(i + 1)));
  DI_CHECK(!digits.empty() && std::llabs(exponent) < 100000, "not a number: '{}'", text);
  point += exponent;
  if (point < 0) digits.insert(0, std::size_t(-point), '0'), point = 0;
  if (point > (long long)digits.size()) digits.append(std::size_t(point - (long long)digits.size()), '0');
  d.int_digits = strip_leading_zeros(digits.substr(0, std::size_t(point)));
  d.frac_digits = digits.substr(std::size_t(point));
  while (!d.frac_digits.empty() && d.frac_digits.back() == '0') d.frac_digits.pop_back();
  if (d.is_zero()) d.negative = false;
  return d;
}

decimal to_decimal(const nlohmann::ordered_json& v) {
  DI_CHECK(v.is_number(), "expected a number, got {}", json_brief(v));
  return parse_decimal(v.dump());
}

int compare(const decimal& a, const decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  int sign = a.negative ? -1 : 1;
  int c = compare_naturals(a.int_digits, b.int_digits);
  if (c == 0) {
    std::size_t n = std::max(a.frac_digits.size(), b.frac_digits.size());
    std::string fa = a.frac_digits + std::string(n - a.frac_digits.size(), '0');
    std::string fb = b.frac_digits + std::string(n - b.frac_digits.size(), '0');
    c = fa < fb ? -1 : fa > fb ? 1 : 0;
  }
  return sign * c;
}

decimal add_one(const decimal& x) {
  if (x.negative) {
    decimal m = x;
    m.negative = false;
    m.int_digits = natural_minus_one(m.int_digits);
    m.negative = m.int_digits != "0";
    return m;
  }
  decimal r = x;
  r.int_digits = natural_plus_one(x.int_digits);
  return r;
}

decimal floor_decimal(const decimal& d) {
  decimal r{d.negative, d.int_digits, ""};
  if (d.negative && !d.frac_digits.empty()) r.int_digits = natural_plus_one(d.int_digits);
  return r;
}

decimal ceil_decimal(const decimal& d) {
  decimal r{d.negative, d.int_digits, ""};
  if (!d.negative && !d.frac_digits.empty()) r.int_digits = natural_plus_one(d.int_digits);
  if (r.int_digits == "0") r.negative = false;
  return r;
}

expr_id zero_fraction(grammar& g, bool zero_fractions) {
  if (!zero_fractions) return g.empty();
  return g.optional(g.sequence({g.literal("."), g.repeat(g.literal("0"), 1, k_unbounded)}));
}

expr_id integers_with_exponent(grammar& g) {
  digits_builder d{g};
  const expr_id digit = d.range('0', '9'), nonzero = d.range('1', '9');
  const expr_id zeros = g.repeat(d.lit('0'), 0, k_unbounded);
  const expr_id sign = g.optional(g.literal("-"));
  byte_set e_set;
  e_set.set('e');
  e_set.set('E');
  const expr_id e = g.bytes(e_set);
  const expr_id int_part =
      g.choice({g.literal("0"), g.sequence({nonzero, g.repeat(digit, 0, k_unbounded)})});
  const expr_id zero_fraction =
      g.optional(g.sequence({g.literal("."), g.repeat(d.lit('0'), 1, k_unbounded)}));
  const expr_id nonnegative_exponent =
      g.choice({g.sequence({g.optional(g.literal("+")), g.repeat(digit, 1, k_unbounded)}),
                g.sequence({g.literal("-"), g.repeat(d.lit('0'), 1, k_unbounded)})});
  std::vector<expr_id> alts{// No fraction digits left (7e3, 7.00e+0, 0.0e5): any exponent >= 0.
                            g.sequence({sign, int_part, zero_fraction, e, nonnegative_exponent}),
                            // Zero: any exponent (0e-7, -0.0E-2).
                            g.sequence({sign, g.literal("0"), zero_fraction, e, g.literal("-"),
                                        g.repeat(digit, 1, k_unbounded)})};
  for (std::uint32_t k = 1; k <= k_max_exponent_shift; ++k) {
    const std::string shift = std::to_string(k);
    // The last nonzero fraction digit is the k-th: an exponent >= k (1.5e1, 1.250E+002).
    alts.push_back(
        g.sequence({sign, int_part, g.literal("."), g.repeat(digit, k - 1, k - 1), nonzero, zeros,
                    e, g.optional(g.literal("+")), zeros, d.naturals(shift, std::nullopt)}));
    // An exponent of -k after k or more trailing zeros (100e-2, 10.0e-1).
    alts.push_back(
        g.sequence({sign, nonzero, g.repeat(digit, 0, k_unbounded), g.repeat(d.lit('0'), k, k),
                    zero_fraction, e, g.literal("-"), zeros, g.literal(shift)}));
  }
  return g.choice(std::move(alts));
}

expr_id integer_range(grammar& g, const std::optional<bound>& lo_b,
                      const std::optional<bound>& hi_b, bool zero_fractions) {
  std::optional<decimal> lo, hi;  // inclusive integer bounds
  if (lo_b) lo = lo_b->exclusive ? add_one(floor_decimal(lo_b->value)) : ceil_decimal(lo_b->value);
  if (hi_b) hi = hi_b->exclusive ? negate(add_one(floor_decimal(negate(hi_b->value)))) : floor_decimal(hi_b->value);
  if (lo && hi && compare(*lo, *hi) > 0) return g.nothing();
  digits_builder d{g};
  std::vector<expr_id> alts;
  decimal zero;
  if (!hi || !hi->negative) {
    std::string from = lo && !lo->negative ? lo->int_digits : "0";
    alts.push_back(d.naturals(from, hi ? std::optional<std::string>(hi->int_digits) : std::nullopt));
  }
  if (!lo || lo->negative) {
    std::string from = hi && hi->negative ? hi->int_digits : "1";
    alts.push_back(g.sequence({g.literal("-"), d.naturals(from, lo ? std::optional<std::string>(lo->int_digits) : std::nullopt)}));
  }
  // -0 is an integer as JSON Schema validates; generation writes zero as 0.
  if (zero_fractions && (!lo || compare(*lo, zero) <= 0) && (!hi || compare(*hi, zero) >= 0))
    alts.push_back(g.literal("-0"));
  return g.sequence({g.choice(std::move(alts)), zero_fraction(g, zero_fractions)});
}

expr_id decimal_range(grammar& g, const std::optional<bound>& lo, const std::optional<bound>& hi,
                      bool negative_zero) {
  std::vector<expr_id> alts;
  decimal zero;
  bool nonneg_possible = !hi || !hi->value.negative;
  if (hi && hi->value.is_zero() && hi->exclusive) nonneg_possible = false;
  if (nonneg_possible) {
    bound a = lo && !lo->value.negative ? *lo : bound{zero, false};
    alts.push_back(magnitudes(g, a, hi));
  }
  bool negative_possible = !lo || (lo->value.negative && !lo->value.is_zero());
  if (negative_possible) {
    bound a = hi && hi->value.negative ? bound{negate(hi->value), hi->exclusive} : bound{zero, true};
    std::optional<bound> b;
    if (lo) b = bound{negate(lo->value), lo->exclusive};
    alts.push_back(g.sequence({g.literal("-"), magnitudes(g, a, b)}));
  }
  if (negative_zero && in_range(zero, lo, hi))
    alts.push_back(g.sequence({g.literal("-0"), g.optional(g.sequence({g.literal("."), g.repeat(g.literal("0"), 1, k_unbounded)}))}));
  return g.choice(std::move(alts));
}

}  // namespace di::grammar::json_detail
