// End-to-end tests of make_model on the tiny presets: the checkpoint opens and matches its
// config exactly, the tokenizer files are the bundled ones, the files are deterministic in the
// seed, and bad input changes nothing.
#include "model/make_model/make_model.hpp"

#include "common/error.hpp"
#include "common/mapped_file.hpp"
#include "model/checkpoint/checkpoint.hpp"
#include "model/engram/token_map.hpp"
#include "model/model_summary.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "tests/model/make_model/make_model_fixture.hpp"
#include "tests/test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>

namespace {

namespace fs = std::filesystem;
using di::test::generated;
using di::test::quiet_options;

std::string file_bytes(const fs::path& p) {
  di::mapped_file f(p.string());
  return std::string(reinterpret_cast<const char*>(f.bytes().data()), f.bytes().size());
}

std::vector<fs::path> sorted_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("make_model: every preset config parses and plans (including the real-width ones)") {
  REQUIRE(di::model_presets().size() == 4);
  for (const auto& p : di::model_presets()) {
    CAPTURE(p.name);
    di::model_config c = di::preset_model_config(p);
    di::model_plan plan = di::plan_model(c, di::default_max_shard_bytes);
    CHECK(plan.num_stored_tensors() == di::expected_weights(c).size());
    std::uint64_t sum = 0;
    for (const auto& [t, b] : plan.bytes_per_dtype) sum += b;
    CHECK(sum == plan.total_bytes);
    CHECK(c.vocab_size == 129280);
  }
  auto v41 = di::preset_model_config(di::find_model_preset("v41-flash-L4"));
  CHECK(v41.hidden_size == 5120);
  CHECK(v41.n_routed_experts == 384);
  CHECK(v41.engram.head_dim == 256);
  CHECK(v41.engram.compressed_vocab_size == 98627);
  auto plan = di::plan_model(v41, di::default_max_shard_bytes);
  CHECK(plan.shard_files.size() > 1);
  for (const auto& t : plan.tensors)
    if (t.weight.name.find("engram.embed.weight") != std::string::npos)
      CHECK(t.weight.shape[0] * 264 < (std::int64_t(3) << 30));  // a few GB per table at most
  auto v4 = di::preset_model_config(di::find_model_preset("v4-flash-L4"));
  CHECK(v4.hidden_size == 4096);
  CHECK(v4.n_routed_experts == 256);
}

TEST_CASE("make_model: unknown preset is a clear error listing the presets; nothing is written") {
  di::test::temp_dir dir("make-model");
  CHECK_THROWS_WITH_AS(di::make_model(quiet_options("huge-v5", dir / "out")),
                       doctest::Contains("unknown preset 'huge-v5' (available: tiny-v41, tiny-v4, "
                                         "v41-flash-L4, v4-flash-L4)"),
                       di::error);
  CHECK_FALSE(fs::exists(dir / "out"));
}

TEST_CASE("make_model: tiny presets open as checkpoints that match their configs exactly") {
  for (const std::string preset : {"tiny-v41", "tiny-v4"}) {
    CAPTURE(preset);
    fs::path dir = generated(preset);
    CHECK(sorted_files(dir) == std::vector<fs::path>{"config.json", "model.safetensors",
                                                     "model.safetensors.index.json",
                                                     "tokenizer.json", "tokenizer_config.json"});
    di::model_config config = di::load_model_config(dir.string());
    di::checkpoint ckpt(dir);
    di::model_summary s = di::summarize_checkpoint(ckpt, config);
    CHECK(s.matches());
    CHECK(s.num_found == s.num_expected);
    CHECK(s.unverified.empty());
    CHECK(ckpt.num_tensors() == s.num_expected);
    // the config written is the preset's, and dry-run accounting equals what inspect counts
    CHECK(di::read_text_file((dir / "config.json").string()) ==
          di::preset_config_json(di::find_model_preset(preset)));
    auto plan = di::plan_model(config, di::default_max_shard_bytes);
    CHECK(plan.total_params == s.total_params);
    CHECK(plan.active_params_per_token == s.active_params_per_token);
    CHECK(plan.bytes_per_dtype == s.bytes_per_dtype);
    // the tokenizer files are the bundled ones, byte for byte
    fs::path assets = di::find_tokenizer_assets();
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      CHECK(file_bytes(dir / f) == file_bytes(assets / f));
  }
}

TEST_CASE("make_model: same seed gives identical bytes, another seed other weights") {
  fs::path a = generated("tiny-v41", 0);
  di::test::temp_dir again("make-model");
  di::make_model(quiet_options("tiny-v41", again / "ckpt", 0));
  for (const auto& f : sorted_files(a)) {
    CAPTURE(f);
    CHECK(file_bytes(a / f) == file_bytes(again / "ckpt" / f));
  }
  fs::path b = generated("tiny-v41", 7);
  CHECK(file_bytes(a / "config.json") == file_bytes(b / "config.json"));
  di::checkpoint ca(a), cb(b);
  for (const char* name : {"embed.weight", "layers.3.ffn.experts.5.w2.weight",
                           "layers.0.hc_attn_fn", "layers.4.engram.embed.weight"}) {
    CAPTURE(name);
    auto x = ca.get(name).bytes, y = cb.get(name).bytes;
    REQUIRE(x.size() == y.size());
    std::size_t same = 0;
    for (std::size_t i = 0; i < x.size(); ++i) same += x[i] == y[i];
    CHECK(double(same) < 0.5 * double(x.size()));
  }
}

TEST_CASE("make_model: engram_compressed_vocab_size is what the shipped tokenizer yields") {
  fs::path dir = generated("tiny-v41");
  di::model_config config = di::load_model_config(dir.string());
  auto tok = di::tok::tokenizer::from_dir(dir.string());
  CHECK(config.engram.compressed_vocab_size == di::build_engram_token_map(tok).num_compressed);
  CHECK(config.engram.compressed_vocab_size == di::bundled_tokenizer_engram_vocab);
  // the rows of each table are the official prime-bucket sums
  auto primes = di::engram_bucket_primes(config.engram);
  REQUIRE(primes.size() == 2);
  for (std::size_t i = 0; i < primes.size(); ++i) {
    std::int64_t rows = 0;
    for (auto p : primes[i]) rows += p;
    CHECK(rows == config.engram.num_embeddings[i]);
  }
}
