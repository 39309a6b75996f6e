// The grammar IR every front end (EBNF, Lark, regex, JSON Schema) produces: rules whose bodies
// are expressions over byte sets, sequences, choices, bounded repetitions and rule references.
// Character classes are lowered to UTF-8 byte sequences on entry, so everything downstream
// (automata, parser, token masks) works on bytes, which is also what tokens are made of.
#pragma once

#include "runtime/grammar/codepoint_set.hpp"

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace di::grammar {

/// A set of byte values.
struct byte_set {
  std::array<std::uint64_t, 4> words{};

  void set(std::uint8_t b) { words[b >> 6] |= std::uint64_t(1) << (b & 63); }
  void set_range(std::uint8_t lo, std::uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) set(std::uint8_t(b));
  }
  bool test(std::uint8_t b) const { return (words[b >> 6] >> (b & 63)) & 1; }
  bool empty() const { return (words[0] | words[1] | words[2] | words[3]) == 0; }
  int count() const;
  byte_set& operator|=(const byte_set& o) {
    for (int i = 0; i < 4; ++i) words[i] |= o.words[i];
    return *this;
  }
  bool operator==(const byte_set&) const = default;
};

using expr_id = std::uint32_t;
using rule_id = std::uint32_t;
constexpr std::uint32_t k_unbounded = UINT32_MAX;

enum class expr_kind : std::uint8_t {
  empty,     ///< the empty string
  bytes,     ///< one byte from `bytes` (an empty set matches nothing)
  sequence,  ///< children one after another
  choice,    ///< any one child
  repeat,    ///< children[0] between `min` and `max` times (max may be k_unbounded)
  rule_ref,  ///< the language of rule `rule`
};

struct expr {
  expr_kind kind = expr_kind::empty;
  std::vector<expr_id> children;
  byte_set bytes;
  rule_id rule = 0;
  std::uint32_t min = 0;
  std::uint32_t max = 0;
};

struct rule {
  std::string name;
  std::optional<expr_id> body;  ///< unset while only declared (a forward reference)
};

/// A rule's language as a deterministic automaton over symbols, which the compiler builds as it
/// is instead of the rule's body (a literal search: regex_search.cpp). The body stays the same
/// language in plain expressions, for everything else that reads the grammar. Symbols are
/// expressions of one character each, of pairwise disjoint character sets (their byte strings
/// are a prefix-free code, each string of one symbol only). From a state, a character of symbol
/// c moves to next[state * symbols + c] (k_none: no move); where a state's exits say, the rule
/// may go on with an exit expression instead and end after it.
struct symbol_automaton {
  static constexpr std::uint32_t k_none = UINT32_MAX;
  std::vector<expr_id> symbols;
  std::vector<std::uint32_t> next;  ///< [num_states * symbols.size()]; state 0 is the start
  std::vector<expr_id> exit_exprs;
  /// [num_states]: the exits (indices into exit_exprs) of each state...
  std::vector<std::vector<std::uint32_t>> exits;
  /// ...and those of this state too (k_none: none), so that chains of suffixes stay linear.
  std::vector<std::uint32_t> exits_also;
  std::size_t num_states() const { return exits.size(); }
};

/// Size limits that make hostile input fail with a clear error instead of exhausting memory.
struct grammar_limits {
  std::size_t max_exprs = 4'000'000;
  std::size_t max_rules = 1'000'000;
};

/// A context-free grammar over bytes. Expressions are interned in one pool; the builders
/// simplify as they go (a one-element sequence is its element, nested choices flatten).
class grammar {
 public:
  explicit grammar(grammar_limits limits = {}) : limits_(limits) {}

  expr_id empty();
  expr_id nothing();  ///< matches no string
  expr_id bytes(const byte_set& set);
  expr_id byte_range(std::uint8_t lo, std::uint8_t hi);
  /// The exact bytes of `text`.
  expr_id literal(std::string_view text);
  /// One code point from `set`, as its UTF-8 encodings.
  expr_id codepoints(const codepoint_set& set);
  expr_id sequence(std::vector<expr_id> items);
  expr_id choice(std::vector<expr_id> items);
  expr_id repeat(expr_id item, std::uint32_t min, std::uint32_t max);
  expr_id optional(expr_id item) { return repeat(item, 0, 1); }
  expr_id ref(rule_id rule);

  /// Declares a rule (or returns the existing one of that name).
  rule_id declare_rule(std::string_view name);
  /// A new rule with a unique name derived from `hint`.
  rule_id fresh_rule(std::string_view hint);
  void define_rule(rule_id id, expr_id body);
  std::optional<rule_id> find_rule(std::string_view name) const;
  /// Compiles rule `id` (defined: its body the same language) as automaton `a`; define_rule
  /// drops it.
  void set_automaton(rule_id id, std::shared_ptr<const symbol_automaton> a);
  /// The automaton rule `id` compiles as, if any.
  const symbol_automaton* automaton(rule_id id) const {
    auto it = automata_.find(id);
    return it == automata_.end() ? nullptr : it->second.get();
  }
  void set_root(rule_id id) { root_ = id; }
  /// Copies every rule of `other` into this grammar under fresh names (`prefix` + its name)
  /// and returns the copy of its root: how one grammar embeds another (a JSON Schema's inside
  /// the tool-call format around it).
  rule_id import_rules(const grammar& other, std::string_view prefix);

  rule_id root() const { return root_; }
  const expr& at(expr_id id) const { return exprs_[id]; }
  const rule& rule_at(rule_id id) const { return rules_[id]; }
  std::size_t num_exprs() const { return exprs_.size(); }
  std::size_t num_rules() const { return rules_.size(); }
  const grammar_limits& limits() const { return limits_; }

  /// EBNF text of the grammar (GBNF syntax, byte escapes for non-ASCII), for debugging.
  std::string to_string() const;
  std::string expr_to_string(expr_id id) const;

 private:
  expr_id add(expr e);

  grammar_limits limits_;
  std::vector<expr> exprs_;
  std::vector<rule> rules_;
  std::unordered_map<std::string, rule_id> by_name_;
  std::unordered_map<rule_id, std::shared_ptr<const symbol_automaton>> automata_;
  rule_id root_ = 0;
  expr_id empty_id_ = UINT32_MAX;
};

}  // namespace di::grammar
