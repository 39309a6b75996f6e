// Tests of weight loading: matrices stay views into the checkpoint mapping in their stored
// format (nothing large is copied or widened on load), each linear keeps the activation
// quantization flag of its stored dtype, and a malformed scale tensor is a clear error.
#include "model/checkpoint/checkpoint.hpp"
#include "tests/model/forward/golden.hpp"

#include <doctest/doctest.h>

namespace di::test {
namespace {

/// Whether `t` points at exactly the bytes of checkpoint tensor `name`.
bool is_view_of(const tensor& t, const checkpoint& ckpt, const std::string& name) {
  const tensor_view& v = ckpt.get(name);
  return t.raw() == v.bytes.data() && t.nbytes() == v.bytes.size() && t.type() == v.type;
}

TEST_CASE("weights: matrices are zero-copy views in their stored format") {
  const auto dir = shared_path("testdata/golden/v41_public");
  const model_config config = load_model_config(dir.string());
  auto ckpt = std::make_shared<const checkpoint>(dir);
  const model_weights w = load_model_weights(ckpt, config);
  CHECK(is_view_of(w.embed, *ckpt, "embed.weight"));  // BF16, not widened
  CHECK(is_view_of(w.head.values, *ckpt, "head.weight"));
  CHECK_FALSE(w.head.scales.defined());
  const layer_weights& l = w.layers[2];
  CHECK(is_view_of(l.attn.wq_a.w.values, *ckpt, "layers.2.attn.wq_a.weight"));  // FP8
  CHECK(is_view_of(l.attn.wq_a.w.scales, *ckpt, "layers.2.attn.wq_a.scale"));
  CHECK(l.attn.wq_a.w.block.rows == config.quant.block_n);
  CHECK(l.attn.wq_a.quantized);
  CHECK(is_view_of(l.attn.wo_a.values, *ckpt, "layers.2.attn.wo_a.weight"));
  const linear_weight& w1 = l.moe.experts[3].w1;  // packed FP4
  CHECK(is_view_of(w1.w.values, *ckpt, "layers.2.ffn.experts.3.w1.weight"));
  CHECK(w1.w.cols() == config.hidden_size);
  CHECK(w1.quantized);
  CHECK(is_view_of(l.moe.gate.values, *ckpt, "layers.2.ffn.gate.weight"));  // BF16
  CHECK(is_view_of(l.compressor.wkv.values, *ckpt, "layers.2.attn.compressor.wkv.weight"));
}

TEST_CASE("weights: route_repeats counts the most routes of one token to one expert") {
  // A hash-routed layer's tid2eid may name an expert twice in a row (the reference sums its
  // weight twice); the CUDA expert GEMM's captured steps bound an expert's rows by the tokens
  // times this count, so it must see the repeat.
  auto table = [](std::vector<std::int32_t> v, std::int64_t k) {
    tensor t = tensor::empty({std::int64_t(v.size()) / k, k}, dtype::i32);
    std::copy(v.begin(), v.end(), t.data<std::int32_t>());
    return t;
  };
  CHECK(max_route_repeats(table({0, 1, 2, 3, 4, 5}, 3)) == 1);
  CHECK(max_route_repeats(table({0, 1, 2, 3, 5, 3}, 3)) == 2);  // the second row repeats 3
  CHECK(max_route_repeats(table({7, 7, 7, 1, 2, 3}, 3)) == 3);
  CHECK(max_route_repeats(table({}, 2)) == 0);
  // The V4 golden's hash-routed layers route each token to distinct experts; every other
  // layer keeps 1.
  const auto dir = shared_path("testdata/golden/v4_public");
  const model_config config = load_model_config(dir.string());
  auto ckpt = std::make_shared<const checkpoint>(dir);
  const model_weights w = load_model_weights(ckpt, config);
  int hashed = 0;
  for (int l = 0; l < config.num_layers; ++l) {
    CAPTURE(l);
    const moe_weights& m = w.layers[std::size_t(l)].moe;
    CHECK(m.route_repeats == 1);
    if (config.is_hash_routed(l)) {
      ++hashed;
      CHECK(max_route_repeats(m.tid2eid) == 1);
    }
  }
  CHECK(hashed > 0);
}

TEST_CASE("weights: a scale tensor that does not fit its weight is an error naming the weight") {
  const auto dir = shared_path("testdata/golden/v41_public");
  model_config config = load_model_config(dir.string());
  config.quant.block_n *= 2;  // FP8 scales now have twice the rows they should
  auto ckpt = std::make_shared<const checkpoint>(dir);
  CHECK_THROWS_WITH_AS(load_model_weights(ckpt, config),
                       doctest::Contains("layers.0.attn.wq_a.weight': scales"), error);
}

}  // namespace
}  // namespace di::test
