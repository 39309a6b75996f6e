// Tests of the sequence state and of bad input: the cache layout's byte accounting, block
// pool paging, and clear errors (that change no state) for token ids outside the vocabulary,
// positions that do not continue the sequence or exceed max_position_embeddings or the
// state's capacity, an exhausted block pool, missing Engram hash ids.
#include "model/checkpoint/checkpoint.hpp"
#include "tests/model/forward/golden.hpp"

#include <doctest/doctest.h>

namespace di::test {
namespace {

TEST_CASE("cache layout: streams, compressor slots and bytes follow the config") {
  const model_config& c41 = golden("v41_public").model->config();
  const cache_layout L = make_cache_layout(c41);
  // head_dim 128: window FP8 128 + 4 scales; compressed FP4 64 + 8 e4m3; keys 64 + 4
  CHECK(L.window_format.row_bytes() == 132);
  CHECK(L.streams.size() == 6);  // KV sources 2, 4, 6, each also an index source with keys
  CHECK(L.stream_of(2, stream_kind::compressed_kv) >= 0);
  CHECK(L.stream_of(3, stream_kind::compressed_kv) == -1);
  CHECK(L.streams[std::size_t(L.stream_of(6, stream_kind::index_keys))].format.row_bytes() == 68);
  CHECK(L.streams[std::size_t(L.stream_of(2, stream_kind::compressed_kv))].format.row_bytes() ==
        72);
  CHECK(L.compressors.size() == 2);  // ratio-2 sources 2 and 4; ratio 1 needs no state
  CHECK(L.compressor_of(6, false) == -1);
  CHECK(L.has_engram);
  // 10 layers x 16 x 132 window bytes, 2 x (2 x 2 x 128 floats), one engram_history
  CHECK(L.slot_bytes == 10 * 16 * 132 + 2 * 2 * 2 * 128 * 4 + sizeof(engram_history));
  // per token: ratio-2 sources 2 and 4 (72 + 68 each) / 2, ratio-1 source 6 (72 + 68)
  CHECK(L.stream_bytes_per_token() == doctest::Approx(2 * (72 + 68) / 2.0 + 72 + 68));

  const cache_layout L4 = make_cache_layout(golden("v4_public").model->config());
  CHECK(L4.window_format.row_bytes() == 64 + 1 + 64 * 4);  // FP8 nope + scale + fp32 rope
  CHECK(L4.streams.size() == 6);  // layers 2..5 compress; 2 and 4 also keep indexer keys
  const compressor_slot& overlap = L4.compressors[std::size_t(L4.compressor_of(2, false))];
  CHECK(overlap.rows == 8);
  CHECK(overlap.width == 256);
  CHECK(L4.compressors[std::size_t(L4.compressor_of(3, false))].rows == 32);
  CHECK_FALSE(L4.has_engram);
  CHECK(L4.describe().find("index-keys") != std::string::npos);
}

TEST_CASE("block pool: blocks are handed out, exhausted with a clear error, returned") {
  const cache_layout& L = golden("v41_public").model->layout();
  kv_block_pool pool(L, 2);
  const int s = L.stream_of(6, stream_kind::compressed_kv);
  {
    sequence_state a(pool, 1024);
    a.reserve(s, 65);  // two blocks of 64
    CHECK(a.block_table(s).size() == 2);
    CHECK(pool.num_free(s) == 0);
    sequence_state b(pool, 1024);
    CHECK_THROWS_WITH_AS(b.reserve(s, 1), doctest::Contains("exhausted"), error);
    CHECK(b.block_table(s).empty());
  }
  CHECK(pool.num_free(s) == 2);
}

/// A forward of `tokens` at `positions` on a fresh state, expected to fail with `what`.
void expect_rejected(const deepseek_model& m, kv_block_pool& pool, std::int64_t capacity,
                     std::vector<std::int64_t> tokens, std::vector<std::int64_t> positions,
                     const char* what) {
  sequence_state state(pool, capacity);
  forward_request r;
  r.state = &state;
  r.tokens = tokens;
  r.positions = positions;
  r.logit_rows = {0};
  std::vector<forward_request> batch{r};
  CHECK_THROWS_WITH_AS(m.forward(batch), doctest::Contains(what), error);
  CHECK(state.num_tokens() == 0);
  // The state is untouched: a valid request still runs on it.
  std::vector<std::int64_t> ok{0}, pos{0};
  batch[0].tokens = ok;
  batch[0].positions = pos;
  CHECK_NOTHROW(m.forward(batch));
  CHECK(state.num_tokens() == 1);
}

TEST_CASE("bad input: clear errors, no state change") {
  golden_case& g = golden("v41_public");
  const deepseek_model& m = *g.model;
  kv_block_pool pool(m.layout(), 8);
  const std::int64_t vocab = m.config().vocab_size;
  expect_rejected(m, pool, 64, {vocab}, {0}, "outside the vocabulary");
  expect_rejected(m, pool, 64, {-3}, {0}, "outside the vocabulary");
  expect_rejected(m, pool, 64, {5, 6}, {0, 2}, "does not continue the sequence");
  expect_rejected(m, pool, 64, {5}, {1}, "does not continue the sequence");
  expect_rejected(m, pool, 2, {5, 6, 7}, {0, 1, 2}, "capacity");

  kv_block_pool empty(m.layout(), 0);
  sequence_state state(empty, 64);
  std::vector<std::int64_t> tok{5}, pos{0};
  std::vector<forward_request> batch{request_for(state, tok, pos, {0})};
  CHECK_THROWS_WITH_AS(m.forward(batch), doctest::Contains("exhausted"), error);
  CHECK(state.num_tokens() == 0);

  std::vector<forward_request> twice{request_for(state, tok, pos, {0}),
                                     request_for(state, tok, pos, {0})};
  CHECK_THROWS_WITH_AS(m.forward(twice), doctest::Contains("share a sequence state"), error);
}

TEST_CASE("bad input: positions beyond max_position_embeddings") {
  const auto dir = shared_path("testdata/golden/v4_public");
  model_config config = load_model_config(dir.string());
  config.max_position_embeddings = 4;
  auto ckpt = std::make_shared<const checkpoint>(dir);
  deepseek_model m(config, load_model_weights(ckpt, config));
  kv_block_pool pool(m.layout(), 8);
  expect_rejected(m, pool, 64, {1, 2, 3, 4, 5}, {0, 1, 2, 3, 4}, "max_position_embeddings");
}

TEST_CASE("bad input: Engram models need hash ids or a hasher") {
  const auto dir = shared_path("testdata/golden/v41_public");
  model_config config = load_model_config(dir.string());
  auto ckpt = std::make_shared<const checkpoint>(dir);
  deepseek_model m(config, load_model_weights(ckpt, config));  // no hasher attached
  kv_block_pool pool(m.layout(), 8);
  sequence_state state(pool, 64);
  std::vector<std::int64_t> tok{5}, pos{0};
  std::vector<forward_request> batch{request_for(state, tok, pos, {0})};
  CHECK_THROWS_WITH_AS(m.forward(batch), doctest::Contains("engram"), error);
  batch[0].engram_hash_ids = tensor::zeros({1, 2, 23}, dtype::i64);  // wrong column count
  CHECK_THROWS_WITH_AS(m.forward(batch), doctest::Contains("engram hash ids"), error);
  CHECK(state.num_tokens() == 0);
  batch[0].engram_hash_ids = tensor::zeros({1, 2, 24}, dtype::i64);
  CHECK_NOTHROW(m.forward(batch));
  CHECK(state.num_tokens() == 1);
}

}  // namespace
}  // namespace di::test
