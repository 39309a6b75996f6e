// Tests of the sequence state and of bad input: the cache layout's byte accounting, block
// pool paging, planned block tables with a shared cached prefix (replay rows read it and never
// write it), and clear errors (that change no state) for token ids outside the vocabulary,
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
  // FP8 nope + scale + fp32 rope = 321 bytes, zero-padded to 16
  CHECK(L4.window_format.payload_bytes() == 64 + 1 + 64 * 4);
  CHECK(L4.window_format.row_bytes() == 336);
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

TEST_CASE("slot arena: slots handed out, fallback when full, ring rows, reuse starts fresh") {
  for (const char* name : {"v41_public", "v4_public"}) {
    CAPTURE(name);
    const cache_layout& L = golden(name).model->layout();
    CHECK_THROWS_WITH_AS(kv_block_pool(L, 4, cpu_device, -1), doctest::Contains("slots"), error);
    kv_block_pool pool(L, 4, cpu_device, 2);
    const std::size_t row = L.window_format.row_bytes();
    CHECK(pool.num_slots() == 2);
    CHECK(pool.slot_stride() >= L.slot_bytes);
    CHECK(pool.slot_stride() % row == 0);  // V4's 321-byte rows included
    CHECK(pool.slot_stride() % 16 == 0);
    CHECK(pool.ring_rows().size(1) == std::int64_t(row));
    auto a = std::make_unique<sequence_state>(pool, 256);
    sequence_state b(pool, 256);
    sequence_state c(pool, 256);  // none left: its own memory
    CHECK(a->slot_index() >= 0);
    CHECK(b.slot_index() >= 0);
    CHECK(a->slot_index() != b.slot_index());
    CHECK(c.slot_index() == -1);
    // ring_row names the bytes window_ring() views, for every layer and ring slot
    for (int layer : {0, L.num_layers - 1})
      for (std::int64_t j : {std::int64_t(0), std::int64_t(L.window - 1)}) {
        const auto* want = b.window_ring(layer).data<std::uint8_t>() + j * std::int64_t(row);
        const auto* got = pool.ring_rows().data<std::uint8_t>() +
                          pool.ring_row(b.slot_index(), layer, j) * std::int64_t(row);
        CHECK(want == got);
      }
    // a state that dirtied its slot, destroyed; the next one reuses the slot, fresh
    const int slot = a->slot_index();
    const std::vector<std::uint8_t> fresh(c.slot().begin(), c.slot().end());
    std::vector<std::uint8_t> dirty(fresh.size(), 0x5a);
    a->load_slot(dirty);
    CHECK(std::equal(dirty.begin(), dirty.end(), a->slot().begin()));
    a.reset();
    sequence_state d(pool, 256);
    CHECK(d.slot_index() == slot);
    CHECK(std::equal(fresh.begin(), fresh.end(), d.slot().begin()));
  }
}

TEST_CASE("commit_entries counts entries written in place, within the block table") {
  const cache_layout& L = golden("v41_public").model->layout();
  kv_block_pool pool(L, 1, cpu_device, 1);
  const int s = L.stream_of(6, stream_kind::compressed_kv);
  sequence_state a(pool, 1024);
  a.commit_entries(s, 3);
  CHECK(a.num_entries(s) == 3);
  CHECK(a.block_table(s).size() == 1);
  CHECK(a.entry_rows(s, 2, 3).front() == std::int64_t(a.block_table(s)[0]) * 64 + 2);
  CHECK_THROWS_WITH_AS(a.commit_entries(s, 62), doctest::Contains("exhausted"), error);
  CHECK(a.num_entries(s) == 3);
  // A planned state over a cached prefix: entries below it are never written by the caller.
  kv_block_pool shared(L, 2);
  sequence_state b(shared, 1024, block_source::planned);
  const std::vector<std::int32_t> ids{0};
  b.append_blocks(s, ids);
  b.adopt_prefix(8, 4);
  CHECK_THROWS_WITH_AS(b.commit_entries(s, 1), doctest::Contains("cached prefix"), error);
  CHECK(b.num_entries(s) == 4);
}

TEST_CASE("CPU forward: states in a slot arena compute what states with their own slots do") {
  golden_case& g = golden("v4_public");
  const deepseek_model& m = *g.model;
  auto run = [&](int slots) {
    kv_block_pool pool(m.layout(), 8, cpu_device, slots);
    sequence_state a(pool, 64), b(pool, 64);
    std::vector<float> out;
    std::vector<std::int64_t> ta{5, 9, 11, 13, 2, 7}, tb{3, 4, 8}, pa{0, 1, 2, 3, 4, 5},
        pb{0, 1, 2};
    std::vector<forward_request> prefill{request_for(a, ta, pa, {5}), request_for(b, tb, pb, {2})};
    m.forward(prefill);
    for (int step = 0; step < 5; ++step) {
      std::vector<std::int64_t> na{20 + step}, nb{40 + step};
      std::vector<std::int64_t> qa{a.num_tokens()}, qb{b.num_tokens()};
      std::vector<forward_request> dec{request_for(a, na, qa, {0}), request_for(b, nb, qb, {0})};
      for (const forward_output& o : m.forward(dec))
        out.insert(out.end(), o.logits.data<float>(), o.logits.data<float>() + o.logits.numel());
    }
    return out;
  };
  const std::vector<float> own = run(0), arena = run(2);
  REQUIRE(own.size() == arena.size());
  CHECK(std::equal(own.begin(), own.end(), arena.begin()));
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

/// A planned state over `blocks[s]` of each stream.
std::unique_ptr<sequence_state> planned_state(
    kv_block_pool& pool, const std::vector<std::vector<std::int32_t>>& blocks) {
  auto state = std::make_unique<sequence_state>(pool, 1024, block_source::planned);
  for (std::size_t s = 0; s < blocks.size(); ++s) state->append_blocks(int(s), blocks[s]);
  return state;
}

/// Bytes of blocks `ids` of every stream (ids[s]), concatenated.
std::vector<std::uint8_t> block_bytes(const kv_block_pool& pool,
                                      const std::vector<std::vector<std::int32_t>>& ids) {
  std::vector<std::uint8_t> out;
  for (std::size_t s = 0; s < ids.size(); ++s)
    for (std::int32_t b : ids[s]) {
      tensor t = pool.block(int(s), b);
      out.insert(out.end(), t.data<std::uint8_t>(), t.data<std::uint8_t>() + t.numel());
    }
  return out;
}

TEST_CASE("planned state: block tables from the caller, shared prefix entries never written") {
  golden_case& g = golden("v41_public");
  const deepseek_model& m = *g.model;
  const cache_layout& L = m.layout();
  kv_block_pool pool(L, 8);
  // 300 tokens: ratio-1 streams need 5 blocks of 64, ratio-2 streams 3.
  auto blocks_for = [&](int first_private, std::int64_t shared_tokens) {
    std::vector<std::vector<std::int32_t>> ids(L.streams.size());
    for (std::size_t s = 0; s < L.streams.size(); ++s) {
      const std::int64_t per = std::int64_t(L.streams[s].ratio) * L.entries_per_block;
      const std::int64_t shared = shared_tokens / per, total = (300 / L.streams[s].ratio + 63) / 64;
      for (std::int64_t i = 0; i < total; ++i)
        ids[s].push_back(i < shared ? std::int32_t(i) : std::int32_t(first_private + i));
    }
    return ids;
  };
  std::vector<std::int64_t> tokens(300), positions;
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = 3 + std::int64_t(i * 7919 % 120000);

  const auto a_blocks = blocks_for(0, 0);
  auto a = planned_state(pool, a_blocks);
  forward_output want = run_one(m, request_for(*a, tokens, positions, {299}));
  const std::vector<std::uint8_t> shared_before = block_bytes(pool, blocks_for(0, 256));

  // B shares A's blocks below P = 256 and resumes at P - R = 256 - 150 from a fresh slot with
  // the Engram history rebuilt: rows 106 .. 255 are replay rows.
  auto b = planned_state(pool, blocks_for(3, 256));
  b->adopt_prefix(256, 106);
  const std::vector<tok::token_id> lookback(tokens.begin() + 103, tokens.begin() + 106);
  b->engram() = m.hasher()->history_at(106, lookback);
  const std::span<const std::int64_t> rest(tokens.begin() + 106, tokens.end());
  forward_output got = run_one(m, request_for(*b, rest, positions, {193}));
  CHECK(b->num_tokens() == 300);
  CHECK(std::equal(got.logits.data<float>(), got.logits.data<float>() + got.logits.numel(),
                   want.logits.data<float>()));
  CHECK(block_bytes(pool, blocks_for(0, 256)) == shared_before);

  // A planned state never takes blocks itself: a forward beyond its table fails cleanly.
  auto c = planned_state(pool, std::vector<std::vector<std::int32_t>>(L.streams.size()));
  std::vector<forward_request> batch{request_for(*c, tokens, positions, {0})};
  CHECK_THROWS_WITH_AS(m.forward(batch), doctest::Contains("more blocks than the plan gave"),
                       error);
  CHECK(c->num_tokens() == 0);
  CHECK_THROWS_WITH_AS(c->append_blocks(0, std::vector<std::int32_t>{8}),
                       doctest::Contains("block 8 of stream 0"), error);
  CHECK_THROWS_WITH_AS(a->adopt_prefix(128, 0), doctest::Contains("fresh, planned state"), error);
}

}  // namespace
}  // namespace di::test
