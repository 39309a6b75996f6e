// A byte-level Earley recognizer over the compiled automata: one item set per input byte,
// items are (automaton state, origin set). Handles any context-free grammar (left recursion,
// ambiguity, empty rules via Aycock-Horspool prediction). Sets are kept so that bytes can be
// popped (token rollback, trie walks). Not thread-safe; cheap to create per matcher.
#pragma once

#include "runtime/grammar/compiled_grammar.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace di::grammar {

struct earley_item {
  state_id state;
  std::uint32_t origin;  ///< set index where the item's rule started, or k_outer_origin
};

/// Origin of the item a rule-local parse starts from: its rule began outside the parse.
constexpr std::uint32_t k_outer_origin = UINT32_MAX;

class earley_parser {
 public:
  explicit earley_parser(const compiled_grammar& g);

  /// Starts a parse of the root rule.
  void reset();
  /// Starts a rule-local parse at state `s` whose rule instance began before the input: when
  /// that instance completes, exit_possible() turns true instead of a parent resuming.
  void reset_at(state_id s);

  /// Consumes one byte; returns false and changes nothing when the byte is not allowed.
  bool push(std::uint8_t b);
  /// Pushes a set holding just (s, origin) (closed): what push() yields when the only item of
  /// the current set scans into `s`. Lets walks skip sets for bytes inside one rule's DFA.
  void push_state(state_id s, std::uint32_t origin);
  /// Consumes bytes until one is refused; returns how many were consumed.
  std::size_t push_all(std::string_view bytes);
  /// Drops the last `n` consumed bytes (n <= num_bytes()).
  void pop(std::size_t n = 1);
  std::size_t num_bytes() const { return set_begin_.size() - 2; }

  /// The input so far is a complete sentence of the root rule.
  bool is_accepting() const { return accept_.back() != 0; }
  /// (reset_at parses) the starting rule instance can end exactly here.
  bool exit_possible() const { return exit_.back() != 0; }
  /// Bytes that may come next (empty: only the end of input, or nothing, may follow).
  byte_set next_bytes() const;
  /// Items of the current set.
  std::span<const earley_item> current() const {
    return {items_.data() + set_begin_[set_begin_.size() - 2], items_.data() + set_begin_.back()};
  }
  const compiled_grammar& grammar_automaton() const { return g_; }

 private:
  void begin_set();
  void add(state_id s, std::uint32_t origin);
  void close_set();
  void complete(const earley_item& it, std::uint32_t set);
  void grow_index();

  const compiled_grammar& g_;
  std::vector<earley_item> items_;
  std::vector<std::uint32_t> set_begin_;  // set k = items_[set_begin_[k], set_begin_[k+1])
  std::vector<std::uint8_t> accept_;      // per set
  std::vector<std::uint8_t> exit_;        // per set
  // Open-addressing index of the set under construction (keys stamped per set).
  std::vector<std::uint64_t> index_keys_;
  std::vector<std::uint32_t> index_stamp_;
  std::uint32_t stamp_ = 0;
  std::size_t index_count_ = 0;
};

}  // namespace di::grammar
