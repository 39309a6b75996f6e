// Token classes of one automaton state: which tokens are accepted from it whatever the parser
// stack holds (the rule instance alone consumes all their bytes), and which are uncertain (the
// instance can end inside the token and the rest depends on the rules that called it). All
// other tokens are rejected there. Computed by walking the token trie with a rule-local parse;
// inside a rule's DFA the walk is a table lookup per trie node, not a parser step.
#pragma once

#include "runtime/grammar/compiled_grammar.hpp"
#include "runtime/grammar/earley_parser.hpp"
#include "runtime/grammar/token_vocabulary.hpp"

#include <cstdint>
#include <span>
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
  struct frame {
    node_id end;         // one past the node's subtree
    state_id dfa_state;  // k_dead_state for a parser frame
    std::uint32_t origin;
    bool pushed;  // the frame pushed a parser set
  };
  bool pure(state_id s) const { return g_.calls(s).empty() && !g_.is_final(s); }
  bool step(const frame* parent, node_id n, frame& out);
  state_tokens finish(state_id s, std::vector<node_id>& accepted,
                      std::vector<std::pair<node_id, node_id>>& exits) const;

  const compiled_grammar& g_;
  const token_vocabulary& v_;
  earley_parser parser_;
};

}  // namespace di::grammar
