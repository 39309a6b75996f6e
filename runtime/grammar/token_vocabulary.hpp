// The model vocabulary as the token-mask machinery sees it: the bytes of every text token in a
// trie laid out in pre-order (a node's subtree is a contiguous index range, so a walk can skip
// it in one step), the stop tokens a finished grammar allows, and the mask size (the model's
// vocabulary, which may exceed the tokenizer's). Built once per tokenizer; immutable; shared.
#pragma once

#include "model/tokenizer/tokenizer.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace di::grammar {

using token_id = std::int32_t;
using node_id = std::uint32_t;

class token_vocabulary {
 public:
  /// Text tokens of `tok` (special tokens excluded), EOS as the stop token, masks of
  /// `mask_size` tokens (0 = the tokenizer's vocab_size()).
  static std::shared_ptr<const token_vocabulary> from_tokenizer(const tok::tokenizer& tok,
                                                                std::size_t mask_size = 0);
  /// From explicit byte strings (id = index; an empty string is not a text token).
  static std::shared_ptr<const token_vocabulary> from_tokens(std::vector<std::string> bytes,
                                                             std::vector<token_id> stop_ids,
                                                             std::size_t mask_size = 0);

  std::size_t mask_size() const { return mask_size_; }
  std::size_t mask_words() const { return (mask_size_ + 31) / 32; }
  /// Bytes of text token `id` (empty for special, stop or unknown ids).
  std::string_view bytes(token_id id) const;
  bool is_text(token_id id) const {
    return id >= 0 && std::size_t(id) < token_node_.size() && token_node_[id] != UINT32_MAX;
  }
  bool is_stop(token_id id) const;
  const std::vector<token_id>& stop_ids() const { return stop_ids_; }
  std::size_t num_text_tokens() const { return num_text_; }

  // --- trie (node 0 is the root, the empty prefix) ---
  std::size_t num_nodes() const { return node_byte_.size(); }
  std::uint8_t node_byte(node_id n) const { return node_byte_[n]; }
  /// Nodes in the subtree of `n`, `n` included: the subtree is [n, n + subtree_size(n)).
  std::uint32_t subtree_size(node_id n) const { return node_subtree_[n]; }
  node_id parent(node_id n) const { return node_parent_[n]; }
  std::uint32_t depth(node_id n) const { return node_depth_[n]; }
  /// Tokens whose bytes end exactly at `n` (usually zero or one).
  std::span<const token_id> tokens_at(node_id n) const {
    return {node_tokens_.data() + node_token_begin_[n],
            node_token_begin_[n + 1] - node_token_begin_[n]};
  }
  bool has_tokens(node_id n) const { return node_token_begin_[n + 1] != node_token_begin_[n]; }
  node_id node_of(token_id id) const { return token_node_[id]; }
  /// Bytes of the longest text token (the depth of the trie).
  std::uint32_t max_depth() const { return max_depth_; }

 private:
  void build_trie();

  std::size_t mask_size_ = 0;
  std::size_t num_text_ = 0;
  std::vector<std::string> bytes_;  // [num ids]
  std::vector<token_id> stop_ids_;
  std::vector<std::uint8_t> node_byte_;
  std::vector<std::uint32_t> node_subtree_;
  std::vector<node_id> node_parent_;
  std::vector<std::uint32_t> node_depth_;
  std::vector<std::uint32_t> node_token_begin_;  // [num_nodes + 1]
  std::vector<token_id> node_tokens_;
  std::vector<node_id> token_node_;  // [num ids], UINT32_MAX if not a text token
  std::uint32_t max_depth_ = 0;
};

}  // namespace di::grammar
