// kv_geometry: block arithmetic of the paged streams and the bounded-replay span.
#include "runtime/kv_geometry.hpp"

#include "common/error.hpp"
#include "model/forward/cache_layout.hpp"

#include <algorithm>
#include <numeric>

namespace di::runtime {

std::int64_t kv_geometry::token_block_size() const {
  std::int64_t l = entries_per_block;
  for (int r : stream_ratios) l = std::lcm(l, std::int64_t(r) * entries_per_block);
  return l;
}

std::int64_t kv_geometry::blocks_per_token_block(int s) const {
  return token_block_size() / (std::int64_t(stream_ratios[std::size_t(s)]) * entries_per_block);
}

std::int64_t kv_geometry::num_entries(int s, std::int64_t num_tokens) const {
  return num_tokens / stream_ratios[std::size_t(s)];
}

std::int64_t kv_geometry::num_blocks(int s, std::int64_t num_tokens) const {
  return (num_entries(s, num_tokens) + entries_per_block - 1) / entries_per_block;
}

std::int64_t kv_geometry::replay_span() const {
  const std::int64_t w = window - 1;  // earlier positions a token's window reaches
  return std::int64_t(num_layers - 1) * w + std::max<std::int64_t>(w, max_overlap_ratio);
}

void kv_geometry::validate() const {
  DI_CHECK(entries_per_block > 0, "kv geometry: entries_per_block must be positive, got {}",
           entries_per_block);
  DI_CHECK(num_layers > 0 && window > 0, "kv geometry: {} layers, window {}", num_layers, window);
  DI_CHECK(max_overlap_ratio >= 0 && engram_lookback >= 0,
           "kv geometry: negative overlap ratio {} or Engram look-back {}", max_overlap_ratio,
           engram_lookback);
  for (std::size_t s = 0; s < stream_ratios.size(); ++s)
    DI_CHECK(stream_ratios[s] > 0, "kv geometry: stream {} has ratio {}", s, stream_ratios[s]);
}

kv_geometry make_kv_geometry(const di::cache_layout& layout, int engram_max_ngram_size) {
  kv_geometry g;
  for (const cache_stream& s : layout.streams) g.stream_ratios.push_back(s.ratio);
  g.entries_per_block = layout.entries_per_block;
  g.num_layers = layout.num_layers;
  g.window = layout.window;
  for (const compressor_slot& c : layout.compressors)
    if (c.overlap) g.max_overlap_ratio = std::max(g.max_overlap_ratio, c.ratio);
  g.engram_lookback = layout.has_engram ? std::max(0, engram_max_ngram_size - 1) : 0;
  g.validate();
  return g;
}

}  // namespace di::runtime
