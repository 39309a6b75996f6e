// Exact numeric bounds as regular languages over decimal digits: JSON integers in [lo, hi] and
// JSON numbers (no exponent) between bounds with either inclusive or exclusive ends, built digit
// by digit like llama.cpp's integer ranges but for any size and for fractions too. Integer
// multiples (number_multiples.hpp) are combined with ranges by intersection.
#pragma once

#include "runtime/grammar/grammar.hpp"
#include "runtime/grammar/regular_language.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace di::grammar::json_detail {

/// An exact decimal: sign, integer digits without leading zeros ("0" for zero), fraction
/// digits without trailing zeros.
struct decimal {
  bool negative = false;
  std::string int_digits = "0";
  std::string frac_digits;

  bool is_zero() const { return int_digits == "0" && frac_digits.empty(); }
  bool is_integer() const { return frac_digits.empty(); }
};

/// The exact value of a JSON number (doubles through their shortest round-trip text).
decimal to_decimal(const nlohmann::ordered_json& v);
decimal parse_decimal(std::string_view text);
int compare(const decimal& a, const decimal& b);
decimal floor_decimal(const decimal& d);
decimal ceil_decimal(const decimal& d);
decimal add_one(const decimal& integer);  ///< integer + 1

struct bound {
  decimal value;
  bool exclusive = false;
};

/// Integers written with an exponent, every spelling JSON Schema validates as an integer: the
/// value has no fractional part (2e0, 1.5e1, 10e-1, 1.0e400, -0.0e-7; not 1.0e-1), exact on
/// the digits. A regular language cannot compare a count of fraction digits with an exponent's
/// value in general, so a fraction's last nonzero digit may be at most the
/// k_max_exponent_shift-th (and a negative exponent at most that): 1.<21 digits>e30 is refused.
inline constexpr std::uint32_t k_max_exponent_shift = 20;
expr_id integers_with_exponent(grammar& g);
/// With `zero_fractions` (validation) an optional zero fraction (.0, .00, ...), else nothing.
expr_id zero_fraction(grammar& g, bool zero_fractions);
/// JSON integers (digits, optional "-", with `zero_fractions` -- validation -- optionally a
/// zero fraction like 3.0, and -0; without, 0|-?[1-9][0-9]*) in the bounds.
expr_id integer_range(grammar& g, const std::optional<bound>& lo, const std::optional<bound>& hi,
                      bool zero_fractions);
/// JSON numbers without exponent in the bounds; zero as -0, -0.0, ... too with `negative_zero`
/// (validation; generation never writes a negative zero).
expr_id decimal_range(grammar& g, const std::optional<bound>& lo, const std::optional<bound>& hi,
                      bool negative_zero);

}  // namespace di::grammar::json_detail
