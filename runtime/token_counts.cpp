// Sparse per-request token counts for the penalties (see token_counts.hpp).
#include "runtime/token_counts.hpp"

#include "common/error.hpp"

namespace di::runtime {

token_counts::token_counts(std::span<const std::int32_t> prompt_ids) {
  for (std::int32_t id : prompt_ids) add_prompt_token(id);
}

token_counts::entry& token_counts::find_or_add(std::int32_t id) {
  DI_CHECK(id >= 0, "token id must be >= 0, got {}", id);
  auto [it, is_new] = index_.try_emplace(id, static_cast<std::uint32_t>(entries_.size()));
  if (is_new) entries_.push_back(entry{id, 0, 0});
  return entries_[it->second];
}

void token_counts::add_prompt_token(std::int32_t id) {
  ++find_or_add(id).num_prompt;
}

void token_counts::add_output_token(std::int32_t id) {
  ++find_or_add(id).num_output;
  ++num_output_tokens_;
}

std::int32_t token_counts::num_prompt(std::int32_t id) const {
  auto it = index_.find(id);
  return it == index_.end() ? 0 : entries_[it->second].num_prompt;
}

std::int32_t token_counts::num_output(std::int32_t id) const {
  auto it = index_.find(id);
  return it == index_.end() ? 0 : entries_[it->second].num_output;
}

}  // namespace di::runtime
