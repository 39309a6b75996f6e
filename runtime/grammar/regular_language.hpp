// Regular languages as complete DFAs over bytes, for the set operations a context-free grammar
// lacks: intersection (a JSON Schema `pattern` and a length bound, or two patterns),
// complement (property names not covered by `properties`/`patternProperties`), emptiness and
// minimization. A result goes back into a grammar as right-linear rules, which compile to a
// loop inside the caller's automaton again.
#pragma once

#include "runtime/grammar/grammar.hpp"

#include <cstdint>
#include <string_view>
#include <vector>

namespace di::grammar {

class byte_dfa {
 public:
  /// The language of expression `e` of `g`; di::error if it uses recursion that is not
  /// regular or needs more than `max_states` states.
  static byte_dfa from_expr(const grammar& g, expr_id e, std::size_t max_states = 100'000);
  /// The empty language (from_expr refuses an expression that matches nothing).
  static byte_dfa none();

  byte_dfa intersect(const byte_dfa& other, std::size_t max_states = 100'000) const;
  /// The union: strings either language accepts.
  byte_dfa unite(const byte_dfa& other, std::size_t max_states = 100'000) const;
  /// Every byte string not in the language.
  byte_dfa complement() const;
  /// The equivalent DFA with the fewest states (unreachable and dead states removed but one).
  byte_dfa minimize() const;
  bool empty() const;
  /// No word of the language is a proper prefix of another (so a match that starts at a given
  /// place can end at one place only).
  bool prefix_free() const;
  bool accepts(std::string_view bytes) const;
  std::size_t num_states() const { return final_.size(); }

  /// Adds the language to `g` (one rule per state, named after `name`) and returns an
  /// expression that matches it.
  expr_id emit(grammar& g, std::string_view name) const;

 private:
  std::uint32_t next(std::uint32_t s, std::uint8_t b) const { return trans_[std::size_t(s) * 256 + b]; }
  std::vector<std::uint8_t> live_states() const;
  /// Product automaton, final where both (`both`) or either state is.
  byte_dfa product(const byte_dfa& other, bool both, std::size_t max_states) const;

  std::vector<std::uint32_t> trans_;  // [num_states * 256]; state 0 is the start
  std::vector<std::uint8_t> final_;
};

}  // namespace di::grammar
