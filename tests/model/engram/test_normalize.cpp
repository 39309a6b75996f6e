// engram_normalize against HF tokenizers' normalizer (0.23.3, Python, the Sequence of
// build_compressed_token_map): named cases, and every code point through per-block digests
// (fixtures/normalize_digests.txt, from gen_normalize_digests.py). When written, it also
// matched on every code point after "A" and on 200K random strings of marks and spaces.
#include <doctest/doctest.h>

#include <unicode/utf8.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "model/engram/normalize.hpp"
#include "tests/test_support.hpp"

namespace {

using di::engram_normalize;

TEST_CASE("engram_normalize: accents, case and compatibility forms fold") {
  CHECK(engram_normalize("H\u00e9ll\u00f2") == "hello");
  CHECK(engram_normalize("e\u0301") == "e");
  CHECK(engram_normalize("\uff21\uff22\uff23\uff11\uff12\uff13") == "abc123");  // fullwidth
  CHECK(engram_normalize("\ufb01") == "fi");                                    // ligature
  CHECK(engram_normalize("\u2460") == "1");                                     // circled one
  CHECK(engram_normalize("\u212b") == "a");                                     // angstrom sign
  CHECK(engram_normalize("\u01c4") == "dz");                                    // DŽ
  CHECK(engram_normalize("The") == "the");
  CHECK(engram_normalize(" the") == "the");
  CHECK(engram_normalize("THE") == "the");
}

TEST_CASE("engram_normalize: lowercase is per character and unconditional") {
  // U+0130 decomposes to I + U+0307 and the mark is stripped before lowercasing.
  CHECK(engram_normalize("\u0130stanbul") == "istanbul");
  // No final-sigma rule: every capital sigma becomes U+03C3.
  CHECK(engram_normalize("\u03a3\u0391\u03a3 \u039f\u0394\u039f\u03a3") ==
        "\u03c3\u03b1\u03c3 \u03bf\u03b4\u03bf\u03c3");
  CHECK(engram_normalize("\u00df") == "\u00df");
  CHECK(engram_normalize("\u1e9e") == "\u00df");
  CHECK(engram_normalize("\ua7cb") == "\u0264");  // a Unicode 16 pair ICU 72 lacks
}

TEST_CASE("engram_normalize: Hangul stays decomposed into jamo") {
  CHECK(engram_normalize("\ud55c") == "\u1112\u1161\u11ab");
}

TEST_CASE("engram_normalize: whitespace runs collapse and the ends are stripped") {
  CHECK(engram_normalize("  a \t\n b  ") == "a b");
  CHECK(engram_normalize(" x") == "x");
  CHECK(engram_normalize("\u2028").empty());  // Unicode whitespace is stripped, not collapsed
  CHECK(engram_normalize("").empty());
}

TEST_CASE("engram_normalize: a text that collapses to one space keeps it") {
  CHECK(engram_normalize(" ") == " ");
  CHECK(engram_normalize("\n") == " ");
  CHECK(engram_normalize("\t\r\n ") == " ");
  CHECK(engram_normalize("\u3000") == " ");  // NFKC turns it into U+0020
  CHECK(engram_normalize("\u00a0") == " ");
  // The sentinel itself (U+E000) always ends up as a space.
  CHECK(engram_normalize("\ue000x") == " x");
  CHECK(engram_normalize(" \ue000 ") == " ");
}

TEST_CASE("engram_normalize: Unicode 9.0 data of the Rust normalization crate") {
  CHECK(engram_normalize("\u1cf2").empty());              // a mark in 9.0, a letter now
  CHECK(engram_normalize("\U000111c9") == "\U000111c9");  // punctuation in 9.0, a mark now
  CHECK(engram_normalize("\u07fd") == "\u07fd");          // a mark added in 11.0: kept
  CHECK(engram_normalize("\u32ff") == "\u32ff");          // NFKC since 12.1: not applied
  CHECK(engram_normalize("\U0001fbf0") == "\U0001fbf0");  // NFKC since 13.0: not applied
  CHECK(engram_normalize("A\u07fd") == "a\u07fd");
}

/// FNV-1a 64 over `bytes`, continuing from `hash`.
std::uint64_t fnv1a(std::string_view bytes, std::uint64_t hash) {
  for (unsigned char b : bytes) hash = (hash ^ b) * 0x100000001b3ull;
  return hash;
}

/// The digest gen_normalize_digests.py computes for the 4096 code points from `start`.
std::uint64_t block_digest(std::uint32_t start) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (std::uint32_t cp = start; cp < start + 4096; ++cp) {
    if (cp >= 0xd800 && cp < 0xe000) continue;
    char buf[U8_MAX_LENGTH];
    int32_t len = 0;
    U8_APPEND_UNSAFE(buf, len, UChar32(cp));
    hash = fnv1a(engram_normalize(std::string_view(buf, std::size_t(len))), hash);
    hash = fnv1a("\xff", hash);
  }
  return hash;
}

TEST_CASE("engram_normalize matches HF tokenizers on every code point") {
  const auto path = di::test::source_dir() / "tests/model/engram/fixtures/normalize_digests.txt";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  int num_blocks = 0;
  std::string start_hex;
  std::string digest_hex;
  while (in >> start_hex >> digest_hex) {
    const auto start = std::uint32_t(std::stoul(start_hex, nullptr, 16));
    const std::uint64_t want = std::stoull(digest_hex, nullptr, 16);
    CHECK_MESSAGE(block_digest(start) == want,
                  "code points U+" << start_hex << " + 4096 normalize differently");
    ++num_blocks;
  }
  CHECK(num_blocks == 0x110000 / 4096);
}

}  // namespace
