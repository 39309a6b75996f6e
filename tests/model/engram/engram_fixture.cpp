// The Engram fixtures, with a minimal safetensors reader (header JSON + little-endian raw
// tensors) so that these tests do not depend on the checkpoint loader's API.
#include "tests/model/engram/engram_fixture.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/test_support.hpp"

namespace di::test {

namespace {

/// One tensor of a safetensors file: dtype, shape and raw bytes.
struct raw_tensor {
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::string bytes;
};

raw_tensor read_tensor(const std::string& file, const std::string& name) {
  std::ifstream in(file, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << file);
  std::uint64_t header_size = 0;
  in.read(reinterpret_cast<char*>(&header_size), sizeof(header_size));
  std::string header(header_size, '\0');
  in.read(header.data(), std::streamsize(header_size));
  const nlohmann::json meta = nlohmann::json::parse(header);
  REQUIRE_MESSAGE(meta.contains(name), file << " has no tensor " << name);
  const auto& entry = meta.at(name);
  raw_tensor t{
      entry.at("dtype").get<std::string>(), entry.at("shape").get<std::vector<std::int64_t>>(), {}};
  const auto begin = entry.at("data_offsets").at(0).get<std::uint64_t>();
  const auto end = entry.at("data_offsets").at(1).get<std::uint64_t>();
  t.bytes.resize(end - begin);
  in.seekg(std::streamoff(8 + header_size + begin));
  in.read(t.bytes.data(), std::streamsize(end - begin));
  REQUIRE_MESSAGE(in.good(), "truncated tensor " << name << " in " << file);
  return t;
}

template <typename T>
std::vector<T> tensor_values(const raw_tensor& t, const char* dtype) {
  REQUIRE(t.dtype == dtype);
  std::vector<T> values(t.bytes.size() / sizeof(T));
  std::memcpy(values.data(), t.bytes.data(), values.size() * sizeof(T));
  return values;
}

}  // namespace

std::string engram_golden_dir() {
  return shared_path("testdata/golden/v41_public").string();
}

const tok::tokenizer& engram_tokenizer() {
  static const tok::tokenizer tok =
      tok::tokenizer::from_dir(shared_path("models/deepseek-v3-tokenizer").string());
  return tok;
}

const model_config& engram_golden_config() {
  static const model_config config = load_model_config(engram_golden_dir());
  return config;
}

const engram_token_map& engram_built_map() {
  static const engram_token_map map = build_engram_token_map(engram_tokenizer());
  return map;
}

const engram_golden& engram_golden_outputs() {
  static const engram_golden golden = [] {
    const std::string file = engram_golden_dir() + "/expected.safetensors";
    engram_golden g;
    g.token_map = tensor_values<std::int32_t>(read_tensor(file, "engram_token_map"), "I32");
    g.input_ids = tensor_values<std::int64_t>(read_tensor(file, "input_ids"), "I64");
    const raw_tensor hash = read_tensor(file, "engram_hash_ids");
    g.hash_shape = hash.shape;
    g.hash_ids = tensor_values<std::int64_t>(hash, "I64");
    return g;
  }();
  return golden;
}

}  // namespace di::test
