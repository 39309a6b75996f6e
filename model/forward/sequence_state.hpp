// Per-sequence inference state: the bounded slot (window rings, compressor partial groups,
// Engram history; see cache_layout.hpp for the exact bytes) and the paged streams of
// compressed entries and indexer keys, whose blocks come from a kv_block_pool that the
// actor runtime can size, share between sequences and page.
#pragma once

#include "kernels/tensor.hpp"
#include "model/engram/hasher.hpp"
#include "model/forward/cache_layout.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace di {

/// Fixed-size blocks of every stream, handed out to sequences. Not thread-safe: one
/// scheduler owns it.
class kv_block_pool {
 public:
  /// `blocks_per_stream` blocks of layout.entries_per_block rows for every stream.
  kv_block_pool(const cache_layout& layout, int blocks_per_stream);
  kv_block_pool(const kv_block_pool&) = delete;
  kv_block_pool& operator=(const kv_block_pool&) = delete;

  /// A free block of stream `s`; throws di::error when the stream has none left.
  int allocate(int s);
  void release(int s, int block);
  int num_free(int s) const { return int(free_[std::size_t(s)].size()); }
  int blocks_per_stream() const { return blocks_per_stream_; }
  /// Block `block` of stream `s`: [entries_per_block, row_bytes] u8.
  tensor block(int s, int block) const;
  const cache_layout& layout() const { return layout_; }

 private:
  const cache_layout& layout_;
  int blocks_per_stream_;
  std::vector<std::vector<std::uint8_t>> arenas_;  // per stream: blocks_per_stream blocks
  std::vector<std::vector<int>> free_;             // per stream: free block ids
};

/// The state of one sequence. Its blocks go back to the pool when it is destroyed.
class sequence_state {
 public:
  /// A fresh, empty sequence that may grow to `max_tokens` tokens.
  sequence_state(kv_block_pool& pool, std::int64_t max_tokens);
  ~sequence_state();
  sequence_state(const sequence_state&) = delete;
  sequence_state& operator=(const sequence_state&) = delete;

  const cache_layout& layout() const { return pool_.layout(); }
  std::int64_t num_tokens() const { return num_tokens_; }
  std::int64_t max_tokens() const { return max_tokens_; }

  /// Layer `layer`'s window ring: [window, window_format.row_bytes()] u8.
  tensor window_ring(int layer);
  /// Compressor `c`'s partial group: kv and score, each [rows, width] f32.
  tensor compressor_kv(int c);
  tensor compressor_score(int c);
  /// The Engram look-back of the sequence (Engram models only).
  engram_history& engram();

  std::int64_t num_entries(int s) const { return num_entries_[std::size_t(s)]; }
  const std::vector<int>& block_table(int s) const { return block_tables_[std::size_t(s)]; }
  /// Allocates blocks so that stream `s` can hold `entries` entries; throws (allocating
  /// nothing) when the pool cannot provide them.
  void reserve(int s, std::int64_t entries);
  /// Appends packed rows [n, row_bytes] u8 to stream `s` (reserving as needed).
  void append_entries(int s, const tensor& rows);
  /// Entries [begin, end) of stream `s` gathered into [end - begin, row_bytes] u8.
  tensor read_entries(int s, std::int64_t begin, std::int64_t end) const;

  /// Records that `n` more tokens were consumed.
  void advance(std::int64_t n);

 private:
  float* slot_floats(std::size_t offset) { return reinterpret_cast<float*>(slot_.data() + offset); }

  kv_block_pool& pool_;
  std::int64_t max_tokens_;
  std::int64_t num_tokens_ = 0;
  std::vector<std::uint8_t> slot_;              // [layout.slot_bytes]
  std::vector<std::vector<int>> block_tables_;  // per stream
  std::vector<std::int64_t> num_entries_;       // per stream
};

}  // namespace di
