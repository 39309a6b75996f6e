// Tests of the streaming safetensors writer: files it writes open with the project's
// validating parser with every byte in place, tensors lie back to back after an 8-aligned
// header, out-of-range and incomplete writes are errors, and unfinished files disappear.
#include "model/make_model/safetensors_writer.hpp"

#include "common/error.hpp"
#include "common/mapped_file.hpp"
#include "model/checkpoint/checkpoint.hpp"
#include "tests/test_support.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <thread>

namespace {

using di::dtype;

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t salt) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::uint8_t(i * 31 + salt);
  return v;
}

std::vector<di::tensor_decl> three_tensors() {
  return {{"b.f32", dtype::f32, {3, 5}}, {"a.bf16", dtype::bf16, {7}}, {"c.i8", dtype::i8, {2, 9}}};
}

}  // namespace

TEST_CASE("safetensors writer: layout is contiguous, header 8-aligned, declaration order kept") {
  auto layout = di::layout_safetensors(three_tensors(), {{"format", "pt"}});
  CHECK(layout.header.size() % 8 == 0);
  REQUIRE(layout.begin.size() == 3);
  CHECK(layout.begin[0] == 0);
  CHECK(layout.end[0] == 60);
  CHECK(layout.begin[1] == 60);
  CHECK(layout.end[1] == 74);
  CHECK(layout.begin[2] == 74);
  CHECK(layout.end[2] == 92);
  CHECK(layout.data_bytes == 92);
  std::uint64_t len = 0;
  std::memcpy(&len, layout.header.data(), 8);
  CHECK(len == layout.header.size() - 8);
  auto json = nlohmann::json::parse(layout.header.substr(8));
  CHECK(json["__metadata__"]["format"] == "pt");
  CHECK(json["c.i8"]["data_offsets"] == nlohmann::json::array({74, 92}));
}

TEST_CASE("safetensors writer: rejects duplicate names and negative dimensions") {
  CHECK_THROWS_AS(di::layout_safetensors({{"x", dtype::f32, {1}}, {"x", dtype::f32, {2}}}, {}),
                  di::error);
  CHECK_THROWS_AS(di::layout_safetensors({{"x", dtype::f32, {-1}}}, {}), di::error);
  CHECK_THROWS_AS(di::layout_safetensors({{"", dtype::f32, {1}}}, {}), di::error);
}

TEST_CASE("safetensors writer: chunked writes from several threads read back exactly") {
  di::test::temp_dir dir("st-writer");
  auto path = dir / "x.safetensors";
  auto decls = three_tensors();
  std::vector<std::vector<std::uint8_t>> payload;
  for (std::size_t i = 0; i < decls.size(); ++i)
    payload.push_back(pattern(decls[i].num_bytes(), std::uint8_t(i)));
  {
    di::safetensors_writer w(path, decls, {{"format", "pt"}});
    // each tensor written in two halves, by its own thread, second half first
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < decls.size(); ++i)
      threads.emplace_back([&, i] {
        std::span<const std::uint8_t> all = payload[i];
        std::size_t half = all.size() / 2;
        w.write(i, half, all.subspan(half));
        w.write(i, 0, all.subspan(0, half));
      });
    for (auto& t : threads) t.join();
    w.finish();
  }
  di::checkpoint ckpt(path);
  REQUIRE(ckpt.num_tensors() == 3);
  for (std::size_t i = 0; i < decls.size(); ++i) {
    const auto& t = ckpt.get(decls[i].name);
    CHECK(t.type == decls[i].type);
    CHECK(t.shape == decls[i].shape);
    CHECK(std::equal(t.bytes.begin(), t.bytes.end(), payload[i].begin(), payload[i].end()));
  }
  CHECK(ckpt.metadata().at("format") == "pt");
}

TEST_CASE("safetensors writer: out-of-range writes throw, incomplete tensors fail finish()") {
  di::test::temp_dir dir("st-writer");
  auto path = dir / "x.safetensors";
  {
    di::safetensors_writer w(path, three_tensors());
    std::vector<std::uint8_t> four(4, 0);
    CHECK_THROWS_AS(w.write(0, 57, four), di::error);  // 57 + 4 > 60
    CHECK_THROWS_AS(w.write(3, 0, four), di::error);   // no tensor 3
    w.write(0, 0, pattern(60, 1));
    w.write(1, 0, pattern(14, 2));
    w.write(2, 0, pattern(17, 3));  // one byte short
    CHECK_THROWS_WITH_AS(w.finish(), doctest::Contains("'c.i8' received 17 of its 18 bytes"),
                         di::error);
    CHECK(std::filesystem::exists(path));
  }
  CHECK_FALSE(std::filesystem::exists(path));  // an unfinished file is removed
}

TEST_CASE("safetensors writer: index_of and the shard index file") {
  di::test::temp_dir dir("st-writer");
  di::safetensors_writer w(dir / "x.safetensors", three_tensors());
  CHECK(w.index_of("c.i8") == 2);
  CHECK_THROWS_AS(w.index_of("nope"), di::error);
  di::write_safetensors_index(
      dir / "model.safetensors.index.json",
      {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}}, 1234);
  auto j =
      nlohmann::json::parse(di::read_text_file((dir / "model.safetensors.index.json").string()));
  CHECK(j["metadata"]["total_size"] == 1234);
  CHECK(j["weight_map"]["b"] == "model-00002-of-00002.safetensors");
}
