// What a sequence keeps between forward calls, derived from the model config, split into a
// bounded per-sequence slot and paged growing streams:
//
// Slot (fixed size, one per sequence; bytes = slot_bytes):
//   window ring   [layers][window][window_format.row_bytes()] u8: the last `window` window-KV
//                 rows of every layer, row of position p at p % window. V4.1: FP8 e4m3 of all
//                 head_dim values, e8m0 scale per 32 (head_dim + head_dim/32 bytes, 528 at
//                 512). V4: FP8 of the head_dim - rope dims per 64 plus the rope tail as fp32,
//                 zero-padded to 16 bytes (448 + 7 + 256 = 711, stride 720 at 512/64).
//   compressors   per compressor [rows][width] f32 kv, then [rows][width] f32 score: the
//                 projected rows of the incomplete group (rows = ratio, width = head_dim;
//                 V4 ratio 4 overlaps: rows = 2 * ratio and width = 2 * dim, the first half
//                 keeping the previous complete group). V4.1 ratio 1 needs none.
//   engram        one engram_history (model/engram/hasher.hpp, 40 bytes) on Engram models: the
//                 compressed ids the next token's n-grams look back through.
//
// Streams (paged; one per layer that owns entries, 64 entries per block, a block table per
// sequence and stream, entry e of a stream at block_table[e / 64], row e % 64):
//   compressed KV one entry per `ratio` tokens. V4.1 (KV source layers): FP4 e2m1 with an
//                 e4m3 scale per 16 (head_dim/2 + head_dim/16 bytes: 288 at 512). V4 (every
//                 compressed layer): the window's FP8 + fp32-rope row format (720 at 512/64).
//   index keys    one entry per `ratio` tokens of each layer that owns indexer keys (V4.1 KV
//                 sources that index; V4 ratio-4 layers): FP4 e2m1, e8m0 scale per 32
//                 (index_head_dim/2 + index_head_dim/32 bytes: 68 at 128).
//
// Released V4.1-Flash (40 layers, head_dim 512, window 128, KV sources 2/8/14 at ratio 2 and 20
// at ratio 1): window rings 40 * 128 * 528 B = 2.7 MB and three ratio-2 partial groups of
// 2 * 2 * 512 floats (8 KB each) per sequence; streams 3 * (288 + 68) / 2 + (288 + 68) = 890 B
// per token of context.
#pragma once

#include "config/model_config.hpp"
#include "kernels/cache_format.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace di {

enum class stream_kind : std::uint8_t { compressed_kv, index_keys };

/// One paged stream: the entries one layer appends.
struct cache_stream {
  int layer = 0;
  stream_kind kind = stream_kind::compressed_kv;
  int ratio = 1;  ///< tokens per entry
  cache_row_format format;
};

/// One compressor's partial-group state inside the slot.
struct compressor_slot {
  int layer = 0;
  bool is_indexer = false;  ///< V4: the indexer's own compressor
  int ratio = 1;
  bool overlap = false;
  int rows = 0;            ///< rows of kv (and of score)
  int width = 0;           ///< values per row
  std::size_t offset = 0;  ///< byte offset of kv in the slot; score follows
};

struct cache_layout {
  int num_layers = 0;
  int window = 0;
  cache_row_format window_format;
  std::vector<cache_stream> streams;
  std::vector<compressor_slot> compressors;
  bool has_engram = false;     ///< the slot holds an engram_history
  int entries_per_block = 64;  ///< rows of a stream block

  std::size_t window_offset = 0;  ///< byte offset of the window rings in the slot
  std::size_t engram_offset = 0;  ///< byte offset of the Engram history
  std::size_t slot_bytes = 0;     ///< the whole per-sequence slot

  /// The stream of `kind` that layer `layer` appends to, or -1.
  int stream_of(int layer, stream_kind kind) const;
  /// The compressor slot of `layer` (its indexer's when `is_indexer`), or -1.
  int compressor_of(int layer, bool is_indexer) const;
  /// Bytes of one block of stream `s`.
  std::size_t block_bytes(int s) const;
  /// Stream bytes per token of context, summed over streams (row_bytes / ratio).
  double stream_bytes_per_token() const;
  /// A few lines stating the layout and its sizes.
  std::string describe() const;
};

/// The cache layout `config` implies (entries_per_block rows per stream block).
cache_layout make_cache_layout(const model_config& config, int entries_per_block = 64);

}  // namespace di
