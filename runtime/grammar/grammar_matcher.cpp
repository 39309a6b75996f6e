// grammar_matcher: token acceptance on the byte-level Earley parser, masks from the per-state
// token classes plus a sparse trie walk over the uncertain tokens, rollback, jump-forward.
#include "runtime/grammar/grammar_matcher.hpp"

#include "common/error.hpp"

#include <algorithm>

namespace di::grammar {

namespace {
constexpr std::uint32_t k_stop_step = UINT32_MAX;
}

grammar_matcher::grammar_matcher(std::shared_ptr<const token_grammar> g)
    : g_(std::move(g)), parser_(g_->automaton()), classifier_(g_->automaton(), g_->vocabulary()) {}

void grammar_matcher::reset() {
  parser_.reset();
  lengths_.clear();
  stopped_ = false;
}

bool grammar_matcher::is_terminated() const {
  return stopped_ || (parser_.is_accepting() && parser_.next_bytes().empty());
}

bool grammar_matcher::accept_token(token_id id) {
  if (stopped_) return false;
  const token_vocabulary& v = g_->vocabulary();
  if (v.is_stop(id)) {
    if (!parser_.is_accepting()) return false;
    stopped_ = true;
    lengths_.push_back(k_stop_step);
    return true;
  }
  if (!v.is_text(id)) return false;
  return accept_bytes(v.bytes(id));
}

bool grammar_matcher::accept_bytes(std::string_view bytes) {
  if (stopped_) return false;
  std::size_t n = parser_.push_all(bytes);
  if (n < bytes.size()) {
    parser_.pop(n);
    return false;
  }
  lengths_.push_back(std::uint32_t(bytes.size()));
  return true;
}

void grammar_matcher::rollback(std::size_t num_tokens) {
  DI_CHECK(num_tokens <= lengths_.size(), "rollback of {} tokens but only {} were accepted",
           num_tokens, lengths_.size());
  for (std::size_t k = 0; k < num_tokens; ++k) {
    std::uint32_t len = lengths_.back();
    lengths_.pop_back();
    if (len == k_stop_step) {
      stopped_ = false;
    } else {
      parser_.pop(len);
    }
  }
}

void grammar_matcher::fill_next_token_mask(std::span<std::uint32_t> mask) {
  const token_vocabulary& v = g_->vocabulary();
  DI_CHECK(mask.size() == v.mask_words(), "token mask has {} words, expected {}", mask.size(),
           v.mask_words());
  std::fill(mask.begin(), mask.end(), 0u);
  if (stopped_) return;
  // Every item whose state reads bytes or calls rules contributes its accepted tokens. Only
  // items of rule instances begun before this step need their uncertain tokens checked: an
  // instance begun here was predicted by a caller in this same set, whose own classification
  // walked through the call and decided those tokens (accepted, or uncertain one level up).
  const compiled_grammar& a = g_->automaton();
  const std::uint32_t here = std::uint32_t(parser_.num_bytes());
  scan_states_.clear();
  for (const earley_item& it : parser_.current())
    if (a.has_bytes(it.state) || !a.calls(it.state).empty())
      scan_states_.push_back(it.state << 1 | std::uint32_t(it.origin != here));
  std::sort(scan_states_.begin(), scan_states_.end());
  uncertain_.clear();
  for (std::size_t i = 0; i < scan_states_.size();) {
    const state_id s = scan_states_[i] >> 1;
    bool check = false;
    for (; i < scan_states_.size() && (scan_states_[i] >> 1) == s; ++i)
      check |= scan_states_[i] & 1;
    const state_tokens& t = g_->tokens_at(s, classifier_);
    t.or_into(mask);
    if (check) uncertain_.insert(uncertain_.end(), t.uncertain.begin(), t.uncertain.end());
  }
  if (!uncertain_.empty()) check_uncertain(mask);
  if (parser_.is_accepting())
    for (token_id id : v.stop_ids()) mask[std::size_t(id) >> 5] |= 1u << (id & 31);
}

void grammar_matcher::check_uncertain(std::span<std::uint32_t> mask) {
  const token_vocabulary& v = g_->vocabulary();
  std::sort(uncertain_.begin(), uncertain_.end());
  uncertain_.erase(std::unique(uncertain_.begin(), uncertain_.end()), uncertain_.end());
  auto is_set = [&](token_id id) { return (mask[std::size_t(id) >> 5] >> (id & 31)) & 1u; };
  path_.clear();
  node_id dead_until = 0;
  std::vector<node_id> chain;
  for (node_id n : uncertain_) {
    if (n < dead_until) continue;
    auto tokens = v.tokens_at(n);
    if (std::all_of(tokens.begin(), tokens.end(), is_set)) continue;
    while (!path_.empty() &&
           !(path_.back() < n && n < path_.back() + v.subtree_size(path_.back()))) {
      parser_.pop();
      path_.pop_back();
    }
    chain.clear();
    for (node_id c = n; c != 0 && (path_.empty() || c != path_.back()); c = v.parent(c))
      chain.push_back(c);
    bool ok = true;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      if (!parser_.push(v.node_byte(*it))) {
        dead_until = *it + v.subtree_size(*it);
        ok = false;
        break;
      }
      path_.push_back(*it);
    }
    if (ok)
      for (token_id id : tokens) mask[std::size_t(id) >> 5] |= 1u << (id & 31);
  }
  parser_.pop(path_.size());
  path_.clear();
}

std::string grammar_matcher::forced_bytes(std::size_t max_bytes) {
  std::string out;
  if (stopped_) return out;
  while (out.size() < max_bytes && !parser_.is_accepting()) {
    byte_set next = parser_.next_bytes();
    if (next.count() != 1) break;
    std::uint8_t b = 0;
    while (!next.test(b)) ++b;
    if (!parser_.push(b)) break;
    out.push_back(char(b));
  }
  parser_.pop(out.size());
  return out;
}

}  // namespace di::grammar
