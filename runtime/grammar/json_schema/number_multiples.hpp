// multipleOf on integers as automata over decimal digits. Read from its first digit, a number's
// remainder mod k after each digit is (10 r + d) mod k, so k remainders always do; but for
// k = q x 2^a x 5^b (q prime to 10) divisibility by 2^a x 5^b depends on the last max(a, b)
// digits only, and its remainders fall into few classes (10^6: 7, 5^6: 36), found without
// listing them. Only q, whose q remainders are all distinct, costs its size.
#pragma once

#include "runtime/grammar/grammar.hpp"
#include "runtime/grammar/regular_language.hpp"

#include <array>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace di::grammar::json_detail {

/// A step past this is refused: its remainders no longer fit 64-bit arithmetic comfortably.
inline constexpr std::uint64_t k_max_multiple = 1'000'000'000'000;

/// A bounded step's digit automaton becomes a byte automaton through byte_dfa::from_expr, whose
/// rule inlining nests about two levels per state (a grammar may nest 20000): one of more states
/// is refused there (multiples of the prime 9973 in [0, 100000] failed as "grammar too deeply
/// nested").
inline constexpr std::size_t k_max_bounded_multiple_states = 5000;
/// Unbounded, its rules go into the schema's grammar: up to this many (and max_string_states).
inline constexpr std::size_t k_max_multiple_states = 100'000;

/// A DFA over the digits 0-9 (leading zeros allowed), read from the first digit.
struct digit_automaton {
  std::vector<std::array<std::uint32_t, 10>> next;  ///< [num_states][digit]; 0 is the start
  std::vector<std::uint8_t> is_final;               ///< [num_states]

  std::size_t num_states() const { return next.size(); }
};

/// The minimal digit automaton of the multiples of k (1 <= k <= k_max_multiple): digit strings
/// whose value is a multiple of k. Throws di::error naming k when it has more than `max_states`
/// states (built no further than that: the cost is bounded by max_states, not by k).
digit_automaton multiples_automaton(std::uint64_t k, std::size_t max_states);

/// Naturals without leading zeros ([1-9][0-9]*) whose digits `digits` takes, each followed by
/// `at_final()`: one right-linear rule per state, named after `name`, so that it compiles to one
/// automaton.
expr_id nonzero_naturals(grammar& g, const digit_automaton& digits,
                         const std::function<expr_id()>& at_final, std::string_view name);

/// JSON integers whose digits `digits` takes: 0|-?[1-9][0-9]* and, with `zero_fractions`
/// (validation), also -0 and a zero fraction (6.0, 6.00).
expr_id json_integers(grammar& g, const digit_automaton& digits, bool zero_fractions,
                      std::string_view name);

/// json_integers as one minimized byte automaton, for intersections with a range.
byte_dfa json_integers_dfa(const digit_automaton& digits, bool zero_fractions, std::size_t limit);
/// JSON integers (as json_integers) that are multiples of k, as one minimized byte automaton.
/// Throws di::error past `limit` states.
byte_dfa multiples_of(std::uint64_t k, bool zero_fractions, std::size_t limit);

}  // namespace di::grammar::json_detail
