// engram_hasher against the official hash ids in v41_public/expected.safetensors, and the
// incremental contract: chunked prefill, decode steps and rebuilt histories all give the
// one-shot ids; DEAD tokens cut n-grams; bad input is a clear error that changes nothing.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "model/engram/hasher.hpp"
#include "tests/model/engram/engram_fixture.hpp"

namespace {

using namespace di::test;
using di::tok::token_id;

/// The official token map from expected.safetensors, so that these tests check the hashing
/// alone (test_token_map.cpp checks the map build).
di::engram_token_map golden_token_map() {
  const std::vector<std::int32_t>& map = engram_golden_outputs().token_map;
  return {.map = map, .num_compressed = *std::max_element(map.begin(), map.end()) + 1};
}

const di::engram_hasher& golden_hasher() {
  static const di::engram_hasher hasher(engram_golden_config().engram, golden_token_map());
  return hasher;
}

std::vector<token_id> golden_tokens() {
  const auto& ids = engram_golden_outputs().input_ids;
  return {ids.begin(), ids.end()};
}

/// Hashes `tokens` from position 0 in chunks of `chunk` tokens through one history.
std::vector<std::int64_t> hash_in_chunks(const std::vector<token_id>& tokens, std::size_t chunk) {
  const di::engram_hasher& hasher = golden_hasher();
  di::engram_history history;
  std::vector<std::int64_t> out;
  for (std::size_t begin = 0; begin < tokens.size(); begin += chunk) {
    const std::size_t n = std::min(chunk, tokens.size() - begin);
    auto part = hasher.hash(std::span(tokens).subspan(begin, n), std::int64_t(begin), history);
    out.insert(out.end(), part.begin(), part.end());
  }
  CHECK(history.next_position == std::int64_t(tokens.size()));
  return out;
}

TEST_CASE("hash ids equal the official engram_hash_ids at every position") {
  const engram_golden& golden = engram_golden_outputs();
  const di::engram_hasher& hasher = golden_hasher();
  REQUIRE(golden.hash_shape == std::vector<std::int64_t>{233, 2, 24});
  REQUIRE(hasher.num_layers() == 2);
  REQUIRE(hasher.num_columns() == 24);
  CHECK(hasher.pad_id() == engram_golden_outputs().token_map[2]);
  di::engram_history history;
  const std::vector<std::int64_t> ids = hasher.hash(golden_tokens(), 0, history);
  REQUIRE(ids.size() == golden.hash_ids.size());
  int num_bad_positions = 0;
  for (std::size_t pos = 0; pos < 233; ++pos) {
    const auto row = std::span(ids).subspan(pos * 48, 48);
    const auto want = std::span(golden.hash_ids).subspan(pos * 48, 48);
    if (std::equal(row.begin(), row.end(), want.begin())) continue;
    if (++num_bad_positions <= 5) {
      const auto first = std::mismatch(row.begin(), row.end(), want.begin());
      const auto col = first.first - row.begin();
      FAIL_CHECK("position " << pos << " column " << col << ": got " << *first.first
                             << ", official " << *first.second);
    }
  }
  CHECK(num_bad_positions == 0);
}

TEST_CASE("end to end: tokenizer, built map and hasher give the official ids") {
  const di::engram_hasher hasher(engram_golden_config().engram,
                                 di::build_engram_token_map(engram_tokenizer()));
  di::engram_history history;
  CHECK(hasher.hash(golden_tokens(), 0, history) == engram_golden_outputs().hash_ids);
}

TEST_CASE("chunked prefill and decode steps equal the one-shot pass") {
  const std::vector<token_id> tokens = golden_tokens();
  const std::vector<std::int64_t> one_shot = hash_in_chunks(tokens, tokens.size());
  CHECK(one_shot == engram_golden_outputs().hash_ids);
  for (std::size_t chunk : {1, 2, 3, 7, 64, 232}) {
    CAPTURE(chunk);
    CHECK(hash_in_chunks(tokens, chunk) == one_shot);
  }
}

TEST_CASE("history_at rebuilds the look-back after a rollback") {
  const std::vector<token_id> tokens = golden_tokens();
  const di::engram_hasher& hasher = golden_hasher();
  const std::vector<std::int64_t>& want = engram_golden_outputs().hash_ids;
  for (std::int64_t position : {0, 1, 2, 3, 4, 100, 232}) {
    CAPTURE(position);
    // Callers may pass just the last max_ngram_size - 1 tokens or the whole prefix.
    const auto prefix = std::span(tokens).first(std::size_t(position));
    const auto last = prefix.last(std::min<std::size_t>(prefix.size(), 3));
    di::engram_history streamed;
    hasher.hash(prefix, 0, streamed);
    for (auto preceding : {prefix, last}) {
      di::engram_history history = hasher.history_at(position, preceding);
      CHECK(std::memcmp(&history, &streamed, sizeof(history)) == 0);
      const auto rest = std::span(tokens).subspan(std::size_t(position));
      const auto ids = hasher.hash(rest, position, history);
      CHECK(std::equal(ids.begin(), ids.end(), want.begin() + position * 48));
    }
  }
  const token_id two[] = {5, 6};
  CHECK_THROWS_AS(hasher.history_at(10, two), di::error);  // needs 3 tokens of look-back
  CHECK_THROWS_AS(hasher.history_at(1, two), di::error);   // more tokens than positions
}

TEST_CASE("a DEAD token cuts every n-gram through it") {
  const di::engram_hasher& hasher = golden_hasher();
  const std::vector<token_id> tokens = golden_tokens();
  const std::size_t dead = 40;
  std::vector<std::uint8_t> is_live(tokens.size(), 1);
  is_live[dead] = 0;
  di::engram_history history;
  std::vector<std::int64_t> ids(tokens.size() * 48);
  hasher.hash_into({.ids = tokens, .first_position = 0, .is_live = is_live}, history, ids);
  const std::vector<std::int64_t>& want = engram_golden_outputs().hash_ids;
  // Before it: unchanged.
  CHECK(std::equal(ids.begin(), ids.begin() + dead * 48, want.begin()));
  // Its own row: the all-pad n-gram, as hashed for a lone pad token at position 0.
  di::engram_history fresh;
  const token_id pad[] = {token_id(engram_golden_config().engram.pad_token_id)};
  const auto pad_row = hasher.hash(pad, 0, fresh);
  CHECK(std::equal(pad_row.begin(), pad_row.end(), ids.begin() + dead * 48));
  // After it: as if the sequence started right after the dead token.
  di::engram_history restart;
  const auto after = hasher.hash(std::span(tokens).subspan(dead + 1), 0, restart);
  CHECK(std::equal(after.begin(), after.end(), ids.begin() + (dead + 1) * 48));
}

TEST_CASE("bad input is a clear error and leaves the history unchanged") {
  const di::engram_hasher& hasher = golden_hasher();
  const std::vector<token_id> tokens = golden_tokens();
  di::engram_history history;
  hasher.hash(std::span(tokens).first(5), 0, history);
  const di::engram_history before = history;
  const token_id unknown[] = {7, 128815};
  CHECK_THROWS_WITH_AS(hasher.hash(unknown, 5, history),
                       doctest::Contains("token id 128815 at position 6"), di::error);
  CHECK_THROWS_WITH_AS(hasher.hash(std::span(tokens).subspan(6, 2), 6, history),
                       doctest::Contains("expects position 5"), di::error);
  std::vector<std::int64_t> small(47);
  CHECK_THROWS_AS(
      hasher.hash_into({.ids = std::span(tokens).subspan(5, 1), .first_position = 5, .is_live = {}},
                       history, small),
      di::error);
  CHECK(history.next_position == before.next_position);
  CHECK(history.num_recent == before.num_recent);
  CHECK(history.recent == before.recent);
}

TEST_CASE("a tokenizer whose compressed size differs from the config is rejected") {
  di::engram_config config = engram_golden_config().engram;
  config.compressed_vocab_size = 98626;
  CHECK_THROWS_WITH_AS(di::engram_hasher(config, golden_token_map()),
                       doctest::Contains("compressed vocabulary has 98627 entries but the config's "
                                         "engram_compressed_vocab_size is 98626"),
                       di::error);
  config = engram_golden_config().engram;
  config.pad_token_id = 128815;
  CHECK_THROWS_AS(di::engram_hasher(config, golden_token_map()), di::error);
  config = engram_golden_config().engram;
  config.max_ngram_size = 9;
  CHECK_THROWS_AS(di::engram_hasher(config, golden_token_map()), di::error);
}

}  // namespace
