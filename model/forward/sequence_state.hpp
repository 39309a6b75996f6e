// Per-sequence inference state: the bounded slot (window rings, compressor partial groups,
// Engram history; see cache_layout.hpp for the exact bytes) and the paged streams of
// compressed entries and indexer keys in kv_block_pool blocks. Block ids come either from the
// pool's own free lists (a standalone sequence: tests, benchmarks) or from the scheduler's
// block manager through step plans (the model runner, runtime/step_plan.hpp), in which case
// several sequences may share the blocks of a cached prefix and never write them. The pool
// and the slots live on the pool's device (host memory, or CUDA memory for the CUDA
// executor); a CUDA state keeps its Engram history on the host.
#pragma once

#include "kernels/tensor.hpp"
#include "model/engram/hasher.hpp"
#include "model/forward/cache_layout.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace di {

/// Fixed-size blocks of every stream. The free lists serve standalone sequences only; a
/// runner whose block ids come from step plans leaves them untouched. Not thread-safe.
class kv_block_pool {
 public:
  /// `num_blocks[s]` blocks of layout.entries_per_block rows for stream `s`, on `dev`, and
  /// `num_slots` sequence slots in one arena (a sequence created while none is free allocates
  /// its own; the CUDA forward batches decode steps only over sequences with arena slots).
  kv_block_pool(const cache_layout& layout, std::vector<int> num_blocks, device dev = cpu_device,
                int num_slots = 0);
  /// `blocks_per_stream` blocks for every stream.
  kv_block_pool(const cache_layout& layout, int blocks_per_stream, device dev = cpu_device,
                int num_slots = 0);
  kv_block_pool(const kv_block_pool&) = delete;
  kv_block_pool& operator=(const kv_block_pool&) = delete;

  /// A free block of stream `s`; throws di::error when the stream has none left.
  int allocate(int s);
  void release(int s, int block);
  int num_free(int s) const { return int(free_[std::size_t(s)].size()); }
  int num_blocks(int s) const { return num_blocks_[std::size_t(s)]; }
  /// Block `block` of stream `s`: [entries_per_block, row_bytes] u8.
  tensor block(int s, int block) const;
  /// Every block of stream `s`: [num_blocks * entries_per_block, row_bytes] u8 (row r of
  /// block b at b * entries_per_block + r).
  tensor arena(int s) const;
  const cache_layout& layout() const { return layout_; }
  device dev() const { return dev_; }

  /// Sequence slots in the arena (slot i at byte i * slot_stride()).
  int num_slots() const { return num_slots_; }
  std::size_t slot_stride() const { return slot_stride_; }
  /// A free arena slot, or -1 when none is left.
  int acquire_slot();
  void release_slot(int slot);
  /// Slot i's bytes: [layout.slot_bytes] u8.
  tensor slot_memory(int slot) const;
  /// The whole slot arena: [num_slots * slot_stride] u8.
  const tensor& slot_arena() const { return slots_; }
  /// Every window-ring row of the arena as one table, [rows, window row_bytes] u8 from byte
  /// layout.window_offset on; ring_row() names a row of it.
  tensor ring_rows() const;
  std::int64_t ring_row(int slot, int layer, std::int64_t ring_slot) const {
    return std::int64_t(slot) * std::int64_t(slot_stride_ / layout_.window_format.row_bytes()) +
           std::int64_t(layer) * layout_.window + ring_slot;
  }

 private:
  const cache_layout& layout_;
  device dev_;
  std::vector<int> num_blocks_;  // per stream
  std::vector<tensor> arenas_;   // per stream: [num_blocks_[s] * block_bytes] u8 on dev_
  std::vector<std::vector<int>> free_;             // per stream: free block ids
  int num_slots_ = 0;
  std::size_t slot_stride_ = 0;  // a multiple of the window row and of 16 bytes
  tensor slots_;                 // [num_slots * slot_stride] u8 on dev_
  std::vector<int> free_slots_;
};

/// Where a sequence's blocks come from.
enum class block_source : std::uint8_t {
  pool,     ///< the pool's free lists, as the sequence grows; returned when it is destroyed
  planned,  ///< append_blocks (a step plan's new_blocks); the block manager owns them
};

/// The state of one sequence.
class sequence_state {
 public:
  /// A fresh, empty sequence that may grow to `max_tokens` tokens.
  sequence_state(kv_block_pool& pool, std::int64_t max_tokens,
                 block_source source = block_source::pool);
  ~sequence_state();
  sequence_state(const sequence_state&) = delete;
  sequence_state& operator=(const sequence_state&) = delete;

  const cache_layout& layout() const { return pool_.layout(); }
  const kv_block_pool& pool() const { return pool_; }
  device dev() const { return pool_.dev(); }
  std::int64_t num_tokens() const { return num_tokens_; }
  std::int64_t max_tokens() const { return max_tokens_; }

  /// Layer `layer`'s window ring: [window, window_format.row_bytes()] u8.
  tensor window_ring(int layer);
  /// Compressor `c`'s partial group: kv and score, each [rows, width] f32.
  tensor compressor_kv(int c);
  tensor compressor_score(int c);
  /// The Engram look-back of the sequence (Engram models only).
  engram_history& engram();

  /// The whole slot, [layout.slot_bytes] (what a snapshot copies; a device state's is copied
  /// to a host mirror, valid until the next call).
  std::span<const std::uint8_t> slot() const;
  /// Replaces the slot with `bytes` (a snapshot of a slot of the same layout).
  void load_slot(std::span<const std::uint8_t> bytes);

  /// Prefix reuse (block_source::planned, on an empty state): the stream entries of the first
  /// `num_cached_tokens` tokens are in the tables' shared blocks already, so rows at positions
  /// below it ("replay rows") rebuild the slot but never write those entries; the state then
  /// starts at `resume_position` <= num_cached_tokens, its next row's position.
  void adopt_prefix(std::int64_t num_cached_tokens, std::int64_t resume_position);
  std::int64_t num_cached_tokens() const { return num_cached_tokens_; }

  std::int64_t num_entries(int s) const { return num_entries_[std::size_t(s)]; }
  const std::vector<int>& block_table(int s) const { return block_tables_[std::size_t(s)]; }
  /// Appends block ids to stream `s`'s table (block_source::planned only).
  void append_blocks(int s, std::span<const std::int32_t> ids);
  /// Makes stream `s` able to hold `entries` entries: block_source::pool allocates the missing
  /// blocks, block_source::planned checks that the table covers them. Throws (changing
  /// nothing) when it cannot.
  void reserve(int s, std::int64_t entries);
  /// Appends packed rows [n, row_bytes] u8 to stream `s` (reserving as needed); rows of
  /// entries below the cached prefix are counted, not written.
  void append_entries(int s, const tensor& rows);
  /// Rows of pool.arena(s) holding entries [begin, end) of stream `s`: [end - begin] i64.
  std::vector<std::int64_t> entry_rows(int s, std::int64_t begin, std::int64_t end) const;

  /// Counts `n` entries of stream `s` that the caller wrote itself at the pool rows
  /// entry_rows(s, num_entries(s), num_entries(s) + n) (a batched decode step; never rows of a
  /// cached prefix). Throws, changing nothing, when the table does not cover them.
  void commit_entries(int s, std::int64_t n);
  /// The pool slot holding this state, or -1 when it has its own memory.
  int slot_index() const { return slot_index_; }

  /// Records that `n` more tokens were consumed.
  void advance(std::int64_t n);

 private:
  float* slot_floats(std::size_t offset) {
    return reinterpret_cast<float*>(slot_.data<std::uint8_t>() + offset);
  }

  kv_block_pool& pool_;
  block_source source_;
  std::int64_t max_tokens_;
  std::int64_t num_tokens_ = 0;
  std::int64_t num_cached_tokens_ = 0;
  int slot_index_ = -1;                         // the pool's arena slot, or -1
  tensor slot_;                                 // [layout.slot_bytes] u8 on the pool's device
  engram_history engram_host_;                  // a CUDA state's Engram history
  mutable std::vector<std::uint8_t> host_slot_;  // a CUDA state's slot() mirror
  std::vector<std::vector<int>> block_tables_;  // per stream
  std::vector<std::int64_t> num_entries_;       // per stream
};

}  // namespace di
