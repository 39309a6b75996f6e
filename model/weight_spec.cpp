// Weight layout of DeepSeek-V4.1 and V4 checkpoints, derived from the config. Shapes follow
// the official checkpoints (confirmed on ../shared/testdata/golden): Linear weights are
// [out, in]; FP8 weights carry a ue8m0 `.scale` of [ceil(out/bn), ceil(in/bk)]; FP4 routed
// experts store [out, in/2] bytes with a ue8m0 `.scale` of [out, ceil(in/32)].
#include "model/weight_spec.hpp"

#include <fmt/format.h>

namespace di {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

/// Appends tensors of one layer (or the model) under a common name prefix.
class spec_builder {
 public:
  spec_builder(const model_config& c, std::vector<weight_spec>& out) : c_(c), out_(out) {}
  void at(std::string prefix, int layer) {
    prefix_ = std::move(prefix);
    layer_ = layer;
  }

  void plain(const std::string& name, dtype t, std::vector<std::int64_t> shape, weight_group g) {
    out_.push_back({prefix_ + name, t, std::move(shape), g, layer_});
  }
  /// An FP8 block-quantized linear [out, in] with its scale (BF16 when unquantized).
  void fp8_linear(const std::string& name, std::int64_t out, std::int64_t in, weight_group g) {
    if (c_.quant.method.empty()) {
      plain(name + ".weight", dtype::bf16, {out, in}, g);
      return;
    }
    plain(name + ".weight", dtype::f8_e4m3, {out, in}, g);
    plain(name + ".scale", dtype::f8_e8m0, {ceil_div(out, c_.quant.block_n), ceil_div(in, c_.quant.block_k)}, g);
  }
  /// A routed-expert linear: MXFP4 (packed) or FP8 per quantization_config.expert_dtype.
  void expert_linear(const std::string& name, std::int64_t out, std::int64_t in) {
    if (c_.quant.expert_dtype != "fp4") {
      fp8_linear(name, out, in, weight_group::routed_experts);
      return;
    }
    plain(name + ".weight", dtype::i8, {out, in / 2}, weight_group::routed_experts);
    plain(name + ".scale", dtype::f8_e8m0, {out, ceil_div(in, 32)}, weight_group::routed_experts);
  }
  void norm(const std::string& name, std::int64_t dim, weight_group g = weight_group::norm) {
    plain(name + ".weight", dtype::bf16, {dim}, g);
  }

 private:
  const model_config& c_;
  std::vector<weight_spec>& out_;
  std::string prefix_;
  int layer_ = -1;
};

void add_attention(const model_config& c, int l, spec_builder& b) {
  const std::int64_t d = c.hidden_size, hd = c.head_dim, h = c.num_heads;
  b.norm("attn_norm", d);
  b.plain("attn.attn_sink", dtype::f32, {h}, weight_group::attention);
  b.fp8_linear("attn.wq_a", c.q_lora_rank, d, weight_group::attention);
  b.norm("attn.q_norm", c.q_lora_rank, weight_group::attention);
  b.fp8_linear("attn.wq_b", h * hd, c.q_lora_rank, weight_group::attention);
  b.fp8_linear("attn.wkv", hd, d, weight_group::attention);
  b.norm("attn.kv_norm", hd, weight_group::attention);
  b.fp8_linear("attn.wo_a", std::int64_t(c.o_groups) * c.o_lora_rank, h * hd / c.o_groups,
               weight_group::attention);
  b.fp8_linear("attn.wo_b", d, std::int64_t(c.o_groups) * c.o_lora_rank, weight_group::attention);
}

/// V4.1: the group's KV source owns the compressor; index sources own an indexer, and the
/// KV source's indexer also owns the key projection.
void add_v41_compression(const model_config& c, int l, spec_builder& b) {
  const std::int64_t d = c.hidden_size, hd = c.head_dim;
  if (c.is_kv_source(l)) {
    b.plain("attn.compressor.wkv.weight", dtype::bf16, {hd, d}, weight_group::compressor);
    if (c.compress_ratio(l) > 1)
      b.plain("attn.compressor.wgate.weight", dtype::bf16, {hd, d}, weight_group::compressor);
    b.norm("attn.compressor.norm", hd, weight_group::compressor);
  }
  if (c.is_index_source(l)) {
    b.fp8_linear("attn.indexer.wq_b", std::int64_t(c.index_n_heads) * c.index_head_dim,
                 c.q_lora_rank, weight_group::indexer);
    b.plain("attn.indexer.weights_proj.weight", dtype::bf16, {c.index_n_heads, d}, weight_group::indexer);
    if (c.is_kv_source(l)) {
      b.plain("attn.indexer.wk.weight", dtype::bf16, {c.index_head_dim, hd}, weight_group::indexer);
      b.norm("attn.indexer.k_norm", c.index_head_dim, weight_group::indexer);
    }
  }
}

/// V4: every compressed layer owns a compressor (overlapping windows at ratio 4, which
/// doubles its width); ratio-4 layers also own an indexer with its own compressor.
void add_v4_compressor(const model_config& c, int l, const std::string& name, std::int64_t hd,
                       weight_group g, spec_builder& b) {
  const std::int64_t width = (c.has_overlap(l) ? 2 : 1) * hd;
  b.plain(name + ".ape", dtype::f32, {c.compress_ratio(l), width}, g);
  b.plain(name + ".wkv.weight", dtype::bf16, {width, c.hidden_size}, g);
  b.plain(name + ".wgate.weight", dtype::bf16, {width, c.hidden_size}, g);
  b.norm(name + ".norm", hd, g);
}

void add_v4_compression(const model_config& c, int l, spec_builder& b) {
  add_v4_compressor(c, l, "attn.compressor", c.head_dim, weight_group::compressor, b);
  if (c.has_indexer(l)) {
    add_v4_compressor(c, l, "attn.indexer.compressor", c.index_head_dim, weight_group::indexer, b);
    b.fp8_linear("attn.indexer.wq_b", std::int64_t(c.index_n_heads) * c.index_head_dim,
                 c.q_lora_rank, weight_group::indexer);
    b.plain("attn.indexer.weights_proj.weight", dtype::bf16, {c.index_n_heads, c.hidden_size},
            weight_group::indexer);
  }
}

void add_moe(const model_config& c, int l, spec_builder& b) {
  const std::int64_t d = c.hidden_size, inter = c.moe_intermediate_size;
  b.norm("ffn_norm", d);
  b.plain("ffn.gate.weight", dtype::bf16, {c.n_routed_experts, d}, weight_group::moe_gate);
  if (c.is_hash_routed(l)) {
    b.plain("ffn.gate.tid2eid", dtype::i64, {c.vocab_size, c.num_experts_per_tok}, weight_group::moe_gate);
  } else {
    b.plain("ffn.gate.bias", dtype::f32, {c.n_routed_experts}, weight_group::moe_gate);
    if (c.is_v41()) b.plain("ffn.gate.bias_vl", dtype::f32, {c.n_routed_experts}, weight_group::moe_gate);
  }
  for (int e = 0; e < c.n_routed_experts; ++e) {
    std::string p = fmt::format("ffn.experts.{}.", e);
    b.expert_linear(p + "w1", inter, d);
    b.expert_linear(p + "w2", d, inter);
    b.expert_linear(p + "w3", inter, d);
  }
  if (c.n_shared_experts > 0) {
    const std::int64_t shared = inter * c.n_shared_experts;
    b.fp8_linear("ffn.shared_experts.w1", shared, d, weight_group::shared_experts);
    b.fp8_linear("ffn.shared_experts.w2", d, shared, weight_group::shared_experts);
    b.fp8_linear("ffn.shared_experts.w3", shared, d, weight_group::shared_experts);
  }
}

void add_mhc(const model_config& c, spec_builder& b) {
  const std::int64_t hc = c.hc_mult, mix = (2 + hc) * hc;
  for (const char* site : {"hc_attn", "hc_ffn"}) {
    std::string s = site;
    b.plain(s + "_fn", dtype::f32, {mix, hc * c.hidden_size}, weight_group::mhc);
    b.plain(s + "_base", dtype::f32, {mix}, weight_group::mhc);
    b.plain(s + "_scale", dtype::f32, {3}, weight_group::mhc);
  }
}

void add_engram(const model_config& c, int l, spec_builder& b) {
  const engram_config& e = c.engram;
  std::size_t slot = 0;
  while (e.layer_ids[slot] != l) ++slot;
  const std::int64_t rows = e.num_embeddings[slot];
  b.plain("engram.embed.weight", dtype::f8_e4m3, {rows, e.head_dim}, weight_group::engram);
  b.plain("engram.embed.scale", dtype::f8_e8m0, {rows, e.head_dim / 32}, weight_group::engram);
  b.fp8_linear("engram.wkv", c.hidden_size * (c.hc_mult + 1),
               std::int64_t(e.num_hash_columns()) * e.head_dim, weight_group::engram);
  b.plain("engram.q_weight", dtype::bf16, {c.hc_mult, c.hidden_size}, weight_group::engram);
  b.plain("engram.k_weight", dtype::bf16, {c.hc_mult, c.hidden_size}, weight_group::engram);
}

}  // namespace

std::vector<weight_spec> expected_weights(const model_config& c) {
  std::vector<weight_spec> out;
  spec_builder b(c, out);
  b.at("", -1);
  b.plain("embed.weight", dtype::bf16, {c.vocab_size, c.hidden_size}, weight_group::embedding);
  b.norm("norm", c.hidden_size);
  b.plain("head.weight", dtype::bf16, {c.vocab_size, c.hidden_size}, weight_group::head);
  if (!c.is_v41()) {  // V4 collapses the streams with its own head mix; V4.1 reuses the last `pre`
    const std::int64_t hc = c.hc_mult;
    b.plain("hc_head_fn", dtype::f32, {hc, hc * c.hidden_size}, weight_group::mhc);
    b.plain("hc_head_base", dtype::f32, {hc}, weight_group::mhc);
    b.plain("hc_head_scale", dtype::f32, {1}, weight_group::mhc);
  }
  for (int l = 0; l < c.num_layers; ++l) {
    b.at(fmt::format("layers.{}.", l), l);
    add_attention(c, l, b);
    if (c.compress_ratio(l) > 0) {
      if (c.is_v41()) add_v41_compression(c, l, b);
      else add_v4_compression(c, l, b);
    }
    add_moe(c, l, b);
    add_mhc(c, b);
    if (c.is_engram_layer(l)) add_engram(c, l, b);
  }
  return out;
}

const std::vector<std::string>& unverified_weight_prefixes() {
  static const std::vector<std::string> prefixes = {"mtp.", "vision.", "aligner.", "image_"};
  return prefixes;
}

bool weight_spec::is_scale() const {
  return name.size() > 6 && name.compare(name.size() - 6, 6, ".scale") == 0 && type == dtype::f8_e8m0;
}

std::int64_t weight_spec::num_params() const {
  if (is_scale()) return 0;
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  return group == weight_group::routed_experts && type == dtype::i8 ? 2 * n : n;
}

std::string to_string(weight_group g) {
  switch (g) {
    case weight_group::embedding: return "embedding";
    case weight_group::attention: return "attention";
    case weight_group::compressor: return "compressor";
    case weight_group::indexer: return "indexer";
    case weight_group::mhc: return "mHC";
    case weight_group::moe_gate: return "router";
    case weight_group::routed_experts: return "routed experts";
    case weight_group::shared_experts: return "shared experts";
    case weight_group::engram: return "engram";
    case weight_group::norm: return "norms";
    case weight_group::head: return "head";
  }
  return "?";
}

}  // namespace di
