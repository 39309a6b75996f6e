// Structural signatures of automaton states: two states with the same signature are
// bisimilar (same finality and follow set of their rule, byte transitions into equal
// signatures, calls of rules whose start states and return targets have equal signatures),
// so the token walk from them gives the same token classes. Computed by partition refinement
// with 128-bit hashes that do not depend on state or byte-class numbering, they let one
// classification serve every equivalent state of a grammar. Across grammars they are not
// enough (refinement that settles after k rounds in one grammar proves only k-step equivalence
// to a state of another: `a a b*` and `a a a*` agree for two rounds); sharing_keys() gives the
// keys of the cross-grammar token_class_cache.
#pragma once

#include "runtime/grammar/compiled_grammar.hpp"

#include <cstdint>
#include <functional>
#include <optional>
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

/// Keys under which the token classes of a state may be shared with other grammars: a hash of
/// the canonical form of the part of the quotient automaton (states merged by their `exact`
/// signatures) reachable from the state through byte edges and calls — each class's finality,
/// rule follow set and end flag, its byte edges with their byte sets, its calls with callee
/// start and return target — with classes numbered in discovery order. Equal keys mean
/// isomorphic reachable parts, hence equal token classes, in any two grammars. Computed for the
/// states with `wanted[s]`; a state whose reachable part has more than `max_classes` classes
/// (or any state, when `exact` is empty) gets none.
std::vector<std::optional<state_signature>> sharing_keys(const compiled_grammar& g,
                                                         const std::vector<state_signature>& exact,
                                                         const std::vector<bool>& wanted,
                                                         std::size_t max_classes = 512);

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
