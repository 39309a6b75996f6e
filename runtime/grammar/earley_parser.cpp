// Earley recognition over byte-class automata. Prediction of a nullable rule also advances
// over it at once (Aycock & Horspool), so completion never has to look at items of the set
// being built; a rule instance that ends in the set it began in is exactly a nullable one.
#include "runtime/grammar/earley_parser.hpp"

#include "common/error.hpp"

namespace di::grammar {

namespace {

std::uint64_t key_of(state_id s, std::uint32_t origin) {
  return (std::uint64_t(s) << 32) | origin;
}

std::uint64_t mix(std::uint64_t k) {
  k ^= k >> 29;
  k *= 0xbf58476d1ce4e5b9ull;
  return k ^ (k >> 32);
}

}  // namespace

earley_parser::earley_parser(const compiled_grammar& g) : g_(g) {
  index_keys_.assign(64, 0);
  index_stamp_.assign(64, 0);
  reset();
}

void earley_parser::begin_set() {
  set_begin_.push_back(std::uint32_t(items_.size()));
  accept_.push_back(0);
  exit_.push_back(0);
  ++stamp_;
  index_count_ = 0;
}

void earley_parser::grow_index() {
  std::size_t cap = index_keys_.size() * 2;
  index_keys_.assign(cap, 0);
  index_stamp_.assign(cap, 0);
  ++stamp_;
  index_count_ = 0;
  // Re-index the items of the set under construction (set_begin_.back() marks its end+1 slot).
  std::uint32_t begin = set_begin_[set_begin_.size() - 1];
  for (std::size_t k = begin; k < items_.size(); ++k) {
    std::uint64_t key = key_of(items_[k].state, items_[k].origin);
    std::size_t h = mix(key) & (cap - 1);
    while (index_stamp_[h] == stamp_) h = (h + 1) & (cap - 1);
    index_stamp_[h] = stamp_;
    index_keys_[h] = key;
    ++index_count_;
  }
}

void earley_parser::add(state_id s, std::uint32_t origin) {
  if ((index_count_ + 1) * 2 > index_keys_.size()) grow_index();
  std::uint64_t key = key_of(s, origin);
  std::size_t mask = index_keys_.size() - 1;
  std::size_t h = mix(key) & mask;
  while (index_stamp_[h] == stamp_) {
    if (index_keys_[h] == key) return;
    h = (h + 1) & mask;
  }
  index_stamp_[h] = stamp_;
  index_keys_[h] = key;
  ++index_count_;
  items_.push_back({s, origin});
}

void earley_parser::complete(const earley_item& it, std::uint32_t set) {
  const rule_id rule = g_.rule_of(it.state);
  const std::uint32_t begin = set_begin_[it.origin];
  const std::uint32_t end = set_begin_[it.origin + 1];
  for (std::uint32_t k = begin; k < end; ++k) {
    const earley_item parent = items_[k];
    for (const call_edge& e : g_.calls(parent.state))
      if (e.rule == rule) add(e.target, parent.origin);
  }
}

void earley_parser::close_set() {
  // The set under construction starts at set_begin_.back(); its index is num sets - 1.
  const std::uint32_t set = std::uint32_t(set_begin_.size() - 1);
  for (std::size_t k = set_begin_.back(); k < items_.size(); ++k) {
    const earley_item it = items_[k];
    for (const call_edge& e : g_.calls(it.state)) {
      add(g_.start(e.rule), set);
      if (g_.nullable(e.rule)) add(e.target, it.origin);
    }
    if (!g_.is_final(it.state)) continue;
    if (it.origin == k_outer_origin) {
      exit_.back() = 1;
    } else if (it.origin != set) {
      complete(it, set);
    }
    if (it.origin == 0 && g_.rule_of(it.state) == g_.root()) accept_.back() = 1;
  }
  set_begin_.push_back(std::uint32_t(items_.size()));
}

void earley_parser::reset() {
  items_.clear();
  set_begin_.clear();
  accept_.clear();
  exit_.clear();
  begin_set();
  add(g_.start(g_.root()), 0);
  close_set();
}

void earley_parser::reset_at(state_id s) {
  items_.clear();
  set_begin_.clear();
  accept_.clear();
  exit_.clear();
  begin_set();
  add(s, k_outer_origin);
  close_set();
}

bool earley_parser::push(std::uint8_t b) {
  const std::uint32_t cur_begin = set_begin_[set_begin_.size() - 2];
  const std::uint32_t cur_end = set_begin_.back();
  set_begin_.pop_back();  // reopen: the new set starts where the current one ends
  begin_set();
  for (std::uint32_t k = cur_begin; k < cur_end; ++k) {
    state_id t = g_.next(items_[k].state, b);
    if (t != k_dead_state) add(t, items_[k].origin);
  }
  if (items_.size() == cur_end) {  // refused: restore the previous layout
    set_begin_.pop_back();
    accept_.pop_back();
    exit_.pop_back();
    set_begin_.push_back(cur_end);
    return false;
  }
  close_set();
  return true;
}

void earley_parser::push_state(state_id s, std::uint32_t origin) {
  set_begin_.pop_back();
  begin_set();
  add(s, origin);
  close_set();
}

std::size_t earley_parser::push_all(std::string_view bytes) {
  std::size_t n = 0;
  for (char c : bytes) {
    if (!push(std::uint8_t(c))) break;
    ++n;
  }
  return n;
}

void earley_parser::pop(std::size_t n) {
  DI_CHECK(n <= num_bytes(), "earley_parser::pop({}) with only {} bytes consumed", n, num_bytes());
  for (std::size_t i = 0; i < n; ++i) {
    set_begin_.pop_back();
    accept_.pop_back();
    exit_.pop_back();
  }
  items_.resize(set_begin_.back());
}

byte_set earley_parser::next_bytes() const {
  byte_set out;
  for (const earley_item& it : current())
    if (g_.has_bytes(it.state)) out |= g_.first_bytes(it.state);
  return out;
}

}  // namespace di::grammar
