// build_engram_token_map against the official map in v41_public/expected.safetensors: every
// id, the compressed size, and how long the build takes (it runs at every model load).
#include <doctest/doctest.h>

#include <chrono>
#include <ctime>
#include <sstream>

#include "model/engram/normalize.hpp"
#include "tests/model/engram/engram_fixture.hpp"

namespace {

using namespace di::test;

TEST_CASE("token map equals the official map for every token id") {
  const auto& golden = engram_golden_outputs().token_map;
  const di::engram_token_map& built = engram_built_map();
  REQUIRE(golden.size() == 128815);
  REQUIRE(built.map.size() == golden.size());
  std::size_t num_mismatches = 0;
  std::ostringstream first;
  for (std::size_t id = 0; id < golden.size(); ++id) {
    if (built.map[id] == golden[id]) continue;
    if (++num_mismatches <= 10) {
      const di::tok::token_id ids[1] = {di::tok::token_id(id)};
      first << "  id " << id << " text '" << engram_tokenizer().decode(ids) << "' normalized '"
            << di::engram_normalize(engram_tokenizer().decode(ids)) << "': got " << built.map[id]
            << ", official " << golden[id] << "\n";
    }
  }
  INFO("first mismatches:\n" << first.str());
  CHECK(num_mismatches == 0);
  CHECK(built.num_compressed == 98627);
  CHECK(built.num_compressed == engram_golden_config().engram.compressed_vocab_size);
}

TEST_CASE("token map merges case and leading-space variants and keeps byte tokens apart") {
  const auto& tok = engram_tokenizer();
  const auto& map = engram_built_map().map;
  auto id_of = [&](const char* token) {
    auto id = tok.token_to_id(token);
    REQUIRE_MESSAGE(id.has_value(), "no token " << token);
    return map[std::size_t(*id)];
  };
  // "Ġ" is the byte-level form of a leading space.
  CHECK(id_of("the") == id_of("\xc4\xa0the"));
  CHECK(id_of("the") == id_of("The"));
  CHECK(id_of("the") != id_of("then"));
  // The letter ä (byte-level "Ã¤") folds into "a"; the partial UTF-8 token of byte 0xE4
  // (byte-level "ä") decodes to U+FFFD and keys by its raw form instead.
  CHECK(id_of("\xc3\x83\xc2\xa4") == id_of("a"));
  CHECK(id_of("\xc3\xa4") != id_of("a"));
  CHECK(id_of("\xc3\xa4") != id_of("\xc3\xa5"));
}

TEST_CASE("token map build time") {
  di::engram_normalize("warm up");  // ICU's one-time data load is not part of the build
  const auto start = std::chrono::steady_clock::now();
  const std::clock_t cpu_start = std::clock();
  const di::engram_token_map map = di::build_engram_token_map(engram_tokenizer());
  const double cpu_ms = double(std::clock() - cpu_start) * 1000.0 / CLOCKS_PER_SEC;
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("build_engram_token_map: " << map.map.size() << " ids -> " << map.num_compressed
                                     << " compressed in " << ms << " ms (" << cpu_ms << " ms CPU)");
  CHECK(map.map == engram_built_map().map);  // deterministic
}

}  // namespace
