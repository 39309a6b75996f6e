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
  /// [num_rules] NFA states of the rule with inlinable callees expanded (saturating): its own
  /// body plus one shared copy of every rule reachable through tail references.
  std::vector<std::uint64_t> size;
  std::vector<std::uint64_t> own_size;             ///< [num_rules] the body alone
  std::vector<std::vector<rule_id>> tail_refs;     ///< [num_rules] expandable rules in tail position
  /// [num_rules] the rule is expanded in place at each use.
  std::vector<std::uint8_t> inlined;
  /// [num_rules] component of the rule in the reference graph (rules of one recursive cycle
  /// share it), and whether that component is regular: every reference between its members
  /// is a tail reference (right-linear recursion, e.g. `s ::= "" | [a-z] s`), so it compiles
  /// to a loop inside the caller's automaton instead of parser calls.
  std::vector<std::uint32_t> component;
  std::vector<std::uint8_t> regular;
};

/// Checks that every reachable reference names a defined rule and that the root derives a
/// string unless `allow_empty` (di::error otherwise), then fills the analysis. Rules over `inline_limit` states,
/// recursive rules and the root are never inlined.
grammar_analysis analyze_grammar(const grammar& g, std::uint64_t inline_limit,
                                 std::uint64_t regular_inline_limit, bool allow_empty = false);

/// The first checks of analyze_grammar alone: every reachable reference names a defined rule
/// (di::error) and the root derives a string (empty_language_error).
void check_derives_some_string(const grammar& g);

/// Whether `id` derives some string, given the rules already known to be productive.
bool expr_productive(const grammar& g, expr_id id, const std::vector<std::uint8_t>& productive);

/// NFA size of `id`, expanding references to inlined or regular rules (sizes given). A
/// reference in tail position (nothing follows it in the rule) shares one copy of its rule per
/// automaton: it counts 1 here and is collected in `tail_refs` to be counted once overall.
std::uint64_t expr_size(const grammar& g, expr_id id, const grammar_analysis& a, bool tail,
                        std::vector<rule_id>& tail_refs, std::uint32_t component);

}  // namespace di::grammar::detail
