// build_engram_token_map: one pass over the vocabulary, keying each token as the official
// `build_compressed_token_map` does (decode with special tokens kept, lossy UTF-8).
#include "model/engram/token_map.hpp"

#include <string>
#include <string_view>
#include <unordered_map>

#include "common/error.hpp"
#include "model/engram/normalize.hpp"

namespace di {

namespace {

constexpr std::string_view replacement_char = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

/// The dictionary key of token `id`. An id without a token decodes to "" in HF tokenizers
/// (its decode skips unknown ids), so it keys as "".
std::string token_key(const tok::tokenizer& tok, tok::token_id id) {
  const std::optional<std::string_view> raw = tok.id_to_token(id);
  if (!raw) return {};
  const tok::token_id ids[1] = {id};
  std::string text = tok.decode(ids, {.skip_special_tokens = false});
  if (text.find(replacement_char) != std::string::npos) return std::string(*raw);
  std::string normalized = engram_normalize(text);
  return normalized.empty() ? text : normalized;
}

}  // namespace

engram_token_map build_engram_token_map(const tok::tokenizer& tok) {
  const std::size_t vocab_size = tok.vocab_size();
  DI_CHECK(vocab_size <= std::size_t(INT32_MAX), "tokenizer vocabulary of {} ids is too large",
           vocab_size);
  engram_token_map result;
  result.map.resize(vocab_size);
  std::unordered_map<std::string, std::int32_t> key_to_id;
  key_to_id.reserve(vocab_size);
  for (std::size_t id = 0; id < vocab_size; ++id) {
    const auto next_id = std::int32_t(key_to_id.size());
    result.map[id] =
        key_to_id.try_emplace(token_key(tok, tok::token_id(id)), next_id).first->second;
  }
  result.num_compressed = std::int64_t(key_to_id.size());
  return result;
}

}  // namespace di
