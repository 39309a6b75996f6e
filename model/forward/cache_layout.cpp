// Derives the cache layout from the config: which layers own compressors, streams and
// indexer keys in each family, the row formats of their quantized caches, and the byte
// offsets of the per-sequence slot.
#include "model/forward/cache_layout.hpp"

#include "common/error.hpp"
#include "model/engram/hasher.hpp"

#include <fmt/format.h>

namespace di {

namespace {

std::size_t align8(std::size_t n) {
  return (n + 7) / 8 * 8;
}

std::size_t engram_bytes(const cache_layout& L) {
  return L.has_engram ? sizeof(engram_history) : 0;
}

/// V4.1 window rows: FP8 of every value, ue8m0 per 32 (the activation block size).
/// V4: FP8 of the non-rope values per 64, rope tail fp32, rows padded to 16 bytes (711 -> 720
/// at 512/64: the attention kernel stages 16-byte-aligned rows; unpadded, it decodes every
/// value from global memory, about 3x slower).
cache_row_format window_format_of(const model_config& c) {
  if (c.is_v41()) return {cache_quant::fp8_ue8m0, 32, c.head_dim, 0};
  return {cache_quant::fp8_ue8m0, 64, c.head_dim - c.rope_head_dim, c.rope_head_dim, 16};
}

cache_row_format compressed_format_of(const model_config& c) {
  if (c.is_v41()) return {cache_quant::fp4_e4m3, 16, c.head_dim, 0};
  return window_format_of(c);
}

void add_compressor(cache_layout& L, const model_config& c, int l, bool indexer, int dim) {
  compressor_slot s;
  s.layer = l;
  s.is_indexer = indexer;
  s.ratio = c.compress_ratio(l);
  s.overlap = c.has_overlap(l);
  s.rows = (s.overlap ? 2 : 1) * s.ratio;
  s.width = (s.overlap ? 2 : 1) * dim;
  L.compressors.push_back(s);
}

void add_streams(cache_layout& L, const model_config& c) {
  const cache_row_format keys{cache_quant::fp4_ue8m0, 32, c.index_head_dim, 0};
  for (int l = 0; l < c.num_layers; ++l) {
    const int r = c.compress_ratio(l);
    if (r == 0) continue;
    const bool owns_kv = c.is_v41() ? c.is_kv_source(l) : true;
    if (!owns_kv) continue;
    L.streams.push_back({l, stream_kind::compressed_kv, r, compressed_format_of(c)});
    if (c.is_v41() && r > 1) add_compressor(L, c, l, false, c.head_dim);
    if (!c.is_v41()) add_compressor(L, c, l, false, c.head_dim);
    if (c.has_indexer(l)) {
      L.streams.push_back({l, stream_kind::index_keys, r, keys});
      if (!c.is_v41()) add_compressor(L, c, l, true, c.index_head_dim);
    }
  }
}

}  // namespace

cache_layout make_cache_layout(const model_config& c, int entries_per_block) {
  DI_CHECK(entries_per_block > 0, "cache layout: {} entries per block", entries_per_block);
  DI_CHECK(c.sliding_window > 0, "cache layout: sliding_window must be positive");
  cache_layout L;
  L.num_layers = c.num_layers;
  L.window = c.sliding_window;
  L.window_format = window_format_of(c);
  L.entries_per_block = entries_per_block;
  L.has_engram = !c.engram.layer_ids.empty();
  add_streams(L, c);
  std::size_t at = 0;
  L.window_offset = at;
  at = align8(at + std::size_t(L.num_layers) * std::size_t(L.window) * L.window_format.row_bytes());
  for (compressor_slot& s : L.compressors) {
    s.offset = at;
    at += 2 * std::size_t(s.rows) * std::size_t(s.width) * sizeof(float);
  }
  L.engram_offset = at;
  if (L.has_engram) at += sizeof(engram_history);
  L.slot_bytes = at;
  return L;
}

int cache_layout::stream_of(int layer, stream_kind kind) const {
  for (std::size_t i = 0; i < streams.size(); ++i)
    if (streams[i].layer == layer && streams[i].kind == kind) return int(i);
  return -1;
}

int cache_layout::compressor_of(int layer, bool is_indexer) const {
  for (std::size_t i = 0; i < compressors.size(); ++i)
    if (compressors[i].layer == layer && compressors[i].is_indexer == is_indexer) return int(i);
  return -1;
}

std::size_t cache_layout::block_bytes(int s) const {
  return std::size_t(entries_per_block) * streams[std::size_t(s)].format.row_bytes();
}

double cache_layout::stream_bytes_per_token() const {
  double total = 0.0;
  for (const cache_stream& s : streams) total += double(s.format.row_bytes()) / s.ratio;
  return total;
}

std::string cache_layout::describe() const {
  std::string out = fmt::format(
      "slot: {} bytes per sequence (window {} x {} layers x {} B, {} compressor states, "
      "{} engram history bytes)\n",
      slot_bytes, window, num_layers, window_format.row_bytes(), compressors.size(),
      engram_bytes(*this));
  for (const cache_stream& s : streams)
    out += fmt::format("stream layer {} {}: 1 entry / {} tokens, {} B per entry\n", s.layer,
                       s.kind == stream_kind::compressed_kv ? "compressed-kv" : "index-keys",
                       s.ratio, s.format.row_bytes());
  out += fmt::format("streams: {:.1f} B per token of context, {} entries per block\n",
                     stream_bytes_per_token(), entries_per_block);
  return out;
}

}  // namespace di
