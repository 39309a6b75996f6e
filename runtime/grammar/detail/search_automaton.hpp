// The automaton of a search for a set of literals (Aho-Corasick), built directly: one state per
// prefix of a literal, so at most their total length + 1. Subset construction over the padded
// form ("any character"* then the literals) reaches the same states, but each of its state sets
// holds every literal prefix that ends the text read -- the square of the length for a literal
// that overlaps itself (aaaa..., [aA]...), thousands of prefixes for thousands of alternatives.
// Literals are sequences of symbols: character sets that are pairwise equal or disjoint
// (search_alphabet), so that a character moves every state to one state.
#pragma once

#include "runtime/grammar/codepoint_set.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace di::grammar::detail {

/// Character sets numbered as symbols, each equal to or disjoint from every other.
class search_alphabet {
 public:
  /// The symbol of `set`: the earlier symbol equal to it, or a new one where it is disjoint from
  /// all of them; none where it overlaps a symbol without being equal to it (or is empty).
  std::optional<std::uint32_t> symbol_of(const codepoint_set& set);
  const std::vector<codepoint_set>& symbols() const { return symbols_; }
  /// Every character of some symbol.
  const codepoint_set& covered() const { return covered_; }

 private:
  std::vector<codepoint_set> symbols_;
  codepoint_set covered_;
  std::map<char32_t, char32_t> ranges_;                    // lo -> hi of every symbol's ranges
  std::unordered_map<std::string, std::uint32_t> by_key_;  // a symbol by its ranges' bytes
};

/// The DFA of "any text, then one of the literals": state s stands for the longest suffix of the
/// text read that is a prefix of a literal. Its moves: on a symbol it has a child on, to that
/// child; on another, as its failure state moves (state 0: to state 0). Kept in this form, each
/// state lists only its children, so the automaton stays as large as the trie; written out, a
/// state's moves may repeat those of all its suffixes (2,000 words: 25 a state).
struct search_automaton {
  static constexpr std::uint32_t k_none = UINT32_MAX;
  struct state {
    /// (symbol, child) of the trie, sorted by symbol.
    std::vector<std::pair<std::uint32_t, std::uint32_t>> children;
    std::uint32_t fail = 0;             ///< the longest proper suffix that is a state
    std::uint32_t suffix_end = k_none;  ///< the longest proper suffix state where one ends
    std::uint32_t symbol = k_none;      ///< the symbol read last on entering (0: none)
    std::uint32_t depth = 0;            ///< the length of its prefix
    std::vector<std::uint32_t> ends;    ///< the literals (by index) that end at this state
  };
  std::vector<state> states;         ///< state 0: the empty prefix
  std::vector<std::uint32_t> order;  ///< states by depth, state 0 first

  /// The child of `s` on symbol `c`, if any.
  std::optional<std::uint32_t> child(std::uint32_t s, std::uint32_t c) const;
  /// Where state `s` moves on symbol `c`.
  std::uint32_t move(std::uint32_t s, std::uint32_t c) const;
};

/// The automaton of `literals` (each non-empty, symbols below `num_symbols`).
search_automaton build_search_automaton(const std::vector<std::vector<std::uint32_t>>& literals,
                                        std::uint32_t num_symbols);

}  // namespace di::grammar::detail
