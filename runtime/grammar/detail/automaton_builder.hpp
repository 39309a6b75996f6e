// Builds a compiled_grammar from the IR: byte classes, one Thompson NFA per compiled rule
// (non-recursive small callees inlined), subset construction to a DFA over byte classes and
// rule calls, pruning of states that cannot finish, and the global state numbering. A rule
// whose DFA explodes is rebuilt with its choices and loops moved into sub-rules (the parser
// then carries that nondeterminism instead of the automaton).
#pragma once

#include "runtime/grammar/compiled_grammar.hpp"
#include "runtime/grammar/detail/grammar_analysis.hpp"

#include <optional>
#include <unordered_map>

namespace di::grammar {

class automaton_builder {
 public:
  automaton_builder(const grammar& g, const compile_options& options);
  std::shared_ptr<compiled_grammar> build();

 private:
  struct job {
    std::string name;
    expr_id body;
    bool outline = false;
    std::optional<rule_id> ir_rule;  ///< the grammar rule it compiles (none: an outlined part)
  };
  struct nfa_state {
    std::vector<std::uint32_t> eps;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> bytes;  // (byte set index, target)
    std::vector<std::pair<std::uint32_t, std::uint32_t>> calls;  // (compiled rule, target)
  };
  /// Where tail references lead: a fragment's exit state, and the shared copy of each rule
  /// already built in tail position of this fragment (members of a regular component loop
  /// back to their copy).
  struct fragment {
    std::uint32_t exit;
    std::unordered_map<rule_id, std::uint32_t> starts;
    /// Copies started (in `starts`) whose bodies are not built yet, with their inlining depth:
    /// build_pending() builds them in a loop, as recursion a chain of n right-linear rules
    /// (a KMP automaton's states) nested n deep.
    std::vector<std::pair<rule_id, int>> pending;
  };
  struct local_dfa {
    std::vector<std::uint8_t> final;
    std::vector<std::uint32_t> trans;  // [states * num_classes]
    std::vector<std::vector<call_edge>> calls;
  };

  void compute_byte_classes();
  std::uint32_t byte_set_index(const byte_set& s);
  std::uint32_t rule_for_ir(rule_id r);
  std::uint32_t rule_for_expr(expr_id body, const std::string& name);
  std::uint32_t new_nfa_state();
  /// Adds the NFA of `id` starting at `from`; returns its end state. `tail`: nothing follows
  /// in the rule, so an inlined rule there is built once and shared (right-linear rules, like
  /// the chains the JSON Schema compiler emits for optional properties, stay linear).
  std::uint32_t emit(expr_id id, std::uint32_t from, const job& j, int depth, bool tail,
                     fragment& f);
  std::uint32_t emit_ref(const expr& e, std::uint32_t from, const job& j, int depth, bool tail,
                         fragment& f);
  std::uint32_t emit_tail_copy(rule_id r, std::uint32_t from, const job& j, int depth, fragment& f);
  /// Rule `r`'s body from `from` (its automaton where it has one); returns its end state.
  std::uint32_t emit_rule_body(rule_id r, std::uint32_t from, const job& j, int depth, bool tail,
                               fragment& f);
  /// A symbol_automaton from `from`, a state of it per NFA state (deterministic: subset
  /// construction keeps one state set per automaton state); returns its end state.
  std::uint32_t emit_automaton(const symbol_automaton& a, std::uint32_t from, const job& j,
                               int depth, fragment& f);
  void build_pending(const job& j, fragment& f);
  std::uint32_t emit_repeat(const expr& e, std::uint32_t from, const job& j, int depth, fragment& f);
  bool outline_child(expr_id child, const job& j, std::uint32_t from, std::uint32_t& end);
  void closure(std::vector<std::uint32_t>& set);
  /// Subset construction of the NFA from `start`; false past max_rule_states, di::error past
  /// max_subset_size or max_subset_work.
  bool determinize(std::uint32_t start, std::uint32_t accept, const std::string& rule_name,
                   local_dfa& out);
  /// di::error where a rule's subset construction keeps more NFA states in its distinct sets
  /// than max_subset_size or forms sets of more than max_subset_work in all.
  void check_subset_budget(const std::string& rule_name, std::size_t num_kept,
                           std::size_t num_visited) const;
  void prune(local_dfa& d);
  void append(std::uint32_t rule, const local_dfa& d);
  void compile_job(std::uint32_t index);

  const grammar& g_;
  compile_options options_;
  detail::grammar_analysis analysis_;
  std::vector<job> jobs_;
  std::unordered_map<rule_id, std::uint32_t> ir_rule_job_;
  std::unordered_map<expr_id, std::uint32_t> expr_job_;
  std::vector<nfa_state> nfa_;
  int emit_depth_ = 0;
  std::uint32_t accept_ = 0;                               // accept state of the NFA in progress
  // States of the automata (symbol_automaton) in the NFA in progress: its DFA may have as many
  // more than max_rule_states (they are what the grammar asks for, not a blow-up).
  std::size_t automaton_states_ = 0;
  std::unordered_map<rule_id, std::uint32_t> tail_start_;  // shared tail fragments
  std::vector<std::uint32_t> mark_;                        // closure visit stamps
  std::uint32_t stamp_ = 0;
  std::vector<byte_set> sets_;
  std::vector<std::vector<std::uint8_t>> set_classes_;  // classes inside each byte set
  std::unordered_map<std::string, std::uint32_t> set_index_;
  std::uint8_t class_of_[256] = {};
  std::vector<std::uint8_t> class_rep_;
  std::vector<local_dfa> dfas_;
  std::shared_ptr<compiled_grammar> out_;
};

}  // namespace di::grammar
