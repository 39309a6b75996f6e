// Byte-level BPE on token ids: a piece's bytes start as the 256 byte tokens and the adjacent
// pair with the lowest merge rank (leftmost on ties) is merged until none applies, which is
// what HF's heap-based Word::merge_all computes. Merge lookups go through a flat hash table
// keyed by (left id, right id); a bounded per-thread cache maps recent pieces to their ids.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace di::tok::detail {

/// Rank and result of merging one (left, right) pair.
struct merge_rule {
  std::uint32_t rank;
  std::uint32_t merged_id;
};

/// Open-addressing map (left id, right id) -> merge_rule; built once, read-only after.
class merge_table {
 public:
  /// Adds or replaces (a later duplicate overrides, as HF's HashMap collect does).
  void insert(std::uint32_t left, std::uint32_t right, merge_rule rule);
  const merge_rule* find(std::uint32_t left, std::uint32_t right) const {
    if (slots_.empty()) return nullptr;
    std::uint64_t key = make_key(left, right);
    for (std::size_t i = slot_of(key);; i = (i + 1) & mask_) {
      const slot& s = slots_[i];
      if (s.key == key) return &s.rule;
      if (s.key == k_empty) return nullptr;
    }
  }
  std::size_t size() const { return size_; }

 private:
  struct slot {
    std::uint64_t key;
    merge_rule rule;
  };
  static constexpr std::uint64_t k_empty = ~std::uint64_t(0);
  static std::uint64_t make_key(std::uint32_t l, std::uint32_t r) {
    return (std::uint64_t(l) << 32) | r;
  }
  std::size_t slot_of(std::uint64_t key) const {
    return std::size_t((key * 0x9E3779B97F4A7C15ull) >> 32) & mask_;
  }
  void grow();

  std::vector<slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

/// Bounded cache piece bytes -> ids; cleared wholesale when full (cheap, and adapts to the
/// text at hand). Not thread-safe: each thread owns one.
class word_cache {
 public:
  static constexpr std::size_t k_max_key_bytes = 128;

  explicit word_cache(std::size_t num_slots_log2 = 16);
  /// Appends the cached ids of `key` to `out`; false if absent.
  bool find(std::string_view key, std::uint64_t hash, std::vector<std::int32_t>& out) const;
  void insert(std::string_view key, std::uint64_t hash, std::span<const std::int32_t> ids);
  void clear();

 private:
  struct slot {
    std::uint64_t hash;  // 0 marks an empty slot
    std::uint32_t key_offset;
    std::uint32_t ids_offset;
    std::uint16_t key_size;
    std::uint16_t num_ids;
  };

  std::vector<slot> slots_;
  std::size_t mask_;
  std::size_t num_entries_ = 0;
  std::string keys_;
  std::vector<std::int32_t> ids_;
};

/// A fast 64-bit hash of a short byte string; never 0.
std::uint64_t hash_bytes(std::string_view bytes);

/// Scratch buffers for merging, owned by the caller (one per thread).
struct bpe_scratch {
  std::vector<std::uint32_t> symbols;
  std::vector<merge_rule> rules;   // rule of each adjacent pair (small path)
  std::vector<std::int32_t> prev;  // linked list (heap path)
  std::vector<std::int32_t> next;
  std::vector<std::uint64_t> heap;  // (rank << 32 | position), a min-heap
};

/// Merges `symbols` in place (removed symbols are erased). Picks the strategy by length.
void bpe_merge(const merge_table& merges, std::vector<std::uint32_t>& symbols,
               bpe_scratch& scratch);
/// The quadratic scan used for short pieces (exposed so tests can compare the two).
void bpe_merge_scan(const merge_table& merges, std::vector<std::uint32_t>& symbols,
                    bpe_scratch& scratch);
/// The linked-list + heap strategy used for long pieces.
void bpe_merge_heap(const merge_table& merges, std::vector<std::uint32_t>& symbols,
                    bpe_scratch& scratch);

}  // namespace di::tok::detail
