// Per-state token-class cache: an atomic pointer per equivalence class of states (its first
// state holds it), filled by whoever needs it first (a racing duplicate is discarded), or all
// at creation; misses look in the shared cross-grammar cache before walking the trie.
#include "runtime/grammar/token_grammar.hpp"

#include <chrono>
#include <limits>
#include <optional>

namespace di::grammar {

namespace {
constexpr std::size_t k_signature_work = 30'000'000;
}

token_grammar::token_grammar(std::shared_ptr<const compiled_grammar> g,
                             std::shared_ptr<const token_vocabulary> v)
    : g_(std::move(g)),
      v_(std::move(v)),
      cache_(new std::atomic<const state_tokens*>[g_->num_states()]) {
  for (std::size_t s = 0; s < g_->num_states(); ++s)
    cache_[s].store(nullptr, std::memory_order_relaxed);
}

token_grammar::~token_grammar() = default;

std::shared_ptr<const token_grammar> token_grammar::create(
    std::shared_ptr<const compiled_grammar> g, std::shared_ptr<const token_vocabulary> v,
    bool precompute, std::shared_ptr<token_class_cache> shared) {
  std::shared_ptr<token_grammar> tg(new token_grammar(std::move(g), std::move(v)));
  tg->shared_ = std::move(shared);
  const std::size_t n = tg->g_->num_states();
  // Bisimulation signatures refine the token classes and key the sharing across grammars; a
  // grammar whose refinement runs long (a long chain of counted states) goes without them.
  tg->signatures_ = compute_state_signatures(*tg->g_, k_signature_work);
  tg->rep_ = token_equivalence_classes(*tg->g_, tg->signatures_, tg->v_->max_depth());
  tg->num_distinct_ = 0;
  for (state_id s = 0; s < n; ++s) tg->num_distinct_ += tg->rep_[s] == s;
  if (tg->shared_) {
    std::vector<bool> wanted(n);
    for (state_id s = 0; s < n; ++s)
      wanted[s] = tg->rep_[s] == s && (tg->g_->has_bytes(s) || !tg->g_->calls(s).empty());
    tg->share_keys_ = sharing_keys(*tg->g_, tg->signatures_, wanted);
  }
  tg->signatures_.clear();
  tg->signatures_.shrink_to_fit();
  if (precompute) tg->classify_states(std::numeric_limits<double>::infinity());
  return tg;
}

bool token_grammar::classify_states(double budget_s) const {
  const auto start = std::chrono::steady_clock::now();
  std::optional<token_classifier> scratch;  // made on the first miss: a warm grammar needs none
  for (state_id s = 0; s < g_->num_states(); ++s) {
    if (!g_->has_bytes(s) && g_->calls(s).empty()) continue;
    if (cache_[rep_[s]].load(std::memory_order_acquire)) continue;
    if (!scratch) scratch.emplace(*g_, *v_);
    tokens_at(s, *scratch);
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= budget_s)
      return num_unclassified_from(s + 1) == 0;
  }
  return true;
}

std::size_t token_grammar::num_unclassified_from(state_id first) const {
  std::size_t n = 0;
  for (state_id s = first; s < g_->num_states(); ++s)
    n += (g_->has_bytes(s) || !g_->calls(s).empty()) &&
         !cache_[rep_[s]].load(std::memory_order_acquire);
  return n;
}

const state_tokens& token_grammar::tokens_at(state_id s, token_classifier& scratch) const {
  const state_id rep = rep_[s];
  const state_tokens* p = cache_[rep].load(std::memory_order_acquire);
  if (p) return *p;
  return classify(rep, scratch);
}

const state_tokens& token_grammar::classify(state_id rep, token_classifier& scratch) const {
  std::shared_ptr<const state_tokens> t;
  const std::optional<state_signature> key =
      rep < share_keys_.size() ? share_keys_[rep] : std::nullopt;
  if (key) t = shared_->find(*key);
  if (!t) {
    t = std::make_shared<const state_tokens>(scratch.classify(rep));
    if (key) t = shared_->insert(*key, t);
  }
  const state_tokens* expected = nullptr;
  if (cache_[rep].compare_exchange_strong(expected, t.get(), std::memory_order_acq_rel)) {
    std::lock_guard lock(owned_mutex_);
    owned_.push_back(std::move(t));
    return *cache_[rep].load(std::memory_order_acquire);
  }
  return *expected;
}

std::size_t token_grammar::num_classified() const {
  std::size_t n = 0;
  for (std::size_t s = 0; s < g_->num_states(); ++s)
    n += cache_[s].load(std::memory_order_acquire) != nullptr;
  return n;
}

std::size_t token_grammar::memory_bytes() const {
  std::size_t n = g_->memory_bytes() + g_->num_states() * (sizeof(void*) + sizeof(state_id)) +
                  share_keys_.size() * sizeof(std::optional<state_signature>);
  for (std::size_t s = 0; s < g_->num_states(); ++s)
    if (auto* p = cache_[s].load(std::memory_order_acquire); p && rep_[s] == s)
      n += p->memory_bytes();
  return n;
}

}  // namespace di::grammar
