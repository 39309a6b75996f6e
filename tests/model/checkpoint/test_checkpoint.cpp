// Tests of checkpoint opening: single files, lone model.safetensors directories, sharded
// directories with an index (and every way the index can disagree with its shards), and the two
// golden checkpoints in the official layout.
#include "model/checkpoint/checkpoint.hpp"

#include "common/error.hpp"
#include "safetensors_writer.hpp"
#include "tests/test_support.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstring>

namespace {

namespace fs = std::filesystem;
using di::test::make_safetensors;
using di::test::tensor_spec;
using di::test::write_file;

// The message of the di::error that opening `path` throws, or "" when it opens.
std::string open_error(const fs::path& path) {
  try {
    di::checkpoint ckpt(path);
  } catch (const di::error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Two shards: a.safetensors holds a1 and a2, b.safetensors holds b1.
void write_two_shards(const di::test::temp_dir& dir) {
  write_file(dir / "a.safetensors",
             make_safetensors({{"a1", "F32", {1}, di::test::bytes_of(std::vector<float>{1.5f})},
                               {"a2", "BF16", {2}, std::string(4, '\0')}},
                              {{"format", "pt"}}));
  write_file(
      dir / "b.safetensors",
      make_safetensors({{"b1", "I64", {1}, di::test::bytes_of(std::vector<std::int64_t>{7})}},
                       {{"format", "ignored"}, {"origin", "b"}}));
}

std::string index_json(const nlohmann::json& weight_map) {
  return nlohmann::json{{"metadata", {{"total_size", 16}}}, {"weight_map", weight_map}}.dump();
}

const nlohmann::json good_map = {
    {"a1", "a.safetensors"}, {"a2", "a.safetensors"}, {"b1", "b.safetensors"}};

}  // namespace

TEST_CASE("checkpoint: a single file is mapped zero-copy and looked up by name") {
  di::test::temp_dir dir("ckpt");
  std::vector<float> w{1.0f, -2.0f, 3.5f, 0.25f};  // [2, 2]
  write_file(dir / "one.safetensors",
             make_safetensors({{"w", "F32", {2, 2}, di::test::bytes_of(w)},
                               {"s", "F8_E8M0", {1, 1}, "\x7f"},
                               {"e", "F8_E4M3", {2, 2}, std::string("\x38\x40\xb8\x00", 4)}},
                              {{"format", "pt"}}));
  di::checkpoint ckpt(dir / "one.safetensors");
  REQUIRE(ckpt.num_tensors() == 3);
  CHECK(ckpt.tensors()[0].name == "e");
  CHECK(ckpt.tensors()[1].name == "s");
  CHECK(ckpt.tensors()[2].name == "w");
  const di::tensor_view& t = ckpt.get("w");
  CHECK(t.type == di::dtype::f32);
  CHECK(t.shape == std::vector<std::int64_t>{2, 2});
  CHECK(t.num_elements() == 4);
  CHECK(t.file == (dir / "one.safetensors").string());
  REQUIRE(t.bytes.size() == 16);
  std::vector<float> read(4);
  std::memcpy(read.data(), t.bytes.data(), 16);
  CHECK(read == w);
  CHECK(ckpt.find("missing") == nullptr);
  CHECK(ckpt.find("w") == &t);
  CHECK(ckpt.metadata().at("format") == "pt");
  auto totals = ckpt.bytes_per_dtype();
  CHECK(totals.size() == 3);
  CHECK(totals[di::dtype::f32] == 16);
  CHECK(totals[di::dtype::f8_e4m3] == 4);
  CHECK(totals[di::dtype::f8_e8m0] == 1);
  try {
    ckpt.get("nope");
    FAIL("get of a missing tensor must throw");
  } catch (const di::error& e) {
    CHECK(std::string(e.what()) ==
          fmt::format("tensor 'nope' not found in {}", (dir / "one.safetensors").string()));
  }
}

TEST_CASE("checkpoint: the checkpoint stays valid after a move") {
  di::test::temp_dir dir("ckpt");
  write_file(dir / "model.safetensors", make_safetensors({{"x", "U8", {3}, "abc"}}));
  di::checkpoint first(dir.path());
  di::checkpoint moved(std::move(first));
  REQUIRE(moved.get("x").bytes.size() == 3);
  CHECK(std::memcmp(moved.get("x").bytes.data(), "abc", 3) == 0);
}

TEST_CASE("checkpoint: a directory with only model.safetensors") {
  di::test::temp_dir dir("ckpt");
  write_file(dir / "model.safetensors", make_safetensors({{"x", "I32", {1}, "abcd"}}));
  write_file(dir / "other.safetensors", "not even a safetensors file");
  di::checkpoint ckpt(dir.path());
  CHECK(ckpt.num_tensors() == 1);
  CHECK(ckpt.get("x").file == (dir / "model.safetensors").string());
  CHECK(ckpt.path() == dir.path().string());
}

TEST_CASE("checkpoint: unusable paths") {
  di::test::temp_dir dir("ckpt");
  std::string missing = (dir / "nothing_here").string();
  CHECK(open_error(missing) == missing + ": no such file or directory");
  CHECK(contains(open_error(dir.path()),
                 "no model.safetensors.index.json or model.safetensors in this directory"));
  write_file(dir / "bad.safetensors", di::test::raw_safetensors(R"({"w": [1, 2]})"));
  std::string message = open_error(dir / "bad.safetensors");
  CHECK(contains(message, (dir / "bad.safetensors").string() + ": tensor 'w': entry must be"));
}

TEST_CASE("checkpoint: a sharded directory is checked against its index") {
  di::test::temp_dir dir("ckpt");
  write_two_shards(dir);
  write_file(dir / "model.safetensors.index.json", index_json(good_map));
  di::checkpoint ckpt(dir.path());
  REQUIRE(ckpt.num_tensors() == 3);
  CHECK(ckpt.tensors()[0].name == "a1");
  CHECK(ckpt.tensors()[2].name == "b1");
  CHECK(ckpt.get("b1").file == (dir / "b.safetensors").string());
  CHECK(ckpt.get("a2").file == (dir / "a.safetensors").string());
  float a1 = 0;
  std::memcpy(&a1, ckpt.get("a1").bytes.data(), 4);
  CHECK(a1 == 1.5f);
  std::int64_t b1 = 0;
  std::memcpy(&b1, ckpt.get("b1").bytes.data(), 8);
  CHECK(b1 == 7);
  CHECK(ckpt.metadata().at("format") == "pt");  // the first shard by name wins
  CHECK(ckpt.metadata().at("origin") == "b");
  di::checkpoint via_index(dir / "model.safetensors.index.json");
  CHECK(via_index.num_tensors() == 3);
  CHECK(via_index.get("b1").file == (dir / "b.safetensors").string());
}

TEST_CASE("checkpoint: every way an index can be wrong gives one clear error") {
  struct index_case {
    const char* label;
    std::string index;
    std::string expected;  // substring of the message
  };
  const std::string weight_map_start = R"({"weight_map": {"a1": "a.safetensors", )";
  std::vector<index_case> cases = {
      {"missing shard file",
       index_json({{"a1", "a.safetensors"},
                   {"a2", "a.safetensors"},
                   {"b1", "b.safetensors"},
                   {"c", "gone.safetensors"}}),
       "shard 'gone.safetensors' (holding tensor 'c'): "},
      {"tensor absent from its shard",
       index_json({{"a1", "a.safetensors"},
                   {"a2", "a.safetensors"},
                   {"zz", "a.safetensors"},
                   {"b1", "b.safetensors"}}),
       "tensor 'zz' is mapped to shard 'a.safetensors', but"},
      {"shard tensor not in the index",
       index_json({{"a1", "a.safetensors"}, {"b1", "b.safetensors"}}),
       "a.safetensors: tensor 'a2' is not listed in"},
      {"tensor mapped to the wrong shard",
       index_json({{"a1", "a.safetensors"}, {"a2", "b.safetensors"}, {"b1", "b.safetensors"}}),
       "tensor 'a2' is in shard 'a.safetensors' but the index maps it to 'b.safetensors'"},
      {"parent directory", index_json({{"a1", "../a.safetensors"}}),
       "tensor 'a1': shard '../a.safetensors' is not a plain file name"},
      {"absolute path", index_json({{"a1", "/etc/passwd"}}),
       "tensor 'a1': shard '/etc/passwd' is not a plain file name"},
      {"subdirectory", index_json({{"a1", "sub/a.safetensors"}}), "is not a plain file name"},
      {"dot-dot alone", index_json({{"a1", ".."}}), "shard '..' is not a plain file name"},
      {"empty shard name", index_json({{"a1", ""}}), "shard '' is not a plain file name"},
      {"shard not a string", index_json({{"a1", 3}}), "tensor 'a1': shard must be a string"},
      {"no weight_map", R"({"metadata": {}})", "missing 'weight_map'"},
      {"weight_map an array", R"({"weight_map": []})", "'weight_map' must be an object"},
      {"empty weight_map", R"({"weight_map": {}})", "'weight_map' lists no tensors"},
      {"metadata not an object", R"({"metadata": 1, "weight_map": {"a1": "a.safetensors"}})",
       "'metadata' must be an object"},
      {"index not JSON", "{\"weight_map\": ", "shard index is not valid JSON"},
      {"index an array", "[]", "shard index must be a JSON object"},
      {"duplicate tensor in the index", weight_map_start + R"("a1": "b.safetensors"}})",
       "duplicate key 'a1' in 'weight_map'"},
  };
  for (const index_case& c : cases) {
    CAPTURE(c.label);
    di::test::temp_dir dir("ckpt");
    write_two_shards(dir);
    write_file(dir / "model.safetensors.index.json", c.index);
    std::string message = open_error(dir.path());
    CAPTURE(message);
    CHECK(contains(message, c.expected));
    CHECK(contains(message, dir.path().string()));
  }
}

TEST_CASE("checkpoint: a shard that is missing, a folder or a symlink loop says which") {
  // a folder was reported as "does not exist", a symlink loop as a raw filesystem error
  di::test::temp_dir dir("ckpt");
  write_two_shards(dir);
  const auto shard_map = [](const char* b_shard) {
    return index_json({{"a1", "a.safetensors"}, {"a2", "a.safetensors"}, {"b1", b_shard}});
  };
  write_file(dir / "model.safetensors.index.json", shard_map("gone.safetensors"));
  CHECK(contains(open_error(dir.path()), (dir / "gone.safetensors").string() + " does not exist"));
  std::filesystem::create_directory(dir / "sub.safetensors");
  write_file(dir / "model.safetensors.index.json", shard_map("sub.safetensors"));
  CHECK(contains(open_error(dir.path()),
                 (dir / "sub.safetensors").string() + " is a directory, not a file"));
  std::filesystem::create_symlink("loop.safetensors", dir / "loop.safetensors");
  write_file(dir / "model.safetensors.index.json", shard_map("loop.safetensors"));
  const std::string loop = open_error(dir.path());
  CAPTURE(loop);
  CHECK(contains(loop, "shard 'loop.safetensors' (holding tensor 'b1'): "));
  CHECK(contains(loop, "cannot be read: Too many levels of symbolic links"));
  di::test::temp_dir single("ckpt");  // a single-file checkpoint that is a link loop
  std::filesystem::create_symlink("model.safetensors", single / "model.safetensors");
  CHECK(
      contains(open_error(single.path()), (single / "model.safetensors").string() +
                                              ": cannot open: Too many levels of symbolic links"));
}

TEST_CASE("checkpoint: a broken shard is named in the error") {
  di::test::temp_dir dir("ckpt");
  write_two_shards(dir);
  write_file(dir / "b.safetensors", di::test::raw_safetensors(R"({"b1": {"dtype": "F32"}})"));
  write_file(dir / "model.safetensors.index.json", index_json(good_map));
  std::string message = open_error(dir.path());
  CHECK(message == (dir / "b.safetensors").string() + ": tensor 'b1': missing 'shape'");
}

namespace {

// Opens a golden checkpoint and checks that every tensor its index lists is there.
void check_golden(const char* name, std::size_t num_tensors) {
  fs::path dir = di::test::shared_path("testdata/golden") / name;
  REQUIRE(fs::exists(dir / "model.safetensors"));
  di::checkpoint ckpt(dir);
  CHECK(ckpt.num_tensors() == num_tensors);
  auto index =
      nlohmann::json::parse(di::read_text_file((dir / "model.safetensors.index.json").string()));
  CHECK(index["weight_map"].size() == num_tensors);
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    const di::tensor_view* t = ckpt.find(tensor);
    REQUIRE_MESSAGE(t != nullptr, tensor);
    CHECK(t->file == (dir / shard.get<std::string>()).string());
  }
  std::uint64_t total = 0;
  for (const auto& [type, bytes] : ckpt.bytes_per_dtype()) total += bytes;
  CHECK(total == index["metadata"]["total_size"].get<std::uint64_t>());
  CHECK(ckpt.metadata().at("format") == "pt");
  for (std::size_t i = 1; i < ckpt.num_tensors(); ++i)
    CHECK(ckpt.tensors()[i - 1].name < ckpt.tensors()[i].name);
}

void check_tensor(const di::checkpoint& ckpt, const char* name, di::dtype type,
                  std::vector<std::int64_t> shape) {
  CAPTURE(name);
  const di::tensor_view& t = ckpt.get(name);
  CHECK(t.type == type);
  CHECK(t.shape == shape);
}

}  // namespace

TEST_CASE("checkpoint: golden V4.1 checkpoint (32x32 FP8 blocks)") {
  check_golden("v41_public", 821);
  di::checkpoint ckpt(di::test::shared_path("testdata/golden/v41_public"));
  using di::dtype;
  check_tensor(ckpt, "layers.2.attn.wkv.weight", dtype::f8_e4m3, {128, 32});
  check_tensor(ckpt, "layers.2.attn.wkv.scale", dtype::f8_e8m0, {4, 1});
  check_tensor(ckpt, "layers.2.ffn.experts.0.w1.weight", dtype::i8, {64, 16});
  check_tensor(ckpt, "layers.2.ffn.experts.0.w1.scale", dtype::f8_e8m0, {64, 1});
  check_tensor(ckpt, "embed.weight", dtype::bf16, {129280, 32});
  auto totals = ckpt.bytes_per_dtype();
  CHECK(totals.size() == 5);
  CHECK(totals.at(dtype::bf16) > totals.at(dtype::f8_e4m3));
}

TEST_CASE("checkpoint: golden V4 checkpoint (128x128 FP8 blocks, I64 hash tables)") {
  check_golden("v4_public", 498);
  di::checkpoint ckpt(di::test::shared_path("testdata/golden/v4_public"));
  using di::dtype;
  check_tensor(ckpt, "layers.2.attn.wkv.weight", dtype::f8_e4m3, {128, 128});
  check_tensor(ckpt, "layers.2.attn.wkv.scale", dtype::f8_e8m0, {1, 1});
  check_tensor(ckpt, "layers.2.ffn.experts.0.w1.weight", dtype::i8, {128, 64});
  check_tensor(ckpt, "layers.2.ffn.experts.0.w1.scale", dtype::f8_e8m0, {128, 4});
  check_tensor(ckpt, "layers.0.ffn.gate.tid2eid", dtype::i64, {129280, 2});
  CHECK(ckpt.bytes_per_dtype().at(dtype::i64) == 3 * 129280 * 2 * 8);
}
