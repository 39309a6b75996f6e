// Static analyses of the grammar IR that decide how rules compile: which rules are reachable
// from the root and productive (derive at least one string), which are recursive, and how
// large each rule's automaton would be with its non-recursive callees inlined.
#pragma once

#include "runtime/grammar/grammar.hpp"

#include <cstdint>
#include <vector>

namespace di::grammar::detail {

constexpr std::uint64_t k_size_saturated = UINT64_MAX / 4;

struct grammar_analysis {
  std::vector<std::uint8_t> reachable;   ///< [num_rules] from the root
  std::vector<std::uint8_t> productive;  ///< [num_rules] derives some string
  std::vector<std::uint8_t> recursive;   ///< [num_rules] on a cycle of references
  /// [num_rules] NFA states of the body with inlinable callees expanded (saturating).
  std::vector<std::uint64_t> size;
  /// [num_rules] the rule is expanded in place at each use.
  std::vector<std::uint8_t> inlined;
};

/// Checks that every reachable reference names a defined rule and that the root derives a
/// string (di::error otherwise), then fills the analysis. Rules over `inline_limit` states,
/// recursive rules and the root are never inlined.
grammar_analysis analyze_grammar(const grammar& g, std::uint64_t inline_limit);

/// Whether `id` derives some string, given the rules already known to be productive.
bool expr_productive(const grammar& g, expr_id id, const std::vector<std::uint8_t>& productive);

/// NFA size of `id`, expanding references to rules marked inlined (sizes given). A reference
/// in tail position (nothing follows it in the rule) shares one copy of its rule per rule
/// automaton, so each such rule counts once (`tail_seen` collects them).
std::uint64_t expr_size(const grammar& g, expr_id id, const grammar_analysis& a, bool tail,
                        std::vector<rule_id>& tail_seen);

}  // namespace di::grammar::detail
