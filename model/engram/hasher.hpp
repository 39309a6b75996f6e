// Engram n-gram hash ids: each position's token and the max_ngram_size - 1 tokens before
// it, through the compressed token map, become one bucket row per (n-gram size, head) in
// every Engram layer's table, exactly as the official DeepseekV41NgramHashState computes.
// Incremental by design: a per-sequence engram_history carries the look-back, so prefill,
// chunked prefill and decode steps all give the ids of a one-shot pass.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "config/model_config.hpp"
#include "model/engram/token_map.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace di {

/// The look-back of one sequence: the compressed ids of its last few live tokens.
///
/// Paging and serialization: a fixed-size (40-byte), trivially copyable value without
/// pointers or padding, saved, swapped or sent with the sequence's other metadata by plain
/// copy (memcpy); it never lives in KV pages. Equal look-backs give equal bytes. Rolling a
/// sequence back (rejected draft tokens, recompute after preemption) needs no saved copy:
/// engram_hasher::history_at rebuilds it from the max_ngram_size - 1 ids before the new end.
struct engram_history {
  static constexpr int max_lookback = 7;  ///< supports engram max_ngram_size up to 8

  std::int64_t next_position = 0;  ///< the position the next hashed token must have
  /// How many of `recent` the next token may look back through: it stops at the sequence
  /// start and at a DEAD token, and is at most max_ngram_size - 1.
  std::int32_t num_recent = 0;
  std::array<std::int32_t, max_lookback> recent{};  ///< compressed ids; [0] = next_position - 1
};
static_assert(std::is_trivially_copyable_v<engram_history> && sizeof(engram_history) == 40);

/// Consecutive tokens of one sequence, as one hash call takes them.
struct engram_tokens {
  std::span<const tok::token_id> ids;  ///< [num_tokens]
  std::int64_t first_position = 0;     ///< position of ids[0]; must be history.next_position
  /// [num_tokens] or empty (all live): 0 marks a DEAD token (an image-span token) that no
  /// n-gram reaches across; its own row hashes an all-pad n-gram (its gate is shut anyway).
  std::span<const std::uint8_t> is_live;
};

/// The official multipliers: per layer, numpy default_rng(10007 * layer_id).integers(0,
/// bound, max_ngram_size) * 2 + 1 with bound = (INT64_MAX / compressed_vocab_size) / 2.
/// Returns [layer_ids.size(), max_ngram_size].
std::vector<std::int64_t> engram_hash_multipliers(std::span<const int> layer_ids,
                                                  int max_ngram_size,
                                                  std::int64_t compressed_vocab_size);

/// Hashes token ids into Engram table rows. Immutable after construction; thread-safe.
class engram_hasher {
 public:
  /// Checks that `token_map` belongs to `config` (a compressed vocabulary size that differs
  /// from engram_compressed_vocab_size is a di::error: every multiplier derives from it).
  engram_hasher(const engram_config& config, engram_token_map token_map);

  int num_layers() const { return num_layers_; }
  /// Hash columns per layer: (max_ngram_size - 1) * n_heads.
  int num_columns() const { return num_columns_; }
  int max_ngram_size() const { return max_ngram_; }
  /// [num_layers, max_ngram_size]
  const std::vector<std::int64_t>& multipliers() const { return multipliers_; }
  /// The compressed id that fills look-back past the sequence start or a DEAD token.
  std::int32_t pad_id() const { return pad_id_; }
  const engram_token_map& token_map() const { return token_map_; }

  /// Hash ids of `tokens`, row-major [num_tokens, num_layers, num_columns], bucket offsets
  /// included (each layer's rows count from its own table start); advances `history`.
  std::vector<std::int64_t> hash(std::span<const tok::token_id> tokens, std::int64_t first_position,
                                 engram_history& history) const;
  /// As hash, into `out` ([num_tokens * num_layers * num_columns]), with liveness. On a
  /// di::error (bad position, unknown token id, wrong sizes) nothing is written.
  void hash_into(const engram_tokens& tokens, engram_history& history,
                 std::span<std::int64_t> out) const;

  /// The history of a sequence about to hash `position`, from the token ids at positions
  /// [position - preceding.size(), position): at least min(position, max_ngram_size - 1)
  /// of them (more are ignored). `is_live` as in engram_tokens.
  engram_history history_at(std::int64_t position, std::span<const tok::token_id> preceding,
                            std::span<const std::uint8_t> is_live = {}) const;

 private:
  void check_tokens(const engram_tokens& tokens, const engram_history& history) const;
  void advance(engram_history& history, std::int32_t compressed, bool is_live) const;
  void hash_one(const engram_history& history, std::int32_t compressed, bool is_live,
                std::int64_t* out) const;

  engram_token_map token_map_;
  int num_layers_ = 0;
  int max_ngram_ = 0;
  int n_heads_ = 0;
  int num_columns_ = 0;
  std::int32_t pad_id_ = 0;
  std::vector<std::int64_t> multipliers_;  // [num_layers, max_ngram]
  std::vector<std::int64_t> primes_;       // [num_layers, num_columns]
  std::vector<std::int64_t> offsets_;      // [num_layers, num_columns]
};

}  // namespace di
