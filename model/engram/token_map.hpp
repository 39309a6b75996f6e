// Engram's compressed token map: every token id of the tokenizer mapped onto a smaller id
// space in which tokens whose text normalizes alike share one id (" The", "the", "THE").
// Built once at model load; its size must equal config engram_compressed_vocab_size.
#pragma once

#include <cstdint>
#include <vector>

#include "model/tokenizer/tokenizer.hpp"

namespace di {

/// The official `build_compressed_token_map` result.
struct engram_token_map {
  std::vector<std::int32_t> map;    ///< [tokenizer vocab_size] compressed id of each token id
  std::int64_t num_compressed = 0;  ///< distinct keys = the compressed vocabulary size
};

/// Maps every id in [0, tok.vocab_size()): the key of a token is engram_normalize of its
/// decoded text (the text itself when that is empty), or its raw token string when the
/// decoded text holds U+FFFD (a partial UTF-8 token). Keys number in first-seen order.
engram_token_map build_engram_token_map(const tok::tokenizer& tok);

}  // namespace di
