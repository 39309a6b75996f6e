// Token classes of one automaton state: which tokens are accepted from it whatever the parser
// stack holds (the rule instance alone consumes all their bytes), and which are uncertain (the
// instance can end inside the token and the rest depends on the rules that called it). All
// other tokens are rejected there. Computed by walking the token trie with a rule-local parse;
// inside a rule's DFA the walk is a table lookup per trie node (a tight loop over the pre-order
// node arrays with one DFA state per depth), the Earley parser only past calls and rule ends.
#pragma once

#include "runtime/grammar/compiled_grammar.hpp"
#include "runtime/grammar/earley_parser.hpp"
#include "runtime/grammar/token_vocabulary.hpp"

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace di::grammar {

struct state_tokens {
  std::vector<std::uint32_t> accepted_bits;  ///< mask words, used when many tokens are accepted
  std::vector<token_id> accepted_ids;        ///< ascending, used when few are
  std::vector<node_id> uncertain;            ///< trie nodes, ascending, whose tokens need the stack
  std::size_t num_accepted = 0;

  /// Sets the bits of the accepted tokens in `mask`.
  void or_into(std::span<std::uint32_t> mask) const;
  std::size_t memory_bytes() const;
};

/// Classifies tokens per state. Holds a scratch parser: one per thread.
class token_classifier {
 public:
  token_classifier(const compiled_grammar& g, const token_vocabulary& v);
  state_tokens classify(state_id s);

 private:
  /// Parse stacks, flattened: stack i is data[begin[i], begin[i + 1]); the bottom is a state
  /// of the classified rule instance, the top the current state, those between return targets.
  struct stack_set {
    std::vector<state_id> data;
    std::vector<std::uint32_t> begin{0};
    std::size_t size() const { return begin.size() - 1; }
    std::span<const state_id> at(std::size_t i) const {
      return {data.data() + begin[i], begin[i + 1] - begin[i]};
    }
    void clear() { data.clear(), begin.assign(1, 0); }
    /// Adds `st` unless present; returns whether it was added.
    bool add(std::span<const state_id> st);
    bool add(std::span<const state_id> below, state_id top);
  };

  bool pure(state_id s) const { return pure_[s] != 0; }
  void prepare();
  /// The walk on explicit parse stacks; false when they grow past the limits (left recursion,
  /// deep ambiguity): then walk_parser() does it with the Earley parser.
  bool walk_stacks(state_id s, std::vector<node_id>& accepted,
                   std::vector<std::pair<node_id, node_id>>& exits);
  /// closure_[d] from kernel_[d]: calls entered, finished rules returned from; false on overflow.
  bool close(std::uint32_t d);
  void walk_parser(state_id s, std::vector<node_id>& accepted,
                   std::vector<std::pair<node_id, node_id>>& exits);
  state_tokens finish(state_id s, std::vector<node_id>& accepted,
                      std::vector<std::pair<node_id, node_id>>& exits) const;

  const compiled_grammar& g_;
  const token_vocabulary& v_;
  earley_parser parser_;
  std::vector<std::uint8_t> pure_;  // [num_states] no calls and not final: a DFA step is exact
  // Per trie depth, scratch of the walk: the DFA state reached (k_dead_state: the parser holds
  // the set), its origin, and whether a parser set was pushed for the node at that depth.
  std::vector<state_id> dfa_at_;
  std::vector<std::uint32_t> origin_at_;
  std::vector<std::uint8_t> pushed_at_;
  // Per trie depth, for walk_stacks: the stacks after the node's byte and their closure.
  // (dfa_at_[d] != k_dead_state: one stack, kernel_[base_at_[d]]'s with dfa_at_[d] on top.)
  std::vector<stack_set> kernel_, closure_;
  std::vector<stack_set> closure_src_;  // the kernel closure_[d] was computed from
  std::vector<std::uint32_t> base_at_;
  std::vector<std::uint8_t> closed_at_, exit_at_;
  std::vector<state_id> scratch_;
};

}  // namespace di::grammar
