// The shape of a sequence's caches as the scheduler sees it, without any bytes: the paged
// streams (one entry per `ratio` tokens, entries_per_block entries per block), the prefix-cache
// unit that lines all streams up, and what restoring a cached prefix must rebuild (the sliding
// window, overlapping compressors, the Engram look-back). Derived from the CPU engine's
// cache_layout so that the scheduler's block counts and the executors' block tables agree.
#pragma once

#include <cstdint>
#include <vector>

namespace di {
struct cache_layout;
}

namespace di::runtime {

struct kv_geometry {
  std::vector<int> stream_ratios;  ///< tokens per entry of each paged stream (cache_layout order)
  int entries_per_block = 64;      ///< entries of one stream block
  int num_layers = 1;              ///< layers with a sliding window (all of them in V4/V4.1)
  int window = 1;  ///< sliding-window length (positions a token attends, itself included)
  int max_overlap_ratio = 0;  ///< largest ratio of an overlapping compressor (V4: 4); 0 = none
  int engram_lookback = 0;    ///< tokens an Engram n-gram looks back (max_ngram_size - 1); 0 = none

  int num_streams() const { return int(stream_ratios.size()); }

  /// L, the prefix-cache unit in tokens: the least common multiple of ratio * entries_per_block
  /// over the streams (entries_per_block when there are none). At a multiple of L every stream
  /// block is full, so cached prefixes share whole, immutable blocks and never copy one.
  /// V4.1 (ratios 1 and 2, 64 entries): 128 tokens. V4 (ratios 4 and 128): 8192 tokens.
  std::int64_t token_block_size() const;
  /// Blocks of stream `s` that one token block covers: L / (ratio * entries_per_block).
  std::int64_t blocks_per_token_block(int s) const;
  /// Entries stream `s` holds after `num_tokens` tokens: num_tokens / ratio (integer division).
  std::int64_t num_entries(int s, std::int64_t num_tokens) const;
  /// Blocks stream `s` needs for `num_tokens` tokens: ceil(num_entries / entries_per_block).
  std::int64_t num_blocks(int s, std::int64_t num_tokens) const;

  /// R, the tokens a bounded replay recomputes before a cached boundary P with a fresh slot so
  /// that the window rings and compressor states at P come out exactly as in the original run:
  ///   R = (num_layers - 1) * (window - 1) + max(window - 1, max_overlap_ratio).
  /// Why (the proof is in runtime/block_manager.hpp): garbage in the slot at the replay start
  /// S reaches one layer deeper every window - 1 positions, and the state at P reads layer
  /// inputs at positions P - max(window - 1, overlap) .. P - 1.
  std::int64_t replay_span() const;

  /// Throws di::error unless ratios, entries_per_block, layers and window are positive.
  void validate() const;
};

/// The geometry of `layout` (model/forward/cache_layout.hpp); `engram_max_ngram_size` is the
/// config's engram.max_ngram_size (ignored when the layout has no Engram history).
kv_geometry make_kv_geometry(const di::cache_layout& layout, int engram_max_ngram_size);

}  // namespace di::runtime
