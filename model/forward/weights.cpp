// Loading a checkpoint into model_weights: names follow the official checkpoints (see
// model/weight_spec.cpp). Matrices become views into the mapping with their ue8m0 scales (FP8
// blocks, FP4 per 32 inputs); only small vectors are copied, BF16 ones widened to fp32.
#include "model/forward/weights.hpp"

#include "model/checkpoint/checkpoint.hpp"

#include <fmt/format.h>

#include <cstring>

namespace di {

namespace {

/// The bytes of `v` in place, with its stored dtype and shape.
tensor in_place(const tensor_view& v) {
  return tensor::view_of(v.bytes.data(), tensor_shape(v.shape), v.type);
}

class weight_reader {
 public:
  weight_reader(const checkpoint& c, const model_config& cfg) : ckpt_(c), cfg_(cfg) {}

  /// A BF16/F32 tensor as fp32 with its stored shape.
  tensor dense(const std::string& name) const {
    const tensor_view& v = ckpt_.get(name);
    tensor t = tensor::empty(tensor_shape(v.shape), dtype::f32);
    float* out = t.data<float>();
    const std::int64_t n = v.num_elements();
    if (v.type == dtype::f32) {
      std::memcpy(out, v.bytes.data(), std::size_t(n) * 4);
    } else if (v.type == dtype::bf16) {
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, v.bytes.data() + 2 * i, 2);
        out[i] = bf16_to_f32(h);
      }
    } else {
      DI_FAIL("{}: tensor '{}' is {}, expected BF16 or F32", v.file, name, dtype_name(v.type));
    }
    return t;
  }

  /// `name`.weight (+ `name`.scale) in place: FP8 block-scaled, packed FP4, or BF16/F32.
  weight_matrix matrix(const std::string& name) const {
    const tensor_view& v = ckpt_.get(name + ".weight");
    weight_matrix w;
    if (v.type == dtype::f8_e4m3) {
      w = weight_matrix::fp8(in_place(v), in_place(ckpt_.get(name + ".scale")),
                             {cfg_.quant.block_n, cfg_.quant.block_k});
    } else if (v.type == dtype::i8) {
      w = weight_matrix::fp4(in_place(v), in_place(ckpt_.get(name + ".scale")));
    } else {
      w = in_place(v);
    }
    check_weight_matrix(w, fmt::format("{}: '{}'", v.file, v.name));
    return w;
  }

  /// A linear whose input the reference FP8-quantizes when its weight is FP8 or FP4.
  linear_weight linear(const std::string& name) const {
    weight_matrix w = matrix(name);
    const bool quantized = w.scales.defined();
    return {std::move(w), quantized};
  }

  /// An I64 token-to-expert table as i32.
  tensor index_table(const std::string& name) const {
    const tensor_view& v = ckpt_.get(name);
    DI_CHECK(v.type == dtype::i64 || v.type == dtype::i32, "{}: '{}' must be I64 or I32", v.file,
             name);
    tensor t = tensor::empty(tensor_shape(v.shape), dtype::i32);
    for (std::int64_t i = 0; i < v.num_elements(); ++i) {
      std::int64_t e = 0;
      if (v.type == dtype::i64) {
        std::memcpy(&e, v.bytes.data() + 8 * i, 8);
      } else {
        std::int32_t e32;
        std::memcpy(&e32, v.bytes.data() + 4 * i, 4);
        e = e32;
      }
      DI_CHECK(e >= 0 && e < cfg_.n_routed_experts, "{}: '{}' routes to expert {} of {}", v.file,
               name, e, cfg_.n_routed_experts);
      t.data<std::int32_t>()[i] = std::int32_t(e);
    }
    return t;
  }

  /// A BF16/F32 lookup table [rows, dim] in place (gathered a few rows per step).
  tensor table(const std::string& name) const {
    const tensor_view& v = ckpt_.get(name);
    DI_CHECK((v.type == dtype::bf16 || v.type == dtype::f32) && v.shape.size() == 2,
             "{}: '{}' must be a 2-D BF16 or F32 table, is {} {}", v.file, name, dtype_name(v.type),
             format_shape(v.shape));
    return in_place(v);
  }

  /// A raw byte view of a 1-byte-per-element tensor (FP8 codes, E8M0 scales).
  tensor byte_view(const std::string& name) const {
    const tensor_view& v = ckpt_.get(name);
    DI_CHECK(dtype_size(v.type) == 1 && v.shape.size() == 2, "{}: '{}' must be a 2-D byte tensor",
             v.file, name);
    return tensor::view_of(v.bytes.data(), tensor_shape(v.shape), dtype::u8);
  }

  hc_site_weights hc_site(const std::string& prefix) const {
    return {dense(prefix + "_fn"), dense(prefix + "_base"), dense(prefix + "_scale")};
  }

  compressor_weights compressor(const std::string& p, bool has_ape, bool has_gate) const {
    compressor_weights c;
    if (has_ape) c.ape = dense(p + ".ape");
    c.wkv = matrix(p + ".wkv");
    if (has_gate) c.wgate = matrix(p + ".wgate");
    c.norm = dense(p + ".norm.weight");
    return c;
  }

  expert_weights expert(const std::string& p) const {
    return {linear(p + ".w1"), linear(p + ".w2"), linear(p + ".w3")};
  }

 private:
  const checkpoint& ckpt_;
  const model_config& cfg_;
};

attention_weights load_attention(const weight_reader& r, const std::string& p) {
  attention_weights a;
  a.sinks = r.dense(p + "attn.attn_sink");
  a.wq_a = r.linear(p + "attn.wq_a");
  a.q_norm = r.dense(p + "attn.q_norm.weight");
  a.wq_b = r.linear(p + "attn.wq_b");
  a.wkv = r.linear(p + "attn.wkv");
  a.kv_norm = r.dense(p + "attn.kv_norm.weight");
  a.wo_a = r.matrix(p + "attn.wo_a");
  a.wo_b = r.linear(p + "attn.wo_b");
  return a;
}

void load_compression(const weight_reader& r, const model_config& c, int l, const std::string& p,
                      layer_weights& lw) {
  if (c.is_v41()) {
    if (c.is_kv_source(l))
      lw.compressor = r.compressor(p + "attn.compressor", false, c.compress_ratio(l) > 1);
    if (c.is_index_source(l)) {
      lw.indexer.wq_b = r.linear(p + "attn.indexer.wq_b");
      lw.indexer.weights_proj = r.matrix(p + "attn.indexer.weights_proj");
      if (c.is_kv_source(l)) {
        lw.indexer.wk = r.matrix(p + "attn.indexer.wk");
        lw.indexer.k_norm = r.dense(p + "attn.indexer.k_norm.weight");
      }
    }
    return;
  }
  lw.compressor = r.compressor(p + "attn.compressor", true, true);
  if (c.has_indexer(l)) {
    lw.indexer.compressor = r.compressor(p + "attn.indexer.compressor", true, true);
    lw.indexer.wq_b = r.linear(p + "attn.indexer.wq_b");
    lw.indexer.weights_proj = r.matrix(p + "attn.indexer.weights_proj");
  }
}

moe_weights load_moe(const weight_reader& r, const model_config& c, int l, const std::string& p) {
  moe_weights m;
  m.gate = r.matrix(p + "ffn.gate");
  if (c.is_hash_routed(l)) {
    m.tid2eid = r.index_table(p + "ffn.gate.tid2eid");
    m.route_repeats = std::max(1, max_route_repeats(m.tid2eid));
  } else {
    m.bias = r.dense(p + "ffn.gate.bias");
  }
  for (int e = 0; e < c.n_routed_experts; ++e)
    m.experts.push_back(r.expert(fmt::format("{}ffn.experts.{}", p, e)));
  m.shared = r.expert(p + "ffn.shared_experts");
  return m;
}

}  // namespace

int max_route_repeats(const tensor& tid2eid) {
  DI_CHECK(
      tid2eid.type() == dtype::i32 && tid2eid.rank() == 2 && tid2eid.dev().kind == device_kind::cpu,
      "max_route_repeats: a [vocab, top_k] i32 host table, got {} {}", dtype_name(tid2eid.type()),
      tid2eid.shape().str());
  const std::int64_t rows = tid2eid.size(0), k = tid2eid.size(1);
  const std::int32_t* t = tid2eid.data<std::int32_t>();
  int most = 0;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < k; ++i) {  // k is small (the routed experts per token)
      int n = 0;
      for (std::int64_t j = 0; j < k; ++j) n += t[r * k + j] == t[r * k + i];
      most = std::max(most, n);
    }
  return most;
}

model_weights load_model_weights(std::shared_ptr<const checkpoint> ckpt, const model_config& c) {
  DI_CHECK(ckpt != nullptr, "load_model_weights: no checkpoint");
  DI_CHECK(c.n_shared_experts == 1, "{}: {} shared experts; the forward supports exactly one",
           ckpt->path(), c.n_shared_experts);
  weight_reader r(*ckpt, c);
  model_weights w;
  w.source = ckpt;
  w.embed = r.table("embed.weight");
  w.norm = r.dense("norm.weight");
  w.head = r.matrix("head");
  if (!c.is_v41()) w.hc_head = r.hc_site("hc_head");
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("layers.{}.", l);
    layer_weights lw;
    lw.attn_norm = r.dense(p + "attn_norm.weight");
    lw.ffn_norm = r.dense(p + "ffn_norm.weight");
    lw.attn = load_attention(r, p);
    if (c.compress_ratio(l) > 0) load_compression(r, c, l, p, lw);
    lw.moe = load_moe(r, c, l, p);
    lw.hc_attn = r.hc_site(p + "hc_attn");
    lw.hc_ffn = r.hc_site(p + "hc_ffn");
    if (c.is_engram_layer(l)) {
      lw.engram.table_codes = r.byte_view(p + "engram.embed.weight");
      lw.engram.table_scales = r.byte_view(p + "engram.embed.scale");
      lw.engram.wkv = r.linear(p + "engram.wkv");
      lw.engram.q_weight = r.dense(p + "engram.q_weight");
      lw.engram.k_weight = r.dense(p + "engram.k_weight");
      lw.engram.qk_weight = tensor::empty(lw.engram.q_weight.shape(), dtype::f32);
      for (std::int64_t i = 0; i < lw.engram.q_weight.numel(); ++i)
        lw.engram.qk_weight.data<float>()[i] =
            lw.engram.q_weight.data<float>()[i] * lw.engram.k_weight.data<float>()[i];
    }
    w.layers.push_back(std::move(lw));
  }
  return w;
}

}  // namespace di
