// Numbers written with an exponent (2e0, 15e-1, 0.5e1), judged by value as JSON Schema judges
// them: in bounds, multiples of a step, not integers, equal to an enum/const value. Exact on the
// digits, never through a double. A regular language cannot compare an exponent's value with a
// count of digits in general, so each exponent e of a window is its own case (the mantissa times
// 10^e is in the set exactly when the mantissa is in the set shifted by 10^-e); exponents outside
// the window are taken only where the value's sign (or zero) alone decides.
#pragma once

#include "runtime/grammar/json_schema/number_ranges.hpp"

#include <optional>

namespace di::grammar::json_detail {

/// Exponents -k_exponent_window..k_exponent_window are decided digit by digit (for an enum or
/// const value, those within k_exponent_window of the value's own exponent: 1e300 is 1e300).
inline constexpr int k_exponent_window = 20;
/// Exponents of the window decided by one automaton (a product over all 41 outgrew the limits).
inline constexpr int k_exponents_per_automaton = 6;
/// multipleOf a x 10^-b (a an integer without trailing zeros): its exponent spellings past -b
/// need a remainder automaton of a's residues per exponent; a step whose a exceeds this takes
/// exponents up to -b only (a whole multiple of a as mantissa: 86400 = 864 x 10^2 takes 864e2
/// and 1728e2, not 8.64e4).
inline constexpr std::uint32_t k_max_exponent_step_digits = 25;
/// A step whose a has a digit automaton of more states than this (multiples_automaton: a prime
/// to 10 has a, 4096 412, 15625 36, 65536 2829; ~0.1 s per 1000 states), or written with more
/// than k_exponent_window decimal places or trailing zeros (1e-300, 1e30), takes no exponent
/// spellings.
inline constexpr std::size_t k_max_exponent_step = 1000;

/// A bound with more digits than this (1.7976931348623157e308 has 309) takes no exponent
/// spellings: scaled through the window its automata would outgrow the size limits.
inline constexpr std::size_t k_max_bound_digits = 25;

struct exponent_constraint {
  std::optional<bound> lo, hi;
  /// The value is a multiple of this positive decimal (1 for "an integer"), when set.
  std::optional<decimal> step;
  /// The value is not an integer (`not: {type: integer}`); not combined with `step`.
  bool non_integer = false;
};

/// Texts -?(0|[1-9][0-9]*)(.[0-9]+)?[eE][+-]?[0-9]+ whose value meets `c`, as one minimized
/// automaton emitted into `g`: every such text whose exponent is in [-k_exponent_window,
/// k_exponent_window]; zero with any exponent when zero meets `c`; when `c` holds every
/// positive (negative) value of its kind, positives (negatives) with any exponent -- for
/// integers those integers_with_exponent takes. Throws di::error past `max_states`.
expr_id numbers_with_exponent(grammar& g, const exponent_constraint& c, std::size_t max_states);

/// An enum with more numbers than this takes their spellings without an exponent only: each
/// number's exponent spellings are 41 alternatives (a 10,000-number enum outgrew the limits).
inline constexpr std::size_t k_max_enum_numbers_with_exponent = 64;

/// Every spelling of the exact value `v` (1.5: 1.5, 1.50, 15e-1, 0.15E+1, ...): without an
/// exponent, and (`with_exponent`) with one within k_exponent_window of v's own (zero: any
/// exponent). An expression, built without automata, for enum/const values.
expr_id spellings_of(grammar& g, const decimal& v, bool with_exponent);

}  // namespace di::grammar::json_detail
