// Unit tests of the tokenizer's parts: lossy UTF-8, streaming vs batch decode, the two BPE
// merge strategies, the hand-written pre-tokenizer against PCRE2, regex translation, the
// Unicode class table, and the public lookups of the real DeepSeek tokenizer.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <random>
#include <unordered_map>

#include "common/error.hpp"
#include "common/mapped_file.hpp"
#include "model/tokenizer/detail/bpe.hpp"
#include "model/tokenizer/detail/byte_level.hpp"
#include "model/tokenizer/detail/char_classes.hpp"
#include "model/tokenizer/detail/pre_tokenizer.hpp"
#include "model/tokenizer/detail/spec.hpp"
#include "model/tokenizer/detail/utf8.hpp"
#include "tests/model/tokenizer/tokenizer_fixture.hpp"

namespace {

namespace detail = di::tok::detail;
using di::tok::token_id;

std::string replacement(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += "\xEF\xBF\xBD";
  return s;
}

}  // namespace

TEST_CASE("lossy UTF-8 replaces each maximal invalid subpart with one U+FFFD") {
  // Expected values are Python's bytes.decode('utf-8', 'replace'), the same policy as Rust.
  CHECK(detail::utf8_lossy("\xF0\x9F\x98") == replacement(1));
  CHECK(detail::utf8_lossy("\xE0\x80") == replacement(2));
  CHECK(detail::utf8_lossy("\xF0\x90\x80"
                           "A") == replacement(1) + "A");
  CHECK(detail::utf8_lossy("\xED\xA0\x80") == replacement(3));
  CHECK(detail::utf8_lossy("\xC0\xAF") == replacement(2));
  CHECK(detail::utf8_lossy("a\xFF"
                           "b") == "a" + replacement(1) + "b");
  CHECK(detail::utf8_lossy("\xF4\x90\x80\x80") == replacement(4));
  CHECK(detail::utf8_lossy("\xE2\x82\xAC\xE2\x82") == std::string("\xE2\x82\xAC") + replacement(1));
  CHECK(detail::utf8_lossy("plain \xE4\xB8\xAD") == "plain \xE4\xB8\xAD");
}

TEST_CASE("lossy decoder gives the same text for any split of the input") {
  std::mt19937 rng(7);
  const std::string alphabet[] = {"a",    "\xC3", "\xA9", "\xE4", "\xB8", "\xAD", "\xF0", "\x9F",
                                  "\x98", "\x80", "\xFF", "\xED", "\xA0", "\xF4", "\x90"};
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bytes;
    int n = int(rng() % 12);
    for (int i = 0; i < n; ++i) bytes += alphabet[rng() % std::size(alphabet)];
    std::string streamed;
    detail::utf8_lossy_decoder decoder;
    for (std::size_t i = 0; i < bytes.size();) {
      std::size_t len = 1 + rng() % 3;
      std::string chunk;
      decoder.feed(std::string_view(bytes).substr(i, len), chunk);
      CHECK(detail::find_invalid_utf8(chunk) == chunk.size());
      streamed += chunk;
      i += len;
    }
    decoder.finish(streamed);
    CHECK(streamed == detail::utf8_lossy(bytes));
  }
}

TEST_CASE("incremental detokenizer on byte tokens equals batch decode, flushing with U+FFFD") {
  const auto& tok = di::test::deepseek_tokenizer(true);
  // Single-byte tokens let the stream cut characters anywhere, including never finishing one.
  auto id_of_byte = [&](unsigned char b) {
    for (token_id id = 0; id < token_id(tok.vocab_size()); ++id) {
      auto bytes = tok.id_to_token(id) ? tok.token_bytes(id) : std::string_view();
      if (bytes.size() == 1 && static_cast<unsigned char>(bytes[0]) == b) return id;
    }
    FAIL("no token for byte");
    return token_id(-1);
  };
  std::vector<token_id> ids;
  for (unsigned char b : std::string("x\xE4\xB8\xAD\xF0\x9F\x98")) ids.push_back(id_of_byte(b));
  di::tok::incremental_detokenizer stream(tok);
  std::string text;
  for (token_id id : ids) text += stream.push(id);
  CHECK(text == "x\xE4\xB8\xAD");  // the emoji is still incomplete
  CHECK(stream.has_pending());
  text += stream.finish();
  CHECK(text == "x\xE4\xB8\xAD" + replacement(1));
  CHECK(text == tok.decode(ids));
  CHECK_FALSE(stream.has_pending());
}

TEST_CASE("scan and heap BPE merges agree on real merges") {
  auto spec = detail::parse_tokenizer_json(
      di::read_text_file(di::test::deepseek_tokenizer_dir() + "/tokenizer.json"), "tokenizer.json");
  detail::merge_table merges;
  for (std::size_t rank = 0; rank < spec.merges.size(); ++rank) {
    merges.insert(spec.merges[rank].left, spec.merges[rank].right,
                  {std::uint32_t(rank), spec.merges[rank].merged});
  }
  std::unordered_map<std::string, std::uint32_t> ids;
  for (std::size_t id = 0; id < spec.vocab.size(); ++id) ids[spec.vocab[id]] = std::uint32_t(id);
  std::mt19937 rng(11);
  detail::bpe_scratch scratch;
  int num_differ = 0;
  for (const auto& g : di::test::golden_lines()) {
    // Cut each text into windows of many lengths: short and long pieces of varied content.
    for (std::size_t len : {2, 5, 17, 60, 300}) {
      for (std::size_t at = 0; at + len <= g.text.size(); at += len + rng() % 50) {
        std::vector<std::uint32_t> a, b;
        for (char c : g.text.substr(at, len)) {
          std::string token = detail::bytes_to_token(std::string(1, c));
          a.push_back(ids.at(token));
        }
        b = a;
        detail::bpe_merge_scan(merges, a, scratch);
        detail::bpe_merge_heap(merges, b, scratch);
        num_differ += a != b;
      }
    }
  }
  CHECK(num_differ == 0);
}

TEST_CASE("hand-written pre-tokenizer equals PCRE2 on random tricky text") {
  std::vector<detail::split_step> steps;
  for (const auto& p : detail::deepseek_v3_patterns()) steps.push_back({p});
  detail::pre_tokenizer fast(steps, detail::pre_tokenizer_engine::automatic);
  detail::pre_tokenizer slow(steps, detail::pre_tokenizer_engine::pcre2);
  REQUIRE(fast.uses_fast_path());
  REQUIRE_FALSE(slow.uses_fast_path());
  // Letters, marks, digits (also non-ASCII), kana/CJK edges, punctuation, every kind of space.
  // clang-format off
  const char* alphabet[] = {
      "a", "Z", "q", " ", "  ", "\t", "\r", "\n", "\xC2\x85", "\xC2\xA0", "\xE3\x80\x80",
      "1", "7", "\xC2\xB2", "\xE2\x85\xA3", "\xD9\xA3", "\xCC\x81", "\xE0\xA4\xBE", ".", ",",
      "'", "-", "(", "$", "+", "\xE2\x80\x94", "\xE4\xB8\x80", "\xE9\xBE\xA5", "\xE9\xBE\xA6",
      "\xE3\x81\x80", "\xE3\x82\x9B", "\xE3\x82\xA0", "\xE3\x83\xBB", "\xE3\x83\xBC",
      "\xE3\x80\x87", "\xF0\x9F\x98\x80", "\xE2\x80\x8D", "\x01", "\x7F", "\xD0\x96",
      "\xCE\xB1", "_", "`", "~", "\xEF\xBC\x8C",
      "\xF0\xA0\x80\x80", "\xF3\xA0\x84\x80", "\xF3\xB0\x80\x80"};  // U+20000 U+E0100 U+F0000
  // clang-format on
  std::mt19937 rng(3);
  std::vector<detail::piece> a, b, scratch;
  int num_differ = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string text;
    int n = 1 + int(rng() % 24);
    for (int i = 0; i < n; ++i) text += alphabet[rng() % std::size(alphabet)];
    fast.split(text, a, scratch);
    slow.split(text, b, scratch);
    bool same = a.size() == b.size();
    for (std::size_t i = 0; same && i < a.size(); ++i) {
      same = a[i].begin == b[i].begin && a[i].end == b[i].end;
    }
    if (!same && num_differ++ < 5) FAIL_CHECK(fmt::format("pieces differ for {:?}", text));
  }
  CHECK(num_differ == 0);
}

TEST_CASE("Oniguruma escapes are translated to PCRE2 with Oniguruma's meaning") {
  CHECK(detail::translate_onig_pattern("\\s+(?!\\S)", "t") ==
        "[\\x{9}-\\x{d}\\x{85}\\p{Z}]+(?![^\\x{9}-\\x{d}\\x{85}\\p{Z}])");
  const std::string letters = detail::onig_category_class('L');
  CHECK(letters.starts_with("\\p{L}\\x{"));  // Oniguruma's newer letters are added
  CHECK(detail::translate_onig_pattern("[^\\s\\p{L}]", "t") ==
        "[^\\x{9}-\\x{d}\\x{85}\\p{Z}" + letters + "]");
  CHECK(detail::translate_onig_pattern("\\p{L}+|\\pL", "t") ==
        "[" + letters + "]+|[" + letters + "]");
  CHECK(detail::translate_onig_pattern("\\P{L}", "t") == "[^" + letters + "]");
  CHECK(detail::translate_onig_pattern("\\p{Han}\\p{Z}", "t") == "\\p{Han}\\p{Z}");
  CHECK_THROWS_AS(detail::translate_onig_pattern("[\\P{L}]", "t"), di::error);
  CHECK(detail::translate_onig_pattern("[\\]\\[]x", "t") == "[\\]\\[]x");
  CHECK_THROWS_AS(detail::translate_onig_pattern("[\\S]", "t"), di::error);
}

TEST_CASE("Unicode class table") {
  const auto& cls = detail::char_class_table::get();
  CHECK(cls(U'a') == detail::cc_letter);
  CHECK(cls(U'\u0301') == detail::cc_mark);
  CHECK(cls(U'\u00B2') == detail::cc_number);
  CHECK(cls(U'\u30FB') == detail::cc_punct_symbol);
  CHECK(cls(U'$') == detail::cc_punct_symbol);
  CHECK(cls(U'\u0085') == detail::cc_space);
  CHECK(cls(U'\u00A0') == detail::cc_space);
  CHECK(cls(U'\n') == detail::cc_space);
  CHECK(cls(U'\u200D') == 0);
  CHECK(cls(U'\U0001FAE8') == detail::cc_punct_symbol);  // emoji of Unicode 15
  CHECK(cls(U'\U00031350') == detail::cc_letter);        // CJK extension H (Unicode 15)
  CHECK(cls(U'\U0001CC00') == detail::cc_punct_symbol);  // legacy computing (Unicode 16)
  CHECK(cls(U'\U0010FFFF') == 0);
}

TEST_CASE("DeepSeek tokenizer lookups") {
  const auto& tok = di::test::deepseek_tokenizer(true);
  CHECK(tok.vocab_size() == 128815);
  CHECK(tok.bos_id() == 0);
  CHECK(tok.eos_id() == 1);
  CHECK(tok.token_to_id("<\xEF\xBD\x9C"
                        "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>") == 0);
  CHECK(tok.id_to_token(1) ==
        "<\xEF\xBD\x9C"
        "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>");
  CHECK(tok.token_to_id("\xC4\xA0the") == tok.encode(" the").at(0));
  CHECK(tok.id_to_token(-1) == std::nullopt);
  CHECK(tok.id_to_token(token_id(tok.vocab_size())) == std::nullopt);
  CHECK(tok.special_tokens().size() == 804);
  CHECK(tok.special_tokens().front().id == 0);
  CHECK(tok.is_special(0));
  CHECK_FALSE(tok.is_special(128814));  // <｜tool▁sep｜> is added but not special
  CHECK(tok.encode("").empty());
  CHECK(tok.encode("", {.add_bos = true}) == std::vector<token_id>{0});
  CHECK(tok.decode(std::vector<token_id>{}).empty());
}

TEST_CASE("characters newer than PCRE2's Unicode 14 split like HF tokenizers (Unicode 16)") {
  // Expected ids from HF tokenizers 0.23.3 on this tokenizer.json.
  for (bool fast : {true, false}) {
    CAPTURE(fast);
    const auto& tok = di::test::deepseek_tokenizer(fast);
    CHECK(tok.encode(" \U0001FAE8\U0001FAE8") ==
          std::vector<token_id>{7351, 107, 104, 3574, 107, 104});
    CHECK(tok.encode("ok \U0001FAE9!") == std::vector<token_id>{633, 7351, 107, 105, 3});
    CHECK(tok.encode("\U00031350\U00031351x") ==
          std::vector<token_id>{175, 112, 238, 241, 175, 112, 238, 242, 90});
    CHECK(tok.encode("a\U0001CC00b") == std::vector<token_id>{67, 175, 253, 111, 225, 68});
    CHECK(tok.encode("x\U0001E5D0y") == std::vector<token_id>{90, 175, 255, 248, 241, 91});
  }
}

TEST_CASE("bad input to encode and decode is a clear error") {
  const auto& tok = di::test::deepseek_tokenizer(true);
  CHECK_THROWS_WITH_AS(tok.encode("ok\xC3("),
                       "encode: text is not valid UTF-8 (byte 0xC3 at offset 2)", di::error);
  CHECK_THROWS_WITH_AS(tok.decode(std::vector<token_id>{5, 200000}),
                       "token id 200000 is not in the vocabulary (size 128815)", di::error);
  di::tok::incremental_detokenizer stream(tok);
  CHECK_THROWS_AS(stream.push(-3), di::error);
}
