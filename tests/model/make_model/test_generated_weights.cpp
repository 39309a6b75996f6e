// Tests of what make_model stores: every tensor of the tiny checkpoints decodes (FP8/FP4
// through the project's dequantizers) to the values the generator drew, within the format's
// rounding and with minimal scales; the initialisation has the intended statistics; shards,
// alignment and --force behave.
#include "common/error.hpp"
#include "model/checkpoint/checkpoint.hpp"
#include "model/checkpoint/dequant.hpp"
#include "model/make_model/make_model.hpp"
#include "model/model_summary.hpp"
#include "tests/model/make_model/make_model_fixture.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>

namespace {

namespace fs = std::filesystem;
using di::test::generated;
using di::test::quiet_options;

/// Largest |decoded - generated| allowed, and whether the scale is minimal (the block's
/// largest magnitude in the format's top binade).
struct block_check {
  double worst_excess = 0.0;  ///< max over elements of |error| - bound (must stay <= 0)
  int non_minimal_scales = 0;
};

block_check check_quantized(const di::planned_tensor& t, const di::tensor_view& w,
                            const di::tensor_view& s, const std::vector<float>& ref) {
  const bool fp4 = t.storage == di::storage_kind::fp4_blocks;
  auto deq = fp4 ? di::dequant_fp4_to_f32(w, s, t.cols) : di::dequant_fp8_to_f32(w, s, t.block);
  const std::int64_t scale_cols = s.shape[1];
  std::vector<float> amax(std::size_t(s.num_elements()), 0.0f);
  block_check out;
  for (std::int64_t r = 0; r < t.rows; ++r)
    for (std::int64_t c = 0; c < t.cols; ++c) {
      std::size_t b = std::size_t((r / t.block.rows) * scale_cols + c / t.block.cols);
      float scale = di::e8m0_to_f32(s.bytes[b]);
      float x = ref[std::size_t(r * t.cols + c)], y = deq.values[std::size_t(r * t.cols + c)];
      double bound = fp4 ? 0.25 * std::max(std::fabs(x), scale)
                         : std::max(std::fabs(x) / 16.0f, scale / 512.0f);
      out.worst_excess = std::max(out.worst_excess, std::fabs(double(x) - y) - bound);
      amax[b] = std::max(amax[b], std::fabs(x));
    }
  const float top = fp4 ? 6.0f : 448.0f;
  for (std::size_t b = 0; b < amax.size(); ++b) {
    float ratio = amax[b] / di::e8m0_to_f32(s.bytes[b]);
    out.non_minimal_scales += !(ratio <= top && ratio > top / 2);
  }
  return out;
}

/// Compares every stored tensor of `dir` with what the generator draws for it.
void check_all_tensors(const fs::path& dir, std::uint64_t seed) {
  di::model_config config = di::load_model_config(dir.string());
  di::checkpoint ckpt(dir);
  auto tok = di::read_tokenizer_facts(dir / "tokenizer.json");
  di::init_context ctx = di::make_init_context(config, seed, {}, tok);
  di::model_plan plan = di::plan_model(config, di::default_max_shard_bytes);
  int num_checked = 0;
  for (const auto& t : plan.tensors) {
    CAPTURE(t.weight.name);
    const di::tensor_view& w = ckpt.get(t.weight.name);
    if (t.weight.type == di::dtype::i64) continue;  // tid2eid: checked separately
    std::vector<float> ref = di::generated_values(t, ctx, 0, t.rows);
    if (t.storage == di::storage_kind::plain) {
      std::vector<std::uint8_t> expect(w.bytes.size());
      if (t.weight.type == di::dtype::f32) std::memcpy(expect.data(), ref.data(), expect.size());
      for (std::size_t i = 0; t.weight.type == di::dtype::bf16 && i < ref.size(); ++i) {
        std::uint16_t h = di::f32_to_bf16(ref[i]);
        std::memcpy(expect.data() + 2 * i, &h, 2);
      }
      REQUIRE(std::equal(w.bytes.begin(), w.bytes.end(), expect.begin(), expect.end()));
    } else {
      block_check r = check_quantized(t, w, ckpt.get(t.scale->name), ref);
      REQUIRE(r.worst_excess <= 1e-7);
      REQUIRE(r.non_minimal_scales == 0);
    }
    ++num_checked;
  }
  CHECK(num_checked > 100);
}

/// Pearson correlation of two equally long vectors.
double correlation(const std::vector<float>& a, const std::vector<float>& b) {
  double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) ma += a[i], mb += b[i];
  ma /= double(a.size());
  mb /= double(b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    sab += (a[i] - ma) * (b[i] - mb), saa += (a[i] - ma) * (a[i] - ma),
        sbb += (b[i] - mb) * (b[i] - mb);
  return sab / std::sqrt(saa * sbb);
}

double rms(std::span<const float> v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s / double(v.size()));
}

}  // namespace

TEST_CASE("generated weights: every tensor of tiny-v41 decodes to the generated values") {
  check_all_tensors(generated("tiny-v41"), 0);
}

TEST_CASE("generated weights: every tensor of tiny-v4 decodes to the generated values") {
  check_all_tensors(generated("tiny-v4"), 0);
}

TEST_CASE("generated weights: initialisation statistics") {
  di::checkpoint ckpt(generated("tiny-v41"));
  auto bf16_rows = [&](const std::string& name, std::int64_t row0, std::int64_t rows) {
    const auto& t = ckpt.get(name);
    std::vector<float> out(std::size_t(rows * t.shape[1]));
    for (std::size_t i = 0; i < out.size(); ++i) {
      std::uint16_t h;
      std::memcpy(&h, t.bytes.data() + 2 * (std::size_t(row0 * t.shape[1]) + i), 2);
      out[i] = di::bf16_to_f32(h);
    }
    return out;
  };
  CHECK(rms(bf16_rows("embed.weight", 1000, 1000)) == doctest::Approx(1.0).epsilon(0.02));
  // head: logit std ~7 for hidden 128; added tokens (0-2, 128000+) and ids past the tokenizer
  // (128815+) are damped so that greedy decoding yields ordinary text tokens
  CHECK(rms(bf16_rows("head.weight", 1000, 1000)) * std::sqrt(128.0) ==
        doctest::Approx(7.0).epsilon(0.03));
  CHECK(rms(bf16_rows("head.weight", 0, 3)) < 0.02);
  CHECK(rms(bf16_rows("head.weight", 128000, 815)) < 0.02);
  CHECK(rms(bf16_rows("head.weight", 128815, 129280 - 128815)) < 0.02);
  // routed experts of one projection share a base (correlation ~0.9), the shared expert does not
  auto w1 = [&](const std::string& p) {
    return di::dequant_fp4_to_f32(ckpt.get(p + ".weight"), ckpt.get(p + ".scale")).values;
  };
  auto e0 = w1("layers.2.ffn.experts.0.w1"), e9 = w1("layers.2.ffn.experts.9.w1");
  CHECK(correlation(e0, e9) == doctest::Approx(0.9).epsilon(0.05));
  auto shared = di::dequant_fp8_to_f32(ckpt.get("layers.2.ffn.shared_experts.w1.weight"),
                                       ckpt.get("layers.2.ffn.shared_experts.w1.scale"), {32, 32});
  CHECK(std::fabs(correlation(e0, shared.values)) < 0.1);
  // gate biases are zero; mHC base: pre logit -1.1 (pre ~ 1/4), post 0, comb diagonal 2
  for (std::size_t i = 0; i < 16 * 4; ++i) CHECK(ckpt.get("layers.5.ffn.gate.bias").bytes[i] == 0);
  std::vector<float> base(24);
  std::memcpy(base.data(), ckpt.get("layers.5.hc_attn_base").bytes.data(), 96);
  CHECK(base[0] == doctest::Approx(-1.1).epsilon(0.3));
  CHECK(std::fabs(base[5]) < 0.5);
  CHECK(base[8] == doctest::Approx(2.0).epsilon(0.2));  // comb[0][0]
  CHECK(std::fabs(base[9]) < 0.5);                      // comb[0][1]
}

TEST_CASE("generated weights: V4 hash-routing tables hold distinct experts per token") {
  di::checkpoint ckpt(generated("tiny-v4"));
  const auto& t = ckpt.get("layers.1.ffn.gate.tid2eid");
  REQUIRE(t.shape == std::vector<std::int64_t>{129280, 4});
  std::vector<std::int64_t> ids(std::size_t(t.num_elements()));
  std::memcpy(ids.data(), t.bytes.data(), t.bytes.size());
  std::vector<int> load(16, 0);
  std::size_t bad_rows = 0;  // an id out of range or repeated within a token's row
  for (std::size_t tok = 0; tok < 129280; ++tok) {
    const std::int64_t* row = &ids[tok * 4];
    bool ok = true;
    for (int k = 0; k < 4; ++k) {
      ok = ok && row[k] >= 0 && row[k] < 16;
      for (int j = 0; j < k; ++j) ok = ok && row[j] != row[k];
      if (row[k] >= 0 && row[k] < 16) ++load[std::size_t(row[k])];
    }
    bad_rows += !ok;
  }
  CHECK(bad_rows == 0);
  for (int l : load) CHECK(l == doctest::Approx(129280 * 4 / 16).epsilon(0.05));
  CHECK(ckpt.find("layers.3.ffn.gate.tid2eid") == nullptr);  // score-routed from layer 3 on
}

TEST_CASE("generated weights: shards and tensor alignment") {
  di::test::temp_dir dir("make-model");
  auto o = quiet_options("tiny-v41", dir / "sharded");
  o.max_shard_bytes = 16u << 20;
  auto result = di::make_model(o);
  REQUIRE(result.plan.shard_files.size() >= 5);
  CHECK(result.plan.shard_files[0] ==
        fmt::format("model-00001-of-{:05d}.safetensors", result.plan.shard_files.size()));
  di::checkpoint sharded(dir / "sharded"), single(generated("tiny-v41"));
  CHECK(di::summarize_checkpoint(sharded, di::load_model_config((dir / "sharded").string()))
            .matches());
  REQUIRE(sharded.num_tensors() == single.num_tensors());
  for (const auto& t : single.tensors()) {
    const auto& u = sharded.get(t.name);
    REQUIRE(std::equal(t.bytes.begin(), t.bytes.end(), u.bytes.begin(), u.bytes.end()));
    // every tensor starts at an address aligned to its element size (mapped files are
    // page-aligned, headers padded to 8, tensors ordered by element size)
    CHECK(reinterpret_cast<std::uintptr_t>(u.bytes.data()) % di::dtype_size(u.type) == 0);
  }
  // a shard stays within the limit unless a single weight (with its scale) is larger
  std::vector<std::uint64_t> bytes(result.plan.shard_files.size(), 0);
  std::vector<int> count(result.plan.shard_files.size(), 0);
  for (const auto& t : result.plan.tensors) {
    std::size_t s = std::size_t(t.shard);
    for (const auto* w : {&t.weight, t.scale ? &*t.scale : nullptr})
      if (w != nullptr) bytes[s] += di::tensor_decl{w->name, w->type, w->shape}.num_bytes();
    ++count[s];
    CHECK(t.shard >= (&t == &result.plan.tensors.front() ? 0 : (&t)[-1].shard));  // in order
  }
  for (std::size_t s = 0; s < bytes.size(); ++s)
    CHECK((bytes[s] <= o.max_shard_bytes || count[s] == 1));
}

TEST_CASE("generated weights: --force replaces a checkpoint, never anything else") {
  di::test::temp_dir dir("make-model");
  fs::path out = dir / "ckpt";
  fs::create_directories(out);
  di::test::write_file(out / "notes.txt", "keep me");
  di::test::write_file(out / "model-00001-of-00009.safetensors", "stale shard");
  CHECK_THROWS_WITH_AS(di::make_model(quiet_options("tiny-v4", out)),
                       doctest::Contains("folder is not empty; pass --force"), di::error);
  CHECK(fs::exists(out / "model-00001-of-00009.safetensors"));
  CHECK_FALSE(fs::exists(out / "config.json"));
  auto o = quiet_options("tiny-v4", out);
  o.force = true;
  di::make_model(o);
  CHECK(fs::exists(out / "notes.txt"));
  CHECK_FALSE(fs::exists(out / "model-00001-of-00009.safetensors"));
  di::checkpoint ckpt(out);
  CHECK(di::summarize_checkpoint(ckpt, di::load_model_config(out.string())).matches());
  // an output path that is a file is refused
  di::test::write_file(dir / "plain-file", "x");
  o.out_dir = dir / "plain-file";
  CHECK_THROWS_WITH_AS(di::make_model(o), doctest::Contains("is not a directory"), di::error);
}
