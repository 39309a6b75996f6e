// A compiled grammar bound to a vocabulary: the automaton, the token trie and the per-state
// token classes, computed eagerly at creation (precompute) or on first use and then shared by
// every matcher of the grammar (publication is lock-free and thread-safe).
#pragma once

#include "runtime/grammar/compiled_grammar.hpp"
#include "runtime/grammar/token_classes.hpp"
#include "runtime/grammar/token_vocabulary.hpp"

#include <atomic>
#include <memory>

namespace di::grammar {

class token_grammar {
 public:
  /// `precompute`: classify every state now (compile time) instead of on first use.
  static std::shared_ptr<const token_grammar> create(std::shared_ptr<const compiled_grammar> g,
                                                     std::shared_ptr<const token_vocabulary> v,
                                                     bool precompute = true);
  ~token_grammar();
  token_grammar(const token_grammar&) = delete;
  token_grammar& operator=(const token_grammar&) = delete;

  const compiled_grammar& automaton() const { return *g_; }
  const token_vocabulary& vocabulary() const { return *v_; }
  /// Token classes of state `s`, computing them with `scratch` the first time.
  const state_tokens& tokens_at(state_id s, token_classifier& scratch) const;
  std::size_t num_classified() const;
  std::size_t memory_bytes() const;

 private:
  token_grammar(std::shared_ptr<const compiled_grammar> g,
                std::shared_ptr<const token_vocabulary> v);

  std::shared_ptr<const compiled_grammar> g_;
  std::shared_ptr<const token_vocabulary> v_;
  std::unique_ptr<std::atomic<const state_tokens*>[]> cache_;  // [num_states]
};

}  // namespace di::grammar
