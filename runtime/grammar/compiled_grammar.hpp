// A grammar compiled for parsing: every rule body becomes a deterministic automaton over byte
// classes and rule calls, all automata share one state numbering, and the analyses the parser
// and the token-mask precomputation need (nullable rules, first bytes, follow sets) are done.
// Immutable after compile(); shared by every matcher of the grammar.
#pragma once

#include "common/error.hpp"
#include "runtime/grammar/grammar.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace di::grammar {

class compile_cancel;  // compile_interrupt.hpp

using state_id = std::uint32_t;
constexpr state_id k_dead_state = UINT32_MAX;

/// Compiling a grammar that matches no string at all (its root never ends): thrown as its own
/// type so that a front end can say why in its own terms (a JSON Schema that allows no value).
class empty_language_error : public di::error {
 public:
  using di::error::error;
};

/// How to compile. The limits turn hostile grammars into clear errors.
struct compile_options {
  /// Inline a non-recursive rule at each use when its automaton has at most this many states
  /// (fewer rule boundaries means more tokens decided without the parser stack).
  std::size_t inline_limit = 4000;
  /// The same for a regular (right-recursive) component, expanded as a loop.
  std::size_t regular_inline_limit = 200'000;
  /// Expanded size (NFA states) of one rule, repetitions unrolled.
  std::size_t max_rule_size = 2'000'000;
  /// A repetition whose copies would exceed this many states repeats a sub-rule call instead.
  std::size_t max_repeat_expansion = 60'000;
  /// Deterministic states of one rule before its choices and loops move into sub-rules.
  std::size_t max_rule_states = 50'000;
  /// Subset construction of one rule, where few states hold large NFA state sets (a long
  /// pattern searched anywhere that overlaps itself, `(?i)aaaa...`: the square of its length).
  /// Memory: NFA states summed over the distinct sets kept (4 bytes each; no grammar of the
  /// test corpora keeps more than 4.5 million in all its rules).
  std::size_t max_subset_size = 16'000'000;
  /// Time: NFA states summed over every set formed, one per transition followed (~25 ns each;
  /// the corpora's most, 42 million, is a patternProperties of \p{Letter}).
  std::size_t max_subset_work = 100'000'000;
  /// Compile a grammar that matches nothing (e.g. the JSON Schema `false`) instead of failing.
  bool allow_empty_language = false;
  /// Deterministic states in total. compile() first tries generous inlining within a quarter
  /// of this and of max_rule_size, then lean inlining (rules called, not copied) within all.
  std::size_t max_total_states = 1'000'000;
  /// Stops the compile (compile_interrupted, nothing kept) once it says so: a deadline, or
  /// cancel() from another thread. Null: only the conditions of the thread's interrupt_scope,
  /// if any. Must outlive the compile.
  const compile_cancel* cancel = nullptr;
};

/// What compile() checks `g` for first, without building anything: every rule the root reaches
/// is defined (di::error) and the root derives some string (empty_language_error). For a
/// grammar that is compiled only as a part of another (free_text_prefix.hpp), which may match
/// strings although the part matches none.
void check_derives_some_string(const grammar& g);

/// A transition on a rule: from a state, recognizing `rule` leads to `target`.
struct call_edge {
  rule_id rule;
  state_id target;
};

class compiled_grammar {
 public:
  /// Compiles `g` (validated: every referenced rule defined, the root derives some string).
  static std::shared_ptr<const compiled_grammar> compile(const grammar& g,
                                                         const compile_options& options = {});
  /// How many times compile() has been called on this thread (a statistic: tests count the
  /// compiles a response format costs).
  static std::uint64_t num_compiles_on_this_thread();

  // --- states ---
  std::size_t num_states() const { return state_rule_.size(); }
  rule_id rule_of(state_id s) const { return state_rule_[s]; }
  /// The rule may end in `s`.
  bool is_final(state_id s) const { return final_[s] != 0; }
  /// `s` has at least one byte transition.
  bool has_bytes(state_id s) const { return row_[s] != UINT32_MAX; }
  /// The state after byte `b`, or k_dead_state.
  state_id next(state_id s, std::uint8_t b) const {
    std::uint32_t row = row_[s];
    return row == UINT32_MAX ? k_dead_state
                             : table_[std::size_t(row) * num_classes_ + class_of_[b]];
  }
  std::span<const call_edge> calls(state_id s) const {
    return {calls_.data() + call_begin_[s], call_begin_[s + 1] - call_begin_[s]};
  }
  /// Bytes that can come next from `s` inside its rule (through calls too), and whether the
  /// rule can end there without reading a byte.
  const byte_set& first_bytes(state_id s) const { return first_[s]; }
  bool can_end(state_id s) const { return can_end_[s] != 0; }

  // --- rules ---
  std::size_t num_rules() const { return rule_start_.size(); }
  rule_id root() const { return root_; }
  state_id start(rule_id r) const { return rule_start_[r]; }
  bool nullable(rule_id r) const { return nullable_[r] != 0; }
  /// Bytes that may follow a completed `r`, and whether the input may end after it.
  const byte_set& follow(rule_id r) const { return follow_[r]; }
  bool follow_end(rule_id r) const { return follow_end_[r] != 0; }
  const std::string& rule_name(rule_id r) const { return rule_names_[r]; }

  int num_byte_classes() const { return num_classes_; }
  std::uint8_t byte_class(std::uint8_t b) const { return class_of_[b]; }
  /// Bytes used by transitions anywhere (a token with another byte is never accepted).
  const byte_set& alphabet() const { return alphabet_; }
  /// Approximate heap bytes held.
  std::size_t memory_bytes() const;

 private:
  friend class automaton_builder;
  void analyze();
  void compute_first();
  void compute_follow();

  // Per state.
  std::vector<rule_id> state_rule_;
  std::vector<std::uint8_t> final_;
  std::vector<std::uint32_t> row_;         // row in table_, or UINT32_MAX
  std::vector<std::uint32_t> call_begin_;  // [num_states + 1] into calls_
  std::vector<call_edge> calls_;
  std::vector<byte_set> first_;
  std::vector<std::uint8_t> can_end_;
  std::vector<state_id> table_;  // [num_rows * num_classes_]
  // Per rule.
  std::vector<state_id> rule_start_;
  std::vector<std::uint8_t> nullable_;
  std::vector<byte_set> follow_;
  std::vector<std::uint8_t> follow_end_;
  std::vector<std::string> rule_names_;
  rule_id root_ = 0;
  // Bytes.
  int num_classes_ = 0;
  std::uint8_t class_of_[256] = {};
  byte_set alphabet_;
};

}  // namespace di::grammar
