// Subset construction of each rule's NFA over byte classes and rule calls, pruning of states
// that can never finish the rule, and assembly of the global automaton (automaton_builder).
#include "common/error.hpp"
#include "runtime/grammar/compile_interrupt.hpp"
#include "runtime/grammar/detail/automaton_builder.hpp"

#include <algorithm>
#include <map>
#include <unordered_set>

namespace di::grammar {

namespace {

std::size_t hash_set(const std::vector<std::uint32_t>& v) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::uint32_t x : v) h = (h ^ x) * 1099511628211ull;
  return std::size_t(h);
}

/// The DFA states' NFA state sets, each stored once (a set is looked up by its contents, kept
/// by its index): sets of a search pattern's padded start grow with the text it has matched
/// (a^n: sizes 1..n), so a second copy as a map key doubled the peak memory.
struct set_table {
  std::vector<std::vector<std::uint32_t>> sets;
  std::vector<std::size_t> hashes;
  struct lookup {
    const std::vector<std::uint32_t>* set;
    std::size_t hash;
  };
  struct hasher {
    using is_transparent = void;
    const set_table* t;
    std::size_t operator()(std::uint32_t i) const { return t->hashes[i]; }
    std::size_t operator()(const lookup& l) const { return l.hash; }
  };
  struct equal {
    using is_transparent = void;
    const set_table* t;
    bool operator()(std::uint32_t a, std::uint32_t b) const { return a == b; }
    bool operator()(const lookup& l, std::uint32_t i) const { return *l.set == t->sets[i]; }
    bool operator()(std::uint32_t i, const lookup& l) const { return *l.set == t->sets[i]; }
  };
  std::unordered_set<std::uint32_t, hasher, equal> ids{16, hasher{this}, equal{this}};

  set_table() = default;
  set_table(const set_table&) = delete;
  set_table& operator=(const set_table&) = delete;

  /// The index of `set` (sorted), added with the next index if new.
  std::uint32_t intern(const std::vector<std::uint32_t>& set) {
    const std::size_t h = hash_set(set);
    auto it = ids.find(lookup{&set, h});
    if (it != ids.end()) return *it;
    const auto id = std::uint32_t(sets.size());
    // A copy of exact size: a bucket's spare capacity stays behind.
    sets.emplace_back(set.begin(), set.end());
    hashes.push_back(h);
    ids.insert(id);
    return id;
  }
};

}  // namespace

bool automaton_builder::determinize(std::uint32_t start, std::uint32_t accept,
                                    const std::string& rule_name, local_dfa& out) {
  const std::size_t num_classes = class_rep_.size();
  set_table table;
  const std::vector<std::vector<std::uint32_t>>& sets = table.sets;
  std::size_t num_kept = 0, num_visited = 0;  // NFA states in the sets kept / formed
  // A transition's target before closure is most often one NFA state (the state after a byte
  // edge): its set is remembered by that state, so that the many transitions into it (every
  // state of a literal search automaton falls back to a few) form it once. Counted as formed.
  std::vector<std::uint32_t> set_of_single(nfa_.size(), UINT32_MAX);
  auto intern = [&](std::vector<std::uint32_t>& set) -> std::uint32_t {
    std::uint32_t* single = set.size() == 1 ? &set_of_single[set[0]] : nullptr;
    if (single && *single != UINT32_MAX) {
      num_visited += sets[*single].size();
      check_subset_budget(rule_name, num_kept, num_visited);
      return *single;
    }
    closure(set);
    // Counted per set, not per DFA state: one state of a^n searched holds n NFA states.
    const std::size_t num_sets = sets.size();
    const std::uint32_t id = table.intern(set);
    num_visited += set.size();
    if (sets.size() > num_sets) num_kept += set.size();
    check_subset_budget(rule_name, num_kept, num_visited);
    if (single) *single = id;
    return id;
  };
  std::vector<std::uint32_t> init{start};
  intern(init);
  std::vector<std::vector<std::uint32_t>> bucket(num_classes);
  std::vector<std::uint8_t> touched;
  for (std::size_t d = 0; d < sets.size(); ++d) {
    if (sets.size() > options_.max_rule_states + automaton_states_) return false;
    if (d % 256 == 0) check_interrupt();
    out.trans.resize((d + 1) * num_classes, k_dead_state);
    out.final.push_back(std::binary_search(sets[d].begin(), sets[d].end(), accept));
    touched.clear();
    std::map<std::uint32_t, std::vector<std::uint32_t>> call_targets;
    for (std::uint32_t s : sets[d]) {
      for (auto [set, t] : nfa_[s].bytes)
        for (std::uint8_t c : set_classes_[set]) {
          if (bucket[c].empty()) touched.push_back(c);
          bucket[c].push_back(t);
        }
      for (auto [rule, t] : nfa_[s].calls) call_targets[rule].push_back(t);
    }
    for (std::uint8_t c : touched) {
      std::uint32_t id = intern(bucket[c]);
      out.trans[d * num_classes + c] = id;
      bucket[c].clear();
    }
    std::vector<call_edge> calls;
    for (auto& [rule, targets] : call_targets) calls.push_back({rule, intern(targets)});
    out.calls.push_back(std::move(calls));
  }
  return true;
}

void automaton_builder::check_subset_budget(const std::string& rule_name, std::size_t num_kept,
                                            std::size_t num_visited) const {
  const bool memory = num_kept > options_.max_subset_size;
  if (!memory && num_visited <= options_.max_subset_work) return;
  DI_FAIL(
      "grammar too complex: building the automaton of rule '{}' {} more than {} NFA states {}, "
      "the limit. A pattern matched anywhere (JSON Schema `pattern` without ^...$) whose text "
      "overlaps itself, like 'aaaa...' under (?i) or as classes, or after '.*', costs the "
      "square of its length: anchor it with ^ and $ or shorten it",
      rule_name, memory ? "keeps" : "visits",
      memory ? options_.max_subset_size : options_.max_subset_work,
      memory ? "in its distinct state sets (memory)"
             : "summed over the state sets it forms, one per transition (time)");
}

void automaton_builder::prune(local_dfa& d) {
  const std::size_t num_classes = class_rep_.size();
  const std::size_t n = d.final.size();
  std::vector<std::vector<std::uint32_t>> rev(n);
  for (std::size_t s = 0; s < n; ++s) {
    for (std::size_t c = 0; c < num_classes; ++c)
      if (d.trans[s * num_classes + c] != k_dead_state)
        rev[d.trans[s * num_classes + c]].push_back(std::uint32_t(s));
    for (const auto& e : d.calls[s]) rev[e.target].push_back(std::uint32_t(s));
  }
  std::vector<std::uint8_t> live(n, 0);
  std::vector<std::uint32_t> stack;
  for (std::size_t s = 0; s < n; ++s)
    if (d.final[s]) live[s] = 1, stack.push_back(std::uint32_t(s));
  while (!stack.empty()) {
    std::uint32_t s = stack.back();
    stack.pop_back();
    for (std::uint32_t p : rev[s])
      if (!live[p]) live[p] = 1, stack.push_back(p);
  }
  for (std::size_t s = 0; s < n; ++s) {
    for (std::size_t c = 0; c < num_classes; ++c) {
      state_id& t = d.trans[s * num_classes + c];
      if (t != k_dead_state && !live[t]) t = k_dead_state;
    }
    auto& calls = d.calls[s];
    calls.erase(std::remove_if(calls.begin(), calls.end(),
                               [&](const call_edge& e) { return !live[e.target]; }),
                calls.end());
  }
}

void automaton_builder::compile_job(std::uint32_t index) {
  for (bool outline : {false, true}) {
    jobs_[index].outline = outline;
    job j = jobs_[index];
    nfa_.clear();
    automaton_states_ = 0;
    std::uint32_t start = new_nfa_state();
    std::uint32_t accept = new_nfa_state();
    fragment top{accept, {}, {}};
    // A rule of a regular component loops back to its own start when it tail-calls itself.
    if (auto ir = j.ir_rule; ir && analysis_.regular[*ir] && !outline) top.starts[*ir] = start;
    std::uint32_t end = j.ir_rule ? emit_rule_body(*j.ir_rule, start, j, 0, true, top)
                                  : emit(j.body, start, j, 0, true, top);
    nfa_[end].eps.push_back(accept);
    build_pending(j, top);
    local_dfa d;
    if (determinize(start, accept, j.name, d)) {
      prune(d);
      dfas_[index] = std::move(d);
      return;
    }
  }
  DI_FAIL(
      "grammar too complex: rule '{}' needs more than {} automaton states even after "
      "splitting it into sub-rules",
      jobs_[index].name, options_.max_rule_states);
}

void automaton_builder::append(std::uint32_t rule, const local_dfa& d) {
  compiled_grammar& g = *out_;
  const std::size_t num_classes = class_rep_.size();
  const state_id base = state_id(g.state_rule_.size());
  const std::size_t n = d.final.size();
  g.rule_start_[rule] = base;
  for (std::size_t s = 0; s < n; ++s) {
    g.state_rule_.push_back(rule);
    g.final_.push_back(d.final[s]);
    bool any = false;
    for (std::size_t c = 0; c < num_classes && !any; ++c)
      any = d.trans[s * num_classes + c] != k_dead_state;
    if (any) {
      g.row_.push_back(std::uint32_t(g.table_.size() / num_classes));
      for (std::size_t c = 0; c < num_classes; ++c) {
        state_id t = d.trans[s * num_classes + c];
        g.table_.push_back(t == k_dead_state ? k_dead_state : base + t);
      }
    } else {
      g.row_.push_back(UINT32_MAX);
    }
    for (const auto& e : d.calls[s]) g.calls_.push_back({e.rule, base + e.target});
    g.call_begin_.push_back(std::uint32_t(g.calls_.size()));
  }
}

std::shared_ptr<compiled_grammar> automaton_builder::build() {
  compute_byte_classes();
  out_ = std::make_shared<compiled_grammar>();
  rule_for_ir(g_.root());
  std::size_t total = 0;  // states of the rules compiled so far (each job fills only its own)
  for (std::uint32_t i = 0; i < jobs_.size(); ++i) {
    dfas_.resize(jobs_.size());
    compile_job(i);
    dfas_.resize(jobs_.size());
    total += dfas_[i].final.size();
    DI_CHECK(total <= options_.max_total_states,
             "grammar too large: more than {} automaton states in total",
             options_.max_total_states);
  }
  compiled_grammar& g = *out_;
  g.num_classes_ = int(class_rep_.size());
  std::copy(class_of_, class_of_ + 256, g.class_of_);
  g.rule_start_.assign(jobs_.size(), 0);
  g.call_begin_.push_back(0);
  for (std::uint32_t r = 0; r < jobs_.size(); ++r) {
    append(r, dfas_[r]);
    g.rule_names_.push_back(jobs_[r].name);
  }
  for (const auto& s : sets_) g.alphabet_ |= s;
  g.root_ = 0;
  g.analyze();
  return out_;
}

}  // namespace di::grammar
