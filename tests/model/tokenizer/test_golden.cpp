// Golden test: every line of the public golden file (HF tokenizers output) must encode and
// decode exactly, with both pre-tokenizer engines, and stream back through the incremental
// detokenizer without ever emitting part of a UTF-8 character.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <thread>

#include "model/tokenizer/detail/utf8.hpp"
#include "tests/model/tokenizer/tokenizer_fixture.hpp"

namespace {

using di::test::golden_line;
using di::tok::token_id;

constexpr std::size_t k_num_golden_lines = 1081;
constexpr int k_max_reported = 5;

// Counts lines where `field` of the golden line differs from `compute`, reporting the first few.
template <class Compute, class Field>
std::size_t count_passing(const char* what, Compute compute, Field field) {
  std::size_t num_pass = 0;
  int num_reported = 0;
  for (const golden_line& g : di::test::golden_lines()) {
    auto got = compute(g);
    if (got == field(g)) {
      ++num_pass;
    } else if (num_reported++ < k_max_reported) {
      FAIL_CHECK(fmt::format("{} mismatch on {} text={:?}\n  got      {}\n  expected {}", what,
                             g.id, g.text, got, field(g)));
    }
  }
  MESSAGE(fmt::format("{}: {}/{} lines pass", what, num_pass, di::test::golden_lines().size()));
  return num_pass;
}

}  // namespace

TEST_CASE("golden file has all lines") {
  CHECK(di::test::golden_lines().size() == k_num_golden_lines);
}

TEST_CASE("golden: encode and decode match HF tokenizers") {
  for (bool fast : {true, false}) {
    CAPTURE(fast);
    const auto& tok = di::test::deepseek_tokenizer(fast);
    CHECK(tok.uses_fast_pre_tokenizer() == fast);
    const std::size_t n = di::test::golden_lines().size();
    CHECK(count_passing(
              "ids", [&](const golden_line& g) { return tok.encode(g.text); },
              [](const golden_line& g) { return g.ids; }) == n);
    CHECK(
        count_passing(
            "ids_add_special",
            [&](const golden_line& g) { return tok.encode(g.text, {.add_special_tokens = true}); },
            [](const golden_line& g) { return g.ids_add_special; }) == n);
    CHECK(count_passing(
              "ids_bos_transformers",
              [&](const golden_line& g) { return tok.encode(g.text, {.add_bos = true}); },
              [](const golden_line& g) { return g.ids_bos; }) == n);
    CHECK(count_passing(
              "decoded", [&](const golden_line& g) { return tok.decode(g.ids); },
              [](const golden_line& g) { return g.decoded; }) == n);
    CHECK(
        count_passing(
            "decoded_skip_special",
            [&](const golden_line& g) { return tok.decode(g.ids, {.skip_special_tokens = true}); },
            [](const golden_line& g) { return g.decoded_skip_special; }) == n);
  }
}

TEST_CASE("golden: incremental detokenizer reproduces decode and emits only whole characters") {
  const auto& tok = di::test::deepseek_tokenizer(true);
  for (bool skip : {false, true}) {
    CAPTURE(skip);
    std::size_t num_pass = 0;
    std::size_t num_partial_emits = 0;
    std::size_t num_held_back = 0;
    for (const golden_line& g : di::test::golden_lines()) {
      di::tok::incremental_detokenizer stream(tok, {.skip_special_tokens = skip});
      std::string text;
      for (token_id id : g.ids) {
        std::string chunk = stream.push(id);
        if (di::tok::detail::find_invalid_utf8(chunk) != chunk.size()) ++num_partial_emits;
        num_held_back += stream.has_pending();
        text += chunk;
      }
      text += stream.finish();
      num_pass += text == (skip ? g.decoded_skip_special : g.decoded);
    }
    CHECK(num_pass == di::test::golden_lines().size());
    CHECK(num_partial_emits == 0);
    // The golden set splits characters across tokens (emoji, CJK); holding back must happen.
    CHECK(num_held_back > 0);
  }
}

TEST_CASE("golden: concurrent encoding from several threads gives the same ids") {
  // Each thread has its own word cache and scratch; the tokenizer itself is shared.
  const auto& tok = di::test::deepseek_tokenizer(true);
  const auto& lines = di::test::golden_lines();
  constexpr int k_num_threads = 4;
  std::vector<std::size_t> num_pass(k_num_threads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < k_num_threads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (std::size_t i = std::size_t(t); i < lines.size() + std::size_t(t); ++i) {
          const golden_line& g = lines[i % lines.size()];
          num_pass[std::size_t(t)] += tok.encode(g.text) == g.ids;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (std::size_t n : num_pass) CHECK(n == 3 * lines.size());
}
