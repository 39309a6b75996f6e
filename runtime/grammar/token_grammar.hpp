// A compiled grammar bound to a vocabulary: the automaton, the token trie and the per-state
// token classes, computed eagerly at creation (precompute) or on first use and then shared by
// every matcher of the grammar (publication is lock-free and thread-safe). States that behave
// alike for inputs as long as the longest token share one classification within the grammar
// (token_equivalence_classes); states whose reachable parts are isomorphic (sharing_keys) share
// it, through an optional token_class_cache, with other grammars over the same vocabulary.
#pragma once

#include "runtime/grammar/compiled_grammar.hpp"
#include "runtime/grammar/state_signature.hpp"
#include "runtime/grammar/token_class_cache.hpp"
#include "runtime/grammar/token_classes.hpp"
#include "runtime/grammar/token_vocabulary.hpp"

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

namespace di::grammar {

class token_grammar {
 public:
  /// `precompute`: classify every state now (compile time) instead of on first use. `shared`:
  /// classes computed for other grammars over the same vocabulary (may be null).
  static std::shared_ptr<const token_grammar> create(
      std::shared_ptr<const compiled_grammar> g, std::shared_ptr<const token_vocabulary> v,
      bool precompute = true, std::shared_ptr<token_class_cache> shared = nullptr);
  ~token_grammar();
  token_grammar(const token_grammar&) = delete;
  token_grammar& operator=(const token_grammar&) = delete;

  const compiled_grammar& automaton() const { return *g_; }
  const token_vocabulary& vocabulary() const { return *v_; }
  /// Token classes of state `s`, computing them with `scratch` the first time.
  const state_tokens& tokens_at(state_id s, token_classifier& scratch) const;
  /// Classifies the states not classified yet (those that read bytes or call rules), in state
  /// order, until all are or `budget_s` seconds have passed (checked after each state, so one
  /// slow state may overrun it); true when every state is classified. What precompute does at
  /// creation, for a grammar created lazily; thread-safe like tokens_at.
  bool classify_states(double budget_s) const;
  std::size_t num_classified() const;
  /// Distinct states up to equivalence (num_states() when signatures were not computed).
  std::size_t num_distinct_states() const { return num_distinct_; }
  std::size_t memory_bytes() const;

 private:
  token_grammar(std::shared_ptr<const compiled_grammar> g,
                std::shared_ptr<const token_vocabulary> v);

  std::shared_ptr<const compiled_grammar> g_;
  std::shared_ptr<const token_vocabulary> v_;
  const state_tokens& classify(state_id rep, token_classifier& scratch) const;
  /// States from `first` on that read bytes or call rules and are not classified yet.
  std::size_t num_unclassified_from(state_id first) const;

  std::unique_ptr<std::atomic<const state_tokens*>[]> cache_;  // [num_states], by representative
  std::vector<state_id>
      rep_;  // [num_states] first state of its token class (token_equivalence_classes)
  std::vector<state_signature> signatures_;  // [num_states] or empty; only during create()
  std::vector<std::optional<state_signature>> share_keys_;  // [num_states] with a shared cache
  std::size_t num_distinct_ = 0;
  std::shared_ptr<token_class_cache> shared_;
  mutable std::mutex owned_mutex_;
  mutable std::vector<std::shared_ptr<const state_tokens>> owned_;  // keeps cache_ entries alive
};

}  // namespace di::grammar
