// The DeepSeek tokenizer: byte-level BPE read from a Hugging Face `tokenizer.json` (plus
// `tokenizer_config.json` for BOS/EOS), giving the same ids as HF tokenizers. Encoding is
// thread-safe; each thread keeps its own scratch buffers and word cache.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/detail/utf8.hpp"

namespace di::tok {

using token_id = std::int32_t;

/// How to encode.
struct encode_options {
  /// Apply tokenizer.json's post_processor (HF `add_special_tokens=True`). DeepSeek's is
  /// ByteLevel, which adds no token.
  bool add_special_tokens = false;
  /// What HF transformers does for LlamaTokenizerFast: prepend BOS if tokenizer_config.json
  /// has add_bos_token, append EOS if it has add_eos_token. Applied after the post_processor.
  bool add_bos = false;
};

/// How to decode.
struct decode_options {
  bool skip_special_tokens = false;  ///< drop tokens whose added_tokens entry is `special`
};

/// How to load.
struct load_options {
  /// Use the hand-written pre-tokenizer when tokenizer.json has DeepSeek-V3's exact Split
  /// patterns (same output, faster); false forces the generic PCRE2 path.
  bool allow_fast_pre_tokenizer = true;
};

/// A special token: an added token marked `special` in tokenizer.json.
struct special_token {
  token_id id;
  std::string content;
};

/// A loaded tokenizer. Immutable after construction; movable.
class tokenizer {
 public:
  /// Loads `dir`/tokenizer.json and, if present, `dir`/tokenizer_config.json. Either file may
  /// instead hold one line with a path (relative to its folder) to the real file.
  static tokenizer from_dir(const std::string& dir, const load_options& options = {});
  /// Loads from the JSON texts; `config_json` empty means no tokenizer_config.json.
  /// `origin` names the source in error messages.
  static tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json,
                             const load_options& options = {},
                             std::string_view origin = "tokenizer.json");

  ~tokenizer();
  tokenizer(tokenizer&&) noexcept;
  tokenizer& operator=(tokenizer&&) noexcept;

  /// Token ids of `text` (valid UTF-8, else di::error naming the byte offset).
  std::vector<token_id> encode(std::string_view text, const encode_options& options = {}) const;
  /// As encode, appending to `out` (lets callers reuse a buffer).
  void encode_into(std::string_view text, std::vector<token_id>& out,
                   const encode_options& options = {}) const;

  /// Text of `ids`; byte sequences that are not valid UTF-8 become U+FFFD (HF's lossy
  /// decoding). An id with no token is a di::error.
  std::string decode(std::span<const token_id> ids, const decode_options& options = {}) const;
  /// The bytes token `id` decodes to (may be part of a UTF-8 sequence); di::error if no token.
  std::string_view token_bytes(token_id id) const;

  /// One past the largest id (model vocabulary plus added tokens).
  std::size_t vocab_size() const;
  /// The token string of `id` as in tokenizer.json (byte-level form), if `id` has one.
  std::optional<std::string_view> id_to_token(token_id id) const;
  /// The id of a token string (byte-level form, or an added token's content).
  std::optional<token_id> token_to_id(std::string_view token) const;
  /// True if `id` is an added token marked special.
  bool is_special(token_id id) const;
  /// BOS/EOS from tokenizer_config.json (bos_token/eos_token), if configured.
  std::optional<token_id> bos_id() const;
  std::optional<token_id> eos_id() const;
  /// The added tokens marked special, in id order.
  const std::vector<special_token>& special_tokens() const;
  /// True if the hand-written pre-tokenizer is in use (see load_options).
  bool uses_fast_pre_tokenizer() const;

 private:
  struct impl;
  explicit tokenizer(std::unique_ptr<impl> impl);
  static tokenizer load(std::string_view tokenizer_json, std::string_view config_json,
                        const load_options& options, std::string_view origin,
                        std::string_view config_origin);
  std::unique_ptr<impl> impl_;
};

/// Turns ids into text one at a time for streaming: emits only complete UTF-8 (never part of
/// a multi-byte character) and holds back bytes of a character not yet finished. The
/// concatenation of all push() results and finish() equals tokenizer::decode of all ids.
class incremental_detokenizer {
 public:
  explicit incremental_detokenizer(const tokenizer& tok, const decode_options& options = {});

  /// Text made complete by `id` (often empty while a character is split across tokens).
  std::string push(token_id id);
  /// Ends the stream: a character that never completed is emitted as U+FFFD. Resets.
  std::string finish();
  /// True while bytes of an unfinished character are held back.
  bool has_pending() const;
  /// True when push(id) would first emit the held-back bytes as one U+FFFD (the token's own
  /// text then begins one character later): bytes are held and id's first byte cannot
  /// continue them.
  bool abandons_pending(token_id id) const;

 private:
  const tokenizer* tok_;
  decode_options options_;
  detail::utf8_lossy_decoder decoder_;
};

}  // namespace di::tok
