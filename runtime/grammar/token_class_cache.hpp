// Token classes shared across grammars over one vocabulary, keyed by sharing key
// (state_signature.hpp: a hash of the state's reachable part of the automaton): the states
// common to most JSON grammars (inside a string, a number, whitespace) are classified once per
// process instead of once per grammar. Thread-safe;
// stops taking entries past its memory budget.
#pragma once

#include "runtime/grammar/state_signature.hpp"
#include "runtime/grammar/token_classes.hpp"

#include <memory>
#include <mutex>
#include <unordered_map>

namespace di::grammar {

class token_class_cache {
 public:
  explicit token_class_cache(std::size_t max_bytes = std::size_t(256) << 20) : max_bytes_(max_bytes) {}

  std::shared_ptr<const state_tokens> find(const state_signature& s) const;
  /// Keeps `t` under `s` unless the budget is spent; returns the entry now stored (the earlier
  /// one if another thread was first), or `t` itself.
  std::shared_ptr<const state_tokens> insert(const state_signature& s, std::shared_ptr<const state_tokens> t);
  std::size_t size() const;
  std::size_t memory_bytes() const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<state_signature, std::shared_ptr<const state_tokens>, state_signature_hash> entries_;
  std::size_t bytes_ = 0;
  std::size_t max_bytes_;
};

}  // namespace di::grammar
