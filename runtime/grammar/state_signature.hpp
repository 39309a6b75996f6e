// Structural signatures of automaton states: two states with the same signature are
// bisimilar (same finality and follow set of their rule, byte transitions into equal
// signatures, calls of rules whose start states and return targets have equal signatures),
// so the token walk from them gives the same token classes. Computed by partition refinement
// with 128-bit hashes that do not depend on state or byte-class numbering, they let one
// classification serve every equivalent state of a grammar, and of other grammars over the
// same vocabulary (token_class_cache).
#pragma once

#include "runtime/grammar/compiled_grammar.hpp"

#include <cstdint>
#include <functional>
#include <vector>

namespace di::grammar {

struct state_signature {
  std::uint64_t a = 0, b = 0;
  bool operator==(const state_signature&) const = default;
};

struct state_signature_hash {
  std::size_t operator()(const state_signature& s) const {
    return std::size_t(s.a ^ (s.b * 0x9E3779B97F4A7C15ull));
  }
};

/// Signatures of every state, or an empty vector when refinement does not settle within
/// `max_work` state-transition visits (then states are classified one by one).
std::vector<state_signature> compute_state_signatures(const compiled_grammar& g,
                                                      std::size_t max_work = 200'000'000);

/// Classes of states whose token classes are equal for tokens of at most `max_token_bytes`
/// bytes (the longest token of the vocabulary): states equal in their first `max_token_bytes`
/// bytes of behaviour share one, so the states of a string with 300 characters left and one
/// with 200 left merge. Returns, per state, the first state of its class. Byte transitions are
/// refined for at most `max_token_bytes` rounds; calls compare exactly, by `exact` signatures
/// when given (compute_state_signatures) or else by state identity. Grammar-local.
std::vector<state_id> token_equivalence_classes(const compiled_grammar& g,
                                                const std::vector<state_signature>& exact,
                                                std::uint32_t max_token_bytes);

}  // namespace di::grammar
