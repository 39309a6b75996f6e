// compile() and the fixed-point analyses over the compiled automaton: which states can end
// their rule without reading a byte (through nullable calls), nullable rules, the first bytes
// of every state and the follow bytes of every rule.
#include "runtime/grammar/compiled_grammar.hpp"

#include "common/error.hpp"
#include "runtime/grammar/compile_interrupt.hpp"
#include "runtime/grammar/detail/automaton_builder.hpp"
#include "runtime/grammar/detail/grammar_analysis.hpp"

#include <algorithm>
#include <optional>
#include <string_view>

namespace di::grammar {

namespace {
constexpr std::size_t k_lean_inline_limit = 100;
constexpr std::size_t k_lean_regular_inline_limit = 20'000;
thread_local std::uint64_t compiles_on_this_thread = 0;
}  // namespace

void check_derives_some_string(const grammar& g) {
  detail::check_derives_some_string(g);
}

std::uint64_t compiled_grammar::num_compiles_on_this_thread() {
  return compiles_on_this_thread;
}

std::shared_ptr<const compiled_grammar> compiled_grammar::compile(const grammar& g,
                                                                  const compile_options& options) {
  ++compiles_on_this_thread;
  std::optional<interrupt_scope> cancellable;
  if (options.cancel != nullptr) cancellable.emplace(*options.cancel);
  if (options.inline_limit <= k_lean_inline_limit) return automaton_builder(g, options).build();
  // Generous inlining first (fewer rule boundaries: more tokens decided without the parser
  // stack) within a quarter of the size limits. Inlining copies a rule at every use, so a rule
  // used at many places under others (fan-in) can outgrow the limits although its language is
  // small; such a grammar is compiled again with lean inlining and the full limits.
  compile_options generous = options;
  generous.max_total_states = options.max_total_states / 4;
  generous.max_rule_size = options.max_rule_size / 4;
  try {
    return automaton_builder(g, generous).build();
  } catch (const di::error& e) {
    if (std::string_view(e.what()).find("grammar too large") == std::string_view::npos) throw;
  }
  compile_options lean = options;
  lean.inline_limit = k_lean_inline_limit;
  lean.regular_inline_limit = std::min(options.regular_inline_limit, k_lean_regular_inline_limit);
  return automaton_builder(g, lean).build();
}

void compiled_grammar::analyze() {
  const std::size_t n = num_states();
  can_end_.assign(n, 0);
  nullable_.assign(num_rules(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t i = n; i-- > 0;) {
      // Each pass settles at least one more rule: as many passes as rules, at worst.
      if (i % 4096 == 0) check_interrupt();
      if (can_end_[i]) continue;
      bool end = final_[i] != 0;
      for (const auto& e : calls(state_id(i)))
        end = end || (nullable_[e.rule] && can_end_[e.target]);
      if (end) can_end_[i] = 1, changed = true;
    }
    for (rule_id r = 0; r < num_rules(); ++r) {
      if (!nullable_[r] && can_end_[rule_start_[r]]) nullable_[r] = 1, changed = true;
    }
  }
  compute_first();
  compute_follow();
}

void compiled_grammar::compute_first() {
  const std::size_t n = num_states();
  std::vector<byte_set> class_bytes(static_cast<std::size_t>(num_classes_));
  for (int b = 0; b < 256; ++b) class_bytes[class_of_[b]].set(std::uint8_t(b));
  first_.assign(n, byte_set{});
  for (std::size_t s = 0; s < n; ++s) {
    if (row_[s] == UINT32_MAX) continue;
    for (int c = 0; c < num_classes_; ++c)
      if (table_[std::size_t(row_[s]) * num_classes_ + c] != k_dead_state)
        first_[s] |= class_bytes[c];
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t i = n; i-- > 0;) {
      if (i % 4096 == 0) check_interrupt();
      byte_set f = first_[i];
      for (const auto& e : calls(state_id(i))) {
        f |= first_[rule_start_[e.rule]];
        if (nullable_[e.rule]) f |= first_[e.target];
      }
      if (!(f == first_[i])) first_[i] = f, changed = true;
    }
  }
}

void compiled_grammar::compute_follow() {
  follow_.assign(num_rules(), byte_set{});
  follow_end_.assign(num_rules(), 0);
  follow_end_[root_] = 1;
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t q = 0; q < num_states(); ++q) {
      if (q % 4096 == 0) check_interrupt();
      rule_id owner = state_rule_[q];
      for (const auto& e : calls(state_id(q))) {
        byte_set f = follow_[e.rule];
        f |= first_[e.target];
        bool end = follow_end_[e.rule] != 0;
        if (can_end_[e.target]) {
          f |= follow_[owner];
          end = end || follow_end_[owner];
        }
        if (!(f == follow_[e.rule]) || end != bool(follow_end_[e.rule])) {
          follow_[e.rule] = f;
          follow_end_[e.rule] = end;
          changed = true;
        }
      }
    }
  }
}

std::size_t compiled_grammar::memory_bytes() const {
  return state_rule_.size() * (sizeof(rule_id) + 1 + 4 + 4 + sizeof(byte_set) + 1) +
         calls_.size() * sizeof(call_edge) + table_.size() * sizeof(state_id) +
         rule_start_.size() * (sizeof(state_id) + 2 + sizeof(byte_set));
}

}  // namespace di::grammar
