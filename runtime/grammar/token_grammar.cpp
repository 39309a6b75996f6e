// Per-state token-class cache: an atomic pointer per automaton state, filled by whoever needs
// it first (a racing duplicate is discarded), or all at creation.
#include "runtime/grammar/token_grammar.hpp"

namespace di::grammar {

token_grammar::token_grammar(std::shared_ptr<const compiled_grammar> g,
                             std::shared_ptr<const token_vocabulary> v)
    : g_(std::move(g)),
      v_(std::move(v)),
      cache_(new std::atomic<const state_tokens*>[g_->num_states()]) {
  for (std::size_t s = 0; s < g_->num_states(); ++s)
    cache_[s].store(nullptr, std::memory_order_relaxed);
}

token_grammar::~token_grammar() {
  for (std::size_t s = 0; s < g_->num_states(); ++s)
    delete cache_[s].load(std::memory_order_relaxed);
}

std::shared_ptr<const token_grammar> token_grammar::create(
    std::shared_ptr<const compiled_grammar> g, std::shared_ptr<const token_vocabulary> v,
    bool precompute) {
  std::shared_ptr<token_grammar> tg(new token_grammar(std::move(g), std::move(v)));
  if (precompute) {
    token_classifier scratch(*tg->g_, *tg->v_);
    for (state_id s = 0; s < tg->g_->num_states(); ++s)
      if (tg->g_->has_bytes(s)) tg->tokens_at(s, scratch);
  }
  return tg;
}

const state_tokens& token_grammar::tokens_at(state_id s, token_classifier& scratch) const {
  const state_tokens* p = cache_[s].load(std::memory_order_acquire);
  if (p) return *p;
  auto fresh = std::make_unique<state_tokens>(scratch.classify(s));
  const state_tokens* expected = nullptr;
  if (cache_[s].compare_exchange_strong(expected, fresh.get(), std::memory_order_acq_rel))
    return *fresh.release();
  return *expected;
}

std::size_t token_grammar::num_classified() const {
  std::size_t n = 0;
  for (std::size_t s = 0; s < g_->num_states(); ++s)
    n += cache_[s].load(std::memory_order_acquire) != nullptr;
  return n;
}

std::size_t token_grammar::memory_bytes() const {
  std::size_t n = g_->memory_bytes() + g_->num_states() * sizeof(void*);
  for (std::size_t s = 0; s < g_->num_states(); ++s)
    if (auto* p = cache_[s].load(std::memory_order_acquire)) n += p->memory_bytes();
  return n;
}

}  // namespace di::grammar
