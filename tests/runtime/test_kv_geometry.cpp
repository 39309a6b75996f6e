// Block arithmetic of the paged streams and the bounded-replay span, on hand-built layouts
// with the numbers of the released models and of tiny-v41.
#include "model/forward/cache_layout.hpp"
#include "runtime/kv_geometry.hpp"

#include <doctest/doctest.h>

using di::runtime::kv_geometry;

namespace {

/// A cache_layout with only the fields make_kv_geometry reads.
di::cache_layout layout_of(std::vector<int> ratios, int layers, int window, bool engram,
                           std::vector<std::pair<int, bool>> compressors = {}) {
  di::cache_layout L;
  L.num_layers = layers;
  L.window = window;
  L.has_engram = engram;
  for (int r : ratios) L.streams.push_back({.ratio = r});
  for (auto [r, overlap] : compressors) L.compressors.push_back({.ratio = r, .overlap = overlap});
  return L;
}

}  // namespace

TEST_CASE("V4.1-Flash: 128-token blocks, a 5080-token replay") {
  // KV sources at ratio 2 (three, with index keys) and one at ratio 1.
  kv_geometry g = di::runtime::make_kv_geometry(
      layout_of({2, 2, 2, 2, 2, 2, 1, 1}, 40, 128, true, {{2, false}, {2, false}, {2, false}}), 4);
  CHECK(g.token_block_size() == 128);
  CHECK(g.blocks_per_token_block(0) == 1);
  CHECK(g.blocks_per_token_block(6) == 2);
  CHECK(g.engram_lookback == 3);
  CHECK(g.max_overlap_ratio == 0);
  CHECK(g.replay_span() == 39 * 127 + 127);
}

TEST_CASE("V4: ratio-128 streams make 8192-token blocks; overlap enters the replay") {
  kv_geometry g = di::runtime::make_kv_geometry(
      layout_of({4, 4, 128}, 4, 128, false, {{4, true}, {4, true}, {128, false}}), 0);
  CHECK(g.token_block_size() == 8192);
  CHECK(g.blocks_per_token_block(0) == 32);
  CHECK(g.blocks_per_token_block(2) == 1);
  CHECK(g.engram_lookback == 0);
  CHECK(g.max_overlap_ratio == 4);
  CHECK(g.replay_span() == 3 * 127 + 127);
  // A window shorter than the overlapping group: the group decides the last term.
  kv_geometry narrow = g;
  narrow.window = 3;
  CHECK(narrow.replay_span() == 3 * 2 + 4);
}

TEST_CASE("tiny-v41 replays 310 tokens") {
  kv_geometry g = di::runtime::make_kv_geometry(
      layout_of({2, 2, 2, 1, 1}, 10, 32, true, {{2, false}, {2, false}}), 4);
  CHECK(g.replay_span() == 9 * 31 + 31);
  CHECK(g.token_block_size() == 128);
}

TEST_CASE("entries and blocks per stream") {
  kv_geometry g{.stream_ratios = {1, 2, 4}, .entries_per_block = 4};
  CHECK(g.token_block_size() == 16);
  CHECK(g.num_entries(0, 7) == 7);
  CHECK(g.num_entries(1, 7) == 3);
  CHECK(g.num_entries(2, 7) == 1);
  CHECK(g.num_blocks(0, 0) == 0);
  CHECK(g.num_blocks(0, 4) == 1);
  CHECK(g.num_blocks(0, 5) == 2);
  CHECK(g.num_blocks(1, 9) == 1);   // 4 entries
  CHECK(g.num_blocks(1, 10) == 2);  // 5 entries
  CHECK(g.num_blocks(2, 15) == 1);  // 3 entries
  CHECK(g.num_blocks(2, 16) == 1);
  CHECK(g.num_blocks(2, 20) == 2);
  kv_geometry none{.entries_per_block = 64};
  CHECK(none.token_block_size() == 64);
}

TEST_CASE("invalid geometries are rejected") {
  kv_geometry g{.stream_ratios = {0}};
  CHECK_THROWS(g.validate());
  kv_geometry w{.stream_ratios = {1}, .window = 0};
  CHECK_THROWS(w.validate());
}
