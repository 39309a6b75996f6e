// engram_hasher: the official layout (primes, per-layer offsets, numpy multipliers) and the
// per-position rolling XOR hash. Products never overflow (multipliers are bounded by
// INT64_MAX / compressed_vocab_size), but they are formed in uint64 as numpy would wrap.
#include "model/engram/hasher.hpp"

#include <algorithm>
#include <limits>

#include "common/error.hpp"
#include "model/engram/numpy_random.hpp"

namespace di {

namespace {

/// Floor modulo (torch's `%` on int64: the result takes the divisor's sign).
std::int64_t floor_mod(std::int64_t value, std::int64_t divisor) {
  std::int64_t r = value % divisor;
  return (r != 0 && ((r < 0) != (divisor < 0))) ? r + divisor : r;
}

void check_config(const engram_config& config, const engram_token_map& token_map) {
  DI_CHECK(!config.layer_ids.empty(), "Engram hasher: the model config has no engram_layer_ids");
  DI_CHECK(config.max_ngram_size >= 2 && config.max_ngram_size <= engram_history::max_lookback + 1,
           "Engram hasher: engram_max_ngram_size {} is outside the supported [2, {}]",
           config.max_ngram_size, engram_history::max_lookback + 1);
  DI_CHECK(config.n_heads >= 1, "Engram hasher: engram_n_heads {} must be positive",
           config.n_heads);
  DI_CHECK(token_map.num_compressed == config.compressed_vocab_size,
           "Engram: the tokenizer's compressed vocabulary has {} entries but the config's "
           "engram_compressed_vocab_size is {}; every hash multiplier derives from this size, so "
           "this tokenizer does not belong to this checkpoint (use the checkpoint's tokenizer)",
           token_map.num_compressed, config.compressed_vocab_size);
  DI_CHECK(config.pad_token_id >= 0 && config.pad_token_id < std::int64_t(token_map.map.size()),
           "Engram hasher: engram_pad_token_id {} is not a token id of the tokenizer ({} ids)",
           config.pad_token_id, token_map.map.size());
  const auto [lo, hi] = std::minmax_element(token_map.map.begin(), token_map.map.end());
  DI_CHECK(*lo >= 0 && *hi < token_map.num_compressed,
           "Engram hasher: token map holds ids outside [0, {})", token_map.num_compressed);
}

}  // namespace

std::vector<std::int64_t> engram_hash_multipliers(std::span<const int> layer_ids,
                                                  int max_ngram_size,
                                                  std::int64_t compressed_vocab_size) {
  DI_CHECK(compressed_vocab_size > 0, "Engram: compressed vocabulary size {} must be positive",
           compressed_vocab_size);
  DI_CHECK(max_ngram_size > 0, "Engram: max_ngram_size {} must be positive", max_ngram_size);
  constexpr std::int64_t int64_max = std::numeric_limits<std::int64_t>::max();
  const std::int64_t bound = std::max<std::int64_t>(1, (int64_max / compressed_vocab_size) / 2);
  std::vector<std::int64_t> out;
  out.reserve(layer_ids.size() * std::size_t(max_ngram_size));
  for (int layer_id : layer_ids) {
    DI_CHECK(layer_id >= 0, "Engram: negative layer id {}", layer_id);
    np::pcg64 rng = np::default_rng(10007ull * std::uint64_t(layer_id));
    for (std::int64_t value : np::integers_i64(rng, 0, bound, std::size_t(max_ngram_size)))
      out.push_back(value * 2 + 1);
  }
  return out;
}

engram_hasher::engram_hasher(const engram_config& config, engram_token_map token_map)
    : token_map_(std::move(token_map)) {
  check_config(config, token_map_);
  num_layers_ = int(config.layer_ids.size());
  max_ngram_ = config.max_ngram_size;
  n_heads_ = config.n_heads;
  num_columns_ = config.num_hash_columns();
  pad_id_ = token_map_.map[std::size_t(config.pad_token_id)];
  multipliers_ = engram_hash_multipliers(config.layer_ids, max_ngram_, token_map_.num_compressed);
  // Offsets restart at every layer: each layer's table is addressed from its own row 0.
  for (const std::vector<std::int64_t>& layer : engram_bucket_primes(config)) {
    DI_CHECK(int(layer.size()) == num_columns_, "Engram hasher: {} primes for {} hash columns",
             layer.size(), num_columns_);
    std::int64_t total = 0;
    for (std::int64_t prime : layer) {
      primes_.push_back(prime);
      offsets_.push_back(total);
      total += prime;
    }
  }
}

std::vector<std::int64_t> engram_hasher::hash(std::span<const tok::token_id> tokens,
                                              std::int64_t first_position,
                                              engram_history& history) const {
  std::vector<std::int64_t> out(tokens.size() * std::size_t(num_layers_ * num_columns_));
  hash_into({.ids = tokens, .first_position = first_position, .is_live = {}}, history, out);
  return out;
}

void engram_hasher::check_tokens(const engram_tokens& tokens, const engram_history& history) const {
  DI_CHECK(tokens.first_position == history.next_position,
           "Engram hasher: tokens start at position {} but the sequence's history expects position "
           "{}; rebuild the history with history_at after a rollback",
           tokens.first_position, history.next_position);
  DI_CHECK(tokens.is_live.empty() || tokens.is_live.size() == tokens.ids.size(),
           "Engram hasher: {} liveness flags for {} tokens", tokens.is_live.size(),
           tokens.ids.size());
  DI_CHECK(history.num_recent >= 0 && history.num_recent < max_ngram_,
           "Engram hasher: corrupt history ({} look-back ids for max_ngram_size {})",
           history.num_recent, max_ngram_);
  const std::size_t num_ids = token_map_.map.size();
  for (std::size_t i = 0; i < tokens.ids.size(); ++i) {
    DI_CHECK(tokens.ids[i] >= 0 && std::size_t(tokens.ids[i]) < num_ids,
             "Engram hasher: token id {} at position {} is outside the tokenizer's {} ids",
             tokens.ids[i], tokens.first_position + std::int64_t(i), num_ids);
  }
}

void engram_hasher::advance(engram_history& history, std::int32_t compressed, bool is_live) const {
  // Only the first max_ngram_size - 1 slots are used and the rest stay zero, so a history
  // depends on nothing but its look-back (history_at rebuilds it byte for byte).
  ++history.next_position;
  if (!is_live) {
    history.num_recent = 0;
    history.recent.fill(0);
    return;
  }
  const auto used_end = history.recent.begin() + (max_ngram_ - 1);
  std::copy_backward(history.recent.begin(), used_end - 1, used_end);
  history.recent[0] = compressed;
  history.num_recent = std::min(history.num_recent + 1, max_ngram_ - 1);
}

void engram_hasher::hash_one(const engram_history& history, std::int32_t compressed, bool is_live,
                             std::int64_t* out) const {
  // [max_ngram] the token at look-back `shift`; pad past the sequence start or a DEAD token.
  std::array<std::uint64_t, engram_history::max_lookback + 1> window;
  const int num_usable = is_live ? history.num_recent : -1;
  window[0] = std::uint64_t(is_live ? compressed : pad_id_);
  for (int shift = 1; shift < max_ngram_; ++shift)
    window[shift] = std::uint64_t(shift <= num_usable ? history.recent[shift - 1] : pad_id_);
  for (int layer = 0; layer < num_layers_; ++layer) {
    const std::int64_t* mult = &multipliers_[std::size_t(layer * max_ngram_)];
    const std::int64_t* primes = &primes_[std::size_t(layer * num_columns_)];
    const std::int64_t* offsets = &offsets_[std::size_t(layer * num_columns_)];
    std::int64_t* row = out + std::ptrdiff_t(layer) * num_columns_;
    // After folding in look-back i the running value hashes the (i+1)-gram.
    std::uint64_t rolling = window[0] * std::uint64_t(mult[0]);
    for (int i = 1; i < max_ngram_; ++i) {
      rolling ^= window[i] * std::uint64_t(mult[i]);
      for (int head = 0; head < n_heads_; ++head) {
        const int col = (i - 1) * n_heads_ + head;
        row[col] = floor_mod(std::int64_t(rolling), primes[col]) + offsets[col];
      }
    }
  }
}

void engram_hasher::hash_into(const engram_tokens& tokens, engram_history& history,
                              std::span<std::int64_t> out) const {
  const std::size_t row_size = std::size_t(num_layers_ * num_columns_);
  DI_CHECK(out.size() == tokens.ids.size() * row_size,
           "Engram hasher: output holds {} ids, {} tokens need {}", out.size(), tokens.ids.size(),
           tokens.ids.size() * row_size);
  check_tokens(tokens, history);
  for (std::size_t i = 0; i < tokens.ids.size(); ++i) {
    const std::int32_t compressed = token_map_.map[std::size_t(tokens.ids[i])];
    const bool is_live = tokens.is_live.empty() || tokens.is_live[i] != 0;
    hash_one(history, compressed, is_live, out.data() + i * row_size);
    advance(history, compressed, is_live);
  }
}

engram_history engram_hasher::history_at(std::int64_t position,
                                         std::span<const tok::token_id> preceding,
                                         std::span<const std::uint8_t> is_live) const {
  DI_CHECK(position >= 0, "Engram hasher: negative position {}", position);
  const auto needed = std::min<std::int64_t>(position, max_ngram_ - 1);
  DI_CHECK(std::int64_t(preceding.size()) >= needed && std::int64_t(preceding.size()) <= position,
           "Engram hasher: rebuilding the history at position {} needs {} to {} preceding tokens, "
           "got {}",
           position, needed, position, preceding.size());
  const std::size_t skip = preceding.size() - std::size_t(needed);
  engram_tokens tail{
      .ids = preceding.subspan(skip), .first_position = position - needed, .is_live = {}};
  if (!is_live.empty()) {
    DI_CHECK(is_live.size() == preceding.size(), "Engram hasher: {} liveness flags for {} tokens",
             is_live.size(), preceding.size());
    tail.is_live = is_live.subspan(skip);
  }
  engram_history history{.next_position = tail.first_position};
  check_tokens(tail, history);
  for (std::size_t i = 0; i < tail.ids.size(); ++i) {
    const bool live = tail.is_live.empty() || tail.is_live[i] != 0;
    advance(history, token_map_.map[std::size_t(tail.ids[i])], live);
  }
  return history;
}

}  // namespace di
