// token_class_cache: a mutex-guarded map; see the header.
#include "runtime/grammar/token_class_cache.hpp"

namespace di::grammar {

std::shared_ptr<const state_tokens> token_class_cache::find(const state_signature& s) const {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(s);
  return it == entries_.end() ? nullptr : it->second;
}

std::shared_ptr<const state_tokens> token_class_cache::insert(const state_signature& s,
                                                              std::shared_ptr<const state_tokens> t) {
  std::lock_guard lock(mutex_);
  if (auto it = entries_.find(s); it != entries_.end()) return it->second;
  std::size_t size = t->memory_bytes();
  if (bytes_ + size > max_bytes_) return t;
  bytes_ += size;
  entries_.emplace(s, t);
  return t;
}

std::size_t token_class_cache::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

std::size_t token_class_cache::memory_bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

}  // namespace di::grammar
