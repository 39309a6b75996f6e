// Tests of the safetensors header parser: valid layouts, and one table row per validation rule
// with the error text it must produce (naming the file and, where one is at fault, the tensor).
#include "model/checkpoint/safetensors.hpp"

#include "common/error.hpp"
#include "common/printable.hpp"
#include "safetensors_writer.hpp"

#include <doctest/doctest.h>

#include <span>

namespace {

using di::test::raw_safetensors;
using di::test::raw_safetensors_with_length;

std::span<const std::uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// The parser's error message for `file_bytes`, or "" when it parsed.
std::string parse_error(const std::string& file_bytes) {
  try {
    di::parse_safetensors_header(as_bytes(file_bytes), "case.safetensors");
  } catch (const di::error& e) {
    return e.what();
  }
  return "";
}

// A well-formed entry for an F32 [2] tensor at [begin, begin + 8).
std::string f32x2_at(int begin) {
  return R"({"dtype":"F32","shape":[2],"data_offsets":[)" + std::to_string(begin) + "," +
         std::to_string(begin + 8) + "]}";
}

struct malformed_case {
  const char* label;
  std::string file_bytes;
  std::string expected;  // a substring of the message
  const char* tensor;    // the tensor the message must name, or nullptr
};

/// {"a":{"a":...1...}} with `depth` objects.
std::string nested_objects(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += "{\"a\":";
  s += "1";
  s += std::string(std::size_t(depth), '}');
  return s;
}

std::vector<malformed_case> malformed_cases() {
  const std::string d8(8, '\0');
  const std::string w = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":)";
  return {
      {"shorter than 8 bytes", std::string("\x05\0\0", 3), "too short", nullptr},
      {"empty file", "", "is 0 bytes", nullptr},
      {"header length past the file", raw_safetensors_with_length(1000, "{}"), "runs past the end",
       nullptr},
      {"header length over 100 MB", raw_safetensors_with_length(200'000'000, "{}"),
       "exceeds the 100000000-byte limit", nullptr},
      {"header length 2^64-1", raw_safetensors_with_length(~0ull, "{}"), "exceeds", nullptr},
      {"empty header", raw_safetensors(""), "header is not valid JSON", nullptr},
      {"not JSON", raw_safetensors("{\"w\": nope}"), "header is not valid JSON", nullptr},
      {"trailing garbage", raw_safetensors("{} x"), "header is not valid JSON", nullptr},
      {"JSON array", raw_safetensors("[1, 2]"), "header must be a JSON object, got array", nullptr},
      {"entry not an object", raw_safetensors(R"({"w": 3})"), "entry must be an object", "w"},
      {"missing data_offsets", raw_safetensors(R"({"w":{"dtype":"F32","shape":[2]}})", d8),
       "missing 'data_offsets'", "w"},
      {"missing dtype", raw_safetensors(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", d8),
       "missing 'dtype'", "w"},
      {"missing shape", raw_safetensors(R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", d8),
       "missing 'shape'", "w"},
      {"unknown key", raw_safetensors(w + R"([0,8],"extra":1}})", d8), "unexpected key 'extra'",
       "w"},
      {"dtype not a string",
       raw_safetensors(R"({"w":{"dtype":5,"shape":[2],"data_offsets":[0,8]}})", d8),
       "'dtype' must be a string, got number", "w"},
      {"shape not an array",
       raw_safetensors(R"({"w":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", d8),
       "'shape' must be an array, got string", "w"},
      {"shape entry a float",
       raw_safetensors(R"({"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", d8),
       "shape entries must be integers", "w"},
      {"shape entry null",
       raw_safetensors(R"({"w":{"dtype":"F32","shape":[null],"data_offsets":[0,8]}})", d8),
       "shape entries must be integers, got null", "w"},
      {"data_offsets one number", raw_safetensors(w + "[0]}}", d8),
       "must be an array of two integers", "w"},
      {"data_offsets an object", raw_safetensors(w + R"({"a":0}}})", d8),
       "must be an array of two integers", "w"},
      {"data_offsets negative", raw_safetensors(w + "[-1,7]}}", d8), "two non-negative integers",
       "w"},
      {"data_offsets float", raw_safetensors(w + "[0,8.0]}}", d8), "two non-negative integers",
       "w"},
      {"unknown dtype",
       raw_safetensors(R"({"w":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,8]}})", d8),
       "unknown dtype 'Q4_K'", "w"},
      {"negative dim",
       raw_safetensors(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", d8),
       "negative dimension -2", "w"},
      {"dim above int64",
       raw_safetensors(
           R"({"w":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,8]}})", d8),
       "is too large", "w"},
      {"byte size overflows",
       raw_safetensors(
           R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", d8),
       "overflows 64-bit byte size", "w"},
      {"shape/bytes mismatch",
       raw_safetensors(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", d8),
       "F32 [3] needs 12 bytes but data_offsets [0, 8] hold 8", "w"},
      {"offsets past the end", raw_safetensors(w + "[0,16]}}", d8),
       "data_offsets [0, 16] run past the data section (8 bytes)", "w"},
      {"begin after end", raw_safetensors(w + "[8,0]}}", d8), "begin 8 > end 0", "w"},
      {"overlapping tensors",
       raw_safetensors("{\"w\":" + f32x2_at(0) + ",\"v\":" + f32x2_at(4) + "}",
                       std::string(12, '\0')),
       "tensors 'w' [0, 8] and 'v' [4, 12] overlap", "v"},
      {"same range twice",
       raw_safetensors("{\"a\":" + f32x2_at(0) + ",\"b\":" + f32x2_at(0) + "}", d8), "overlap",
       "b"},
      {"empty tensor inside another",
       raw_safetensors(
           "{\"w\":" + f32x2_at(0) + R"(,"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
           d8),
       "overlap", "e"},
      // the safetensors library refuses both ("invalid offset", "file not fully covered")
      {"gap between tensors",
       raw_safetensors("{\"w\":" + f32x2_at(0) + ",\"v\":" + f32x2_at(12) + "}",
                       std::string(20, '\0')),
       "tensor 'v' starts at byte 12 of the data section, leaving bytes [8, 12) that no tensor "
       "names",
       "v"},
      {"gap before the first tensor",
       raw_safetensors("{\"w\":" + f32x2_at(4) + "}", std::string(12, '\0')),
       "leaving bytes [0, 4)", "w"},
      {"bytes after the last tensor",
       raw_safetensors("{\"w\":" + f32x2_at(0) + "}", std::string(11, '\0')),
       "3 bytes follow the last tensor (the data section is 11 bytes, its tensors end at 8)",
       nullptr},
      {"duplicate tensor names",
       raw_safetensors("{\"w\":" + f32x2_at(0) + ",\"w\":" + f32x2_at(0) + "}", d8),
       "duplicate key 'w'", "w"},
      {"duplicate field",
       raw_safetensors(R"({"w":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                       d8),
       "duplicate key 'dtype' in 'w'", "w"},
      {"__metadata__ not an object", raw_safetensors(R"({"__metadata__":[1]})"),
       "'__metadata__' must be an object of strings, got array", nullptr},
      {"__metadata__ value not a string", raw_safetensors(R"({"__metadata__":{"format":1}})"),
       "'__metadata__' value of 'format' must be a string, got number", nullptr},
      {"duplicate __metadata__", raw_safetensors(R"({"__metadata__":{},"__metadata__":{}})"),
       "duplicate key '__metadata__'", nullptr},
      // the file's bytes are escaped in the message: an invalid UTF-8 byte came through raw
      // (nlohmann's "last read"), JSON escapes as a newline and a terminal's ESC
      {"invalid UTF-8 in a name", raw_safetensors("{\"x\xFF\xFE\": 1}"), "last read: '\"x\\xFF'",
       nullptr},
      {"control characters in a name",
       raw_safetensors(R"({"w\u001b[2J\n\u0085":{"dtype":"Q9","shape":[2],"data_offsets":[0,8]}})",
                       d8),
       "tensor 'w\\x1B[2J\\n\\u0085': unknown dtype 'Q9'", nullptr},
      {"control character in a dtype",
       raw_safetensors(R"({"w":{"dtype":"F\u0007\u202e","shape":[2],"data_offsets":[0,8]}})", d8),
       "unknown dtype 'F\\x07\\u202E'", "w"},
      {"control character in a duplicate key",
       raw_safetensors("{\"\\r\":" + f32x2_at(0) + ",\"\\r\":" + f32x2_at(0) + "}", d8),
       "duplicate key '\\r'", nullptr},
      // nested objects cost ~56x their bytes: a 183 MB header took 5.6 GB before failing
      {"nested deeper than 64 levels", raw_safetensors(nested_objects(100000)),
       "nested deeper than 64 levels", nullptr},
  };
}

}  // namespace

TEST_CASE("safetensors header: every malformed file gives one clear error") {
  for (const malformed_case& c : malformed_cases()) {
    CAPTURE(c.label);
    std::string message = parse_error(c.file_bytes);
    CAPTURE(message);
    CHECK(message.find(c.expected) != std::string::npos);
    CHECK(message.rfind("case.safetensors: ", 0) == 0);
    if (c.tensor != nullptr)
      CHECK(message.find(fmt::format("'{}'", c.tensor)) != std::string::npos);
  }
}

TEST_CASE("safetensors header: a message holds no byte of the file that does not print") {
  for (const malformed_case& c : malformed_cases()) {
    CAPTURE(c.label);
    const std::string message = parse_error(c.file_bytes);
    CAPTURE(message);
    // printable ASCII or valid UTF-8 of printable characters; the cases above are ASCII
    for (char ch : message) CHECK((ch >= 0x20 && ch < 0x7F));
  }
}

TEST_CASE("printable: what does not print is escaped, other text is kept") {
  CHECK(di::printable("layers.0.attn.wq") == "layers.0.attn.wq");
  CHECK(di::printable("名字 é \\ 'q'") == "名字 é \\ 'q'");
  CHECK(di::printable("a\nb\rc\td\x1B[2J\x7F") == "a\\nb\\rc\\td\\x1B[2J\\x7F");
  CHECK(di::printable(std::string("a\0b", 3)) == "a\\x00b");
  // invalid UTF-8, byte by byte: a stray continuation, a cut sequence, an overlong '/', a
  // surrogate, past U+10FFFF
  CHECK(di::printable("\x80x\xE4\xB8") == "\\x80x\\xE4\\xB8");
  CHECK(di::printable("\xC0\xAF") == "\\xC0\\xAF");
  CHECK(di::printable("\xED\xA0\x80") == "\\xED\\xA0\\x80");
  CHECK(di::printable("\xF4\x90\x80\x80") == "\\xF4\\x90\\x80\\x80");
  CHECK(di::printable("\xF0\x9F\x98\x80") == "\xF0\x9F\x98\x80");  // U+1F600 is kept
  // C1 controls, line separators and bidirectional overrides
  CHECK(di::printable("\xC2\x85|\xE2\x80\xA8|\xE2\x80\xAE|\xE2\x81\xA6") ==
        "\\u0085|\\u2028|\\u202E|\\u2066");
}

TEST_CASE("safetensors header: every prefix of a valid file is rejected, never misread") {
  std::string good = di::test::make_safetensors(
      {{"a", "F32", {2}, std::string(8, '\1')}, {"b", "BF16", {3, 1}, std::string(6, '\2')}});
  REQUIRE(parse_error(good).empty());
  for (std::size_t n = 0; n < good.size(); ++n) {
    CAPTURE(n);
    CHECK_FALSE(parse_error(good.substr(0, n)).empty());
  }
}

TEST_CASE("safetensors header: valid layouts") {
  using di::dtype;
  SUBCASE("tensors come back sorted by name with their offsets, shapes and metadata") {
    std::string file = di::test::make_safetensors({{"zeta", "BF16", {2, 3}, std::string(12, 'z')},
                                                   {"alpha", "F8_E4M3", {4}, std::string(4, 'a')},
                                                   {"scalar", "F64", {}, std::string(8, 's')},
                                                   {"empty", "I32", {0, 5}, ""},
                                                   {"packed", "I8", {2, 2}, std::string(4, 'p')}},
                                                  {{"format", "pt"}});
    auto h = di::parse_safetensors_header(as_bytes(file), "ok.safetensors");
    REQUIRE(h.tensors.size() == 5);
    CHECK(h.tensors[0].name == "alpha");
    CHECK(h.tensors[0].type == dtype::f8_e4m3);
    CHECK(h.tensors[0].begin == 12);
    CHECK(h.tensors[1].name == "empty");
    CHECK(h.tensors[1].begin == h.tensors[1].end);
    CHECK(h.tensors[2].name == "packed");
    CHECK(h.tensors[3].name == "scalar");
    CHECK(h.tensors[3].shape.empty());
    CHECK(h.tensors[4].name == "zeta");
    CHECK(h.tensors[4].shape == std::vector<std::int64_t>{2, 3});
    CHECK(h.tensors[4].end == 12);
    CHECK(h.metadata == std::map<std::string, std::string>{{"format", "pt"}});
    std::uint64_t header_len = h.data_offset - 8;
    CHECK(file.size() == h.data_offset + 28);
    CHECK(header_len % 8 == 0);
  }
  SUBCASE("empty tensors may touch others, in any order of the header") {
    std::string header = R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},)"
                         R"("e":{"dtype":"BOOL","shape":[0],"data_offsets":[4,4]},)"
                         R"("a":{"dtype":"I16","shape":[1],"data_offsets":[0,2]}}   )";
    auto h = di::parse_safetensors_header(as_bytes(raw_safetensors(header, "0123")), "g");
    REQUIRE(h.tensors.size() == 3);
    CHECK(h.tensors[0].type == dtype::i16);
    CHECK(h.tensors[1].type == dtype::u8);
    CHECK(h.tensors[2].type == dtype::bool_);
  }
  SUBCASE("an empty header object is a file with no tensors") {
    auto h = di::parse_safetensors_header(as_bytes(raw_safetensors("{}")), "empty");
    CHECK(h.tensors.empty());
    CHECK(h.metadata.empty());
  }
}

TEST_CASE("checked_byte_size and format_shape") {
  std::vector<std::int64_t> shape{3, 5};
  CHECK(di::checked_byte_size(shape, 2) == 30u);
  CHECK(di::checked_byte_size({}, 4) == 4u);
  std::vector<std::int64_t> negative{3, -1};
  CHECK_FALSE(di::checked_byte_size(negative, 1).has_value());
  std::vector<std::int64_t> huge{std::int64_t(1) << 62, 8};
  CHECK_FALSE(di::checked_byte_size(huge, 1).has_value());
  CHECK(di::format_shape(shape) == "[3, 5]");
  CHECK(di::format_shape({}) == "[]");
}
