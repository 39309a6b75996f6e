// Token vocabulary and its pre-order byte trie: tokens sorted by bytes, nodes appended along
// the sorted order (each token only adds the suffix it does not share with the previous one),
// subtree sizes accumulated bottom-up.
#include "runtime/grammar/token_vocabulary.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <numeric>

namespace di::grammar {

std::shared_ptr<const token_vocabulary> token_vocabulary::from_tokenizer(const tok::tokenizer& tok,
                                                                         std::size_t mask_size) {
  std::vector<std::string> bytes(tok.vocab_size());
  for (std::size_t id = 0; id < bytes.size(); ++id) {
    if (tok.is_special(token_id(id))) continue;
    bytes[id] = std::string(tok.token_bytes(token_id(id)));
  }
  std::vector<token_id> stops;
  if (auto eos = tok.eos_id()) stops.push_back(*eos);
  return from_tokens(std::move(bytes), std::move(stops), mask_size);
}

std::shared_ptr<const token_vocabulary> token_vocabulary::from_tokens(
    std::vector<std::string> bytes, std::vector<token_id> stop_ids, std::size_t mask_size) {
  auto v = std::make_shared<token_vocabulary>();
  v->mask_size_ = mask_size ? mask_size : bytes.size();
  DI_CHECK(v->mask_size_ >= bytes.size(), "token mask size {} is smaller than the vocabulary ({})",
           v->mask_size_, bytes.size());
  for (token_id s : stop_ids) {
    DI_CHECK(s >= 0 && std::size_t(s) < v->mask_size_, "stop token {} outside the vocabulary", s);
    if (std::size_t(s) < bytes.size()) bytes[std::size_t(s)].clear();
  }
  v->bytes_ = std::move(bytes);
  v->stop_ids_ = std::move(stop_ids);
  v->build_trie();
  return v;
}

std::string_view token_vocabulary::bytes(token_id id) const {
  if (!is_text(id)) return {};
  return bytes_[std::size_t(id)];
}

bool token_vocabulary::is_stop(token_id id) const {
  return std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end();
}

void token_vocabulary::build_trie() {
  std::vector<token_id> order;
  for (std::size_t id = 0; id < bytes_.size(); ++id)
    if (!bytes_[id].empty()) order.push_back(token_id(id));
  std::sort(order.begin(), order.end(), [&](token_id a, token_id b) {
    return bytes_[std::size_t(a)] < bytes_[std::size_t(b)] ||
           (bytes_[std::size_t(a)] == bytes_[std::size_t(b)] && a < b);
  });
  num_text_ = order.size();
  token_node_.assign(bytes_.size(), UINT32_MAX);
  node_byte_ = {0};
  node_parent_ = {0};
  node_depth_ = {0};
  std::vector<std::vector<token_id>> at_node(1);
  std::vector<node_id> path{0};  // path[d] = node at depth d of the previous token
  std::string_view prev;
  for (token_id id : order) {
    std::string_view b = bytes_[std::size_t(id)];
    std::size_t common = 0;
    while (common < b.size() && common < prev.size() && b[common] == prev[common]) ++common;
    path.resize(common + 1);
    for (std::size_t d = common; d < b.size(); ++d) {
      node_id n = node_id(node_byte_.size());
      node_byte_.push_back(std::uint8_t(b[d]));
      node_parent_.push_back(path.back());
      node_depth_.push_back(std::uint32_t(d + 1));
      max_depth_ = std::max(max_depth_, std::uint32_t(d + 1));
      at_node.emplace_back();
      path.push_back(n);
    }
    at_node[path.back()].push_back(id);
    token_node_[std::size_t(id)] = path.back();
    prev = b;
  }
  node_subtree_.assign(node_byte_.size(), 1);
  for (std::size_t n = node_byte_.size(); n-- > 1;)
    node_subtree_[node_parent_[n]] += node_subtree_[n];
  node_token_begin_.assign(node_byte_.size() + 1, 0);
  for (std::size_t n = 0; n < at_node.size(); ++n) {
    node_token_begin_[n + 1] = node_token_begin_[n] + std::uint32_t(at_node[n].size());
    node_tokens_.insert(node_tokens_.end(), at_node[n].begin(), at_node[n].end());
  }
}

}  // namespace di::grammar
