// Aho-Corasick over symbols: a trie of the literals, then its states in breadth-first order,
// each taking the moves of its failure state (its longest proper suffix in the trie) for the
// symbols it has no child on. See search_automaton.hpp.
#include "runtime/grammar/detail/search_automaton.hpp"

#include "runtime/grammar/compile_interrupt.hpp"

#include <algorithm>
#include <iterator>

namespace di::grammar::detail {

namespace {

std::string key_of(const codepoint_set& set) {
  const auto& r = set.ranges();
  return std::string(reinterpret_cast<const char*>(r.data()), r.size() * sizeof(r[0]));
}

}  // namespace

std::optional<std::uint32_t> search_alphabet::symbol_of(const codepoint_set& set) {
  if (set.empty()) return std::nullopt;
  const std::string key = key_of(set);
  if (auto it = by_key_.find(key); it != by_key_.end()) return it->second;
  for (const codepoint_range& r : set.ranges()) {
    // The last symbol range starting at or before r.hi overlaps r where it reaches r.lo.
    auto it = ranges_.upper_bound(r.hi);
    if (it != ranges_.begin() && std::prev(it)->second >= r.lo) return std::nullopt;
  }
  const auto id = std::uint32_t(symbols_.size());
  for (const codepoint_range& r : set.ranges()) ranges_.emplace(r.lo, r.hi);
  symbols_.push_back(set);
  covered_.add(set);
  by_key_.emplace(key, id);
  return id;
}

std::optional<std::uint32_t> search_automaton::child(std::uint32_t s, std::uint32_t c) const {
  const auto& m = states[s].children;
  auto it = std::lower_bound(m.begin(), m.end(), std::pair<std::uint32_t, std::uint32_t>{c, 0});
  if (it != m.end() && it->first == c) return it->second;
  return std::nullopt;
}

std::uint32_t search_automaton::move(std::uint32_t s, std::uint32_t c) const {
  for (;; s = states[s].fail) {
    if (std::optional<std::uint32_t> t = child(s, c)) return *t;
    if (s == 0) return 0;
  }
}

search_automaton build_search_automaton(const std::vector<std::vector<std::uint32_t>>& literals,
                                        std::uint32_t num_symbols) {
  search_automaton a;
  a.states.emplace_back();
  std::unordered_map<std::uint64_t, std::uint32_t> child;  // the trie's edges while building
  for (std::size_t j = 0; j < literals.size(); ++j) {
    std::uint32_t s = 0;
    if (j % 256 == 0) check_interrupt();
    for (std::uint32_t c : literals[j]) {
      const std::uint64_t key = std::uint64_t(s) * num_symbols + c;
      auto [it, inserted] = child.emplace(key, std::uint32_t(a.states.size()));
      if (inserted) {
        a.states[s].children.push_back({c, it->second});
        const std::uint32_t depth = a.states[s].depth + 1;
        a.states.emplace_back();
        a.states.back().symbol = c;
        a.states.back().depth = depth;
      }
      s = it->second;
    }
    a.states[s].ends.push_back(std::uint32_t(j));
  }
  for (auto& st : a.states) std::sort(st.children.begin(), st.children.end());
  // Failure states breadth first: a child's is where its parent's failure state moves on its
  // symbol (shallower, so done already). Walking failure states this way is linear in the
  // literals' length in all (Aho and Corasick, 1975).
  a.order.push_back(0);
  for (std::size_t k = 0; k < a.order.size(); ++k) {
    if (k % 4096 == 0) check_interrupt();
    const std::uint32_t s = a.order[k];
    for (const auto& [c, t] : a.states[s].children) {
      a.order.push_back(t);
      const std::uint32_t f = s == 0 ? 0 : a.move(a.states[s].fail, c);
      a.states[t].fail = f;
      a.states[t].suffix_end = a.states[f].ends.empty() ? a.states[f].suffix_end : f;
    }
  }
  return a;
}

}  // namespace di::grammar::detail
