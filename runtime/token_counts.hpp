// How often each token occurred in a request's prompt and output: the state that repetition,
// presence and frequency penalties read. Sparse (one entry per distinct token, plus an index),
// so a request costs memory in proportion to its own length, not to the 129K vocabulary.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace di::runtime {

class token_counts {
 public:
  /// One distinct token of the request.
  struct entry {
    std::int32_t id = 0;
    std::int32_t num_prompt = 0;  ///< occurrences in the prompt
    std::int32_t num_output = 0;  ///< occurrences in the generated output
  };

  token_counts() = default;
  /// Counts the prompt's tokens (ids must be >= 0).
  explicit token_counts(std::span<const std::int32_t> prompt_ids);

  void add_prompt_token(std::int32_t id);
  /// Records a generated token; call once per token appended to the output.
  void add_output_token(std::int32_t id);

  /// Every distinct token seen, in first-seen order.
  std::span<const entry> entries() const { return entries_; }
  std::int32_t num_prompt(std::int32_t id) const;
  std::int32_t num_output(std::int32_t id) const;
  std::int64_t num_output_tokens() const { return num_output_tokens_; }

 private:
  entry& find_or_add(std::int32_t id);

  std::vector<entry> entries_;
  std::unordered_map<std::int32_t, std::uint32_t> index_;  // id -> position in entries_
  std::int64_t num_output_tokens_ = 0;
};

}  // namespace di::runtime
