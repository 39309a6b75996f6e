// Numbers and integers: bounds (inclusive or exclusive, any size) and multipleOf, intersected
// as regular languages when both apply. Generation writes bounded numbers without an exponent;
// validation also takes their exponent spellings (number_exponents.hpp).
#include "common/error.hpp"
#include "runtime/grammar/json_schema/number_exponents.hpp"
#include "runtime/grammar/json_schema/number_multiples.hpp"
#include "runtime/grammar/json_schema/schema_compiler.hpp"
#include "runtime/grammar/regular_language.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <optional>

namespace di::grammar::json_detail {

namespace {

/// The integer k such that integers are multiples of every m in `ms` exactly when they are
/// multiples of k; 0 if that is out of range.
std::uint64_t integer_step(const std::vector<decimal>& ms) {
  std::uint64_t k = 1;
  for (const auto& m : ms) {
    std::string digits = m.int_digits + m.frac_digits;
    if (digits.size() > 13) return 0;  // 10^12 itself has 13
    std::uint64_t M = std::stoull(digits), p10 = 1;
    for (std::size_t i = 0; i < m.frac_digits.size(); ++i) p10 *= 10;
    if (M == 0) return 0;
    std::uint64_t step = M / std::gcd(M, p10);  // v * 10^s divisible by M
    if (step / std::gcd(k, step) > k_max_multiple / k) return 0;
    k = std::lcm(k, step);
  }
  return k;
}

expr_id intersect_into(grammar& g, const std::function<expr_id(grammar&)>& a, const std::function<expr_id(grammar&)>& b,
                       std::size_t limit) {
  grammar scratch;
  byte_dfa da = byte_dfa::from_expr(scratch, a(scratch), limit);
  byte_dfa db = byte_dfa::from_expr(scratch, b(scratch), limit);
  return da.intersect(db, limit).minimize().emit(g, "number");
}

/// Numbers with a nonzero fraction (what remains of "number" after `not: {type: integer}`).
expr_id non_integers(grammar& t) {
  expr_id digit = t.byte_range('0', '9');
  expr_id int_part = t.choice({t.literal("0"), t.sequence({t.byte_range('1', '9'), t.repeat(digit, 0, k_unbounded)})});
  return t.sequence({t.optional(t.literal("-")), int_part, t.literal("."), t.repeat(digit, 0, k_unbounded),
                     t.byte_range('1', '9'), t.repeat(digit, 0, k_unbounded)});
}

/// Numbers with at most s decimals (multipleOf 10^-s), the fraction padded with zeros;
/// with `negative_zero` (validation) also -0, -0.0, ...
expr_id decimals(grammar& t, std::uint32_t s, bool negative_zero) {
  expr_id digit = t.byte_range('0', '9');
  expr_id frac =
      t.sequence({t.literal("."), t.repeat(digit, 1, s), t.repeat(t.literal("0"), 0, k_unbounded)});
  expr_id nonzero_int = t.sequence({t.byte_range('1', '9'), t.repeat(digit, 0, k_unbounded)});
  if (negative_zero)
    return t.sequence(
        {t.optional(t.literal("-")), t.choice({t.literal("0"), nonzero_int}), t.optional(frac)});
  // A negative value needs a nonzero digit: in its integer part or among its first s decimals.
  std::vector<expr_id> small;  // 0.0..0d..., the first nonzero decimal at place i
  for (std::uint32_t i = 1; i <= s; ++i)
    small.push_back(
        t.sequence({t.literal("0."), t.repeat(t.literal("0"), i - 1, i - 1), t.byte_range('1', '9'),
                    t.repeat(digit, 0, s - i), t.repeat(t.literal("0"), 0, k_unbounded)}));
  return t.choice(
      {t.sequence({t.choice({t.literal("0"), nonzero_int}), t.optional(frac)}),
       t.sequence({t.literal("-"), t.choice({t.sequence({nonzero_int, t.optional(frac)}),
                                             t.choice(std::move(small))})})});
}

/// The numbers of `n` written without an exponent (all of them in generation, which writes
/// bounded numbers that way), and the step their exponent spellings must be multiples of.
struct plain_numbers {
  expr_id plain;
  bool has_exponents = false;  ///< `plain` already takes every exponent spelling (no keyword)
  exponent_constraint exponents;
};

plain_numbers plain_number_schema(schema_compiler& c, const schema_node& n, bool integer_only) {
  grammar& g = c.g();
  const bool bounded = n.minimum || n.maximum;
  const std::optional<bound> lo = n.minimum, hi = n.maximum;
  const std::size_t limit = c.options().max_string_states;
  const bool validation = c.options().use == json_schema_use::validation;
  // A value of type "number" may be written 6.0 either way; an integer, for generation, not.
  const bool zero_fractions = !integer_only || validation;
  exponent_constraint ex{lo, hi, std::nullopt, false};
  if ((n.types & t_number) && !(n.types & t_integer)) {
    if (!n.multiple_of.empty()) c.unsupported("multipleOf", "on numbers that exclude integers", {nullptr, ""});
    ex.non_integer = true;
    if (!bounded) return {non_integers(g), false, ex};
    return {intersect_into(
                g, non_integers, [&](grammar& t) { return decimal_range(t, lo, hi, validation); },
                limit),
            false, ex};
  }
  bool all_integer_steps = std::all_of(n.multiple_of.begin(), n.multiple_of.end(), [](const decimal& m) { return m.is_integer(); });
  if (!n.multiple_of.empty() && (integer_only || all_integer_steps)) {
    const std::uint64_t k = integer_step(n.multiple_of);
    if (k != 0) ex.step = parse_decimal(std::to_string(k));
    // The digits of the multiples as one minimal automaton: unbounded, its rules go into the
    // schema (compiled once with it); bounded, it is intersected with the range.
    std::optional<digit_automaton> digits;
    std::string why = fmt::format("multiples whose step exceeds {}", k_max_multiple);
    if (k != 0) {
      try {
        digits = multiples_automaton(
            k, std::min(limit, bounded ? k_max_bounded_multiple_states : k_max_multiple_states));
      } catch (const di::error& e) {
        why = fmt::format("multiples of {}{}: {}", k, bounded ? " within bounds" : "", e.what());
      }
    }
    if (!digits) {
      c.unsupported("multipleOf", why, {nullptr, ""});
      ex.step.reset();
      return {integer_only ? c.text().any_integer() : c.text().any_number(), true, ex};
    }
    if (!bounded) return {json_integers(g, *digits, zero_fractions, "multiple"), false, ex};
    // Both minimized: multiples of 999 in [0, 100000] as a 999-rule automaton times the range
    // as built needed more than 20000 states.
    grammar scratch;
    const byte_dfa range =
        byte_dfa::from_expr(scratch, integer_range(scratch, lo, hi, zero_fractions), limit);
    return {json_integers_dfa(*digits, zero_fractions, limit)
                .intersect(range.minimize(), limit)
                .minimize()
                .emit(g, "number"),
            false, ex};
  }
  if (!n.multiple_of.empty()) {
    // Non-integer steps on numbers: only 10^-s (0.1, 0.01...) is supported: at most s decimals.
    const decimal& m = n.multiple_of.front();
    bool power_of_ten = n.multiple_of.size() == 1 && m.int_digits == "0" &&
                        m.frac_digits.find_first_not_of('0') == m.frac_digits.size() - 1 && m.frac_digits.back() == '1';
    if (!power_of_ten) {
      c.unsupported("multipleOf", "a non-integer step other than 0.1, 0.01, ...", {nullptr, ""});
      return {c.text().any_number(), true, ex};
    }
    ex.step = m;
    const auto s = std::uint32_t(m.frac_digits.size());
    auto some_decimals = [&](grammar& t) { return decimals(t, s, validation); };
    if (!bounded) return {some_decimals(g), false, ex};
    return {intersect_into(
                g, some_decimals, [&](grammar& t) { return decimal_range(t, lo, hi, validation); },
                limit),
            false, ex};
  }
  if (integer_only) {
    ex.step = parse_decimal("1");
    return bounded ? plain_numbers{integer_range(g, lo, hi, zero_fractions), false, ex}
                   : plain_numbers{c.text().any_integer(), true, ex};
  }
  return bounded ? plain_numbers{decimal_range(g, lo, hi, validation), false, ex}
                 : plain_numbers{c.text().any_number(), true, ex};
}

}  // namespace

expr_id number_schema(schema_compiler& c, const schema_node& n, bool integer_only) {
  const plain_numbers p = plain_number_schema(c, n, integer_only);
  if (p.has_exponents || c.options().use != json_schema_use::validation) return p.plain;
  // Validation: the value decides, not the spelling (2e0 is 2, 15e-1 is 1.5).
  grammar& g = c.g();
  try {
    return g.choice(
        {p.plain, c.text().numbers_with_exponent(p.exponents, c.options().max_string_states)});
  } catch (const di::error& e) {
    c.warn(fmt::format("numbers written with an exponent are not accepted here ({})", e.what()));
    return p.plain;
  }
}

}  // namespace di::grammar::json_detail
