// Uploading model_weights to a CUDA device: small vectors as they are, matrices in the chosen
// device_weight_format (see device_weights.hpp), the indexer's score scale folded into its
// weights_proj rows, routed experts stacked (stored format) for the grouped expert GEMM.
#include "model/forward/device_weights.hpp"

#include "common/error.hpp"

#include <cmath>

#if defined(DEEPINFER_HAVE_CUDA)
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/stream.hpp"
#endif

namespace di {

device_weight_format parse_device_weight_format(const std::string& name) {
  if (name == "stored") return device_weight_format::stored;
  if (name == "f32") return device_weight_format::f32;
  DI_FAIL("device weight format '{}': expected 'stored' or 'f32'", name);
}

#if defined(DEEPINFER_HAVE_CUDA)

namespace {

class uploader {
 public:
  uploader(device dev, device_weight_format format) : dev_(dev), format_(format) {}

  tensor vec(const tensor& t) const { return t.defined() ? t.to(dev_) : t; }

  /// A large matrix: stored format kept (f32 layout: decoded to fp32).
  weight_matrix big(const weight_matrix& w) const {
    if (!w.values.defined()) return w;
    weight_matrix d = weight_to(w, dev_);
    return format_ == device_weight_format::f32 ? cuda::dequantize_weight(d, dtype::f32)
                                                : cuda::with_lt_scales(streamed(d));
  }
  /// Packed FP4 in the layout the decode GEMM streams fastest (weight_matrix::interleaved).
  static weight_matrix streamed(const weight_matrix& w) {
    return cuda::fp4_interleave_default() ? cuda::with_fp4_layout(w, true) : w;
  }
  /// A small or precision-sensitive matrix: always fp32 (exactly decoded); one stored as bf16
  /// keeps those bytes beside it (weight_matrix::bf16_values: prefill-sized products on the
  /// tensor cores, fp32-grade).
  weight_matrix small(const weight_matrix& w) const {
    if (!w.values.defined()) return w;
    const weight_matrix d = weight_to(w, dev_);
    return cuda::with_bf16_copy(cuda::dequantize_weight(d, dtype::f32), d);
  }
  /// A dense projection; V4.1's FP8 ones also get their decode tiles (the decode GEMM's copy
  /// of the codes in MMA-fragment order, weight_matrix::decode_tiles).
  linear_weight lin(const linear_weight& l) const {
    weight_matrix w = big(l.w);
    if (format_ == device_weight_format::stored) w = cuda::with_decode_tiles(w);
    return {w, l.quantized};
  }

  hc_site_weights hc(const hc_site_weights& h) const {
    return {vec(h.fn), vec(h.base), vec(h.scale)};
  }
  compressor_weights compressor(const compressor_weights& c) const {
    return {vec(c.ape), small(c.wkv), small(c.wgate), vec(c.norm)};
  }
  expert_weights expert(const expert_weights& e) const { return {lin(e.w1), lin(e.w2), lin(e.w3)}; }

  /// weights_proj [heads, dim] decoded to fp32 on the host, times `scale`, uploaded.
  weight_matrix scaled(const weight_matrix& w, float scale) const {
    if (!w.values.defined()) return w;
    tensor host = small(w).values.to(cpu_device);  // [heads, dim] f32
    for (std::int64_t i = 0; i < host.numel(); ++i) host.data<float>()[i] *= scale;
    return weight_matrix(host.to(dev_));
  }

  /// Routed experts: stacked per projection (stored format, for expert_linear) or one fp32
  /// copy each (f32 layout).
  void experts(const moe_weights& src, moe_weights& dst) const {
    if (format_ == device_weight_format::f32) {
      for (const expert_weights& e : src.experts) dst.experts.push_back(expert(e));
      return;
    }
    std::vector<weight_matrix> w1, w2, w3;
    for (const expert_weights& e : src.experts) {
      w1.push_back(e.w1.w);
      w2.push_back(e.w2.w);
      w3.push_back(e.w3.w);
    }
    const expert_weights& first = src.experts.front();
    // Interleaved (where each expert's rows are whole 32-row stripes, the GEMM's groups) one
    // expert at a time while stacking: no second copy of the whole stack during the upload.
    auto stacked = [&](const std::vector<weight_matrix>& parts) {
      return cuda::stack_weights(parts, dev_, cuda::fp4_interleave_default());
    };
    dst.stacked = {{stacked(w1), first.w1.quantized},
                   {stacked(w2), first.w2.quantized},
                   {stacked(w3), first.w3.quantized}};
  }

 private:
  device dev_;
  device_weight_format format_;
};

layer_weights layer_to(const uploader& u, const model_config& c, const layer_weights& l) {
  layer_weights d;
  d.attn_norm = u.vec(l.attn_norm);
  d.ffn_norm = u.vec(l.ffn_norm);
  const attention_weights& a = l.attn;
  d.attn = {u.vec(a.sinks), u.lin(a.wq_a),    u.vec(a.q_norm), u.lin(a.wq_b),
            u.lin(a.wkv),   u.vec(a.kv_norm), u.big(a.wo_a),   u.lin(a.wo_b)};
  d.compressor = u.compressor(l.compressor);
  const indexer_weights& ix = l.indexer;
  const float index_scale =
      1.0f / std::sqrt(float(c.index_head_dim)) * (1.0f / std::sqrt(float(c.index_n_heads)));
  d.indexer = {u.lin(ix.wq_b), u.scaled(ix.weights_proj, index_scale), u.small(ix.wk),
               u.vec(ix.k_norm), u.compressor(ix.compressor)};
  const moe_weights& m = l.moe;
  d.moe.gate = u.small(m.gate);
  d.moe.bias = u.vec(m.bias);
  d.moe.tid2eid = u.vec(m.tid2eid);
  d.moe.route_repeats = m.route_repeats;
  u.experts(m, d.moe);
  d.moe.shared = u.expert(m.shared);
  d.hc_attn = u.hc(l.hc_attn);
  d.hc_ffn = u.hc(l.hc_ffn);
  const engram_weights& e = l.engram;
  d.engram = {u.vec(e.table_codes), u.vec(e.table_scales), u.lin(e.wkv),
              u.vec(e.q_weight),    u.vec(e.k_weight),     u.vec(e.qk_weight)};
  return d;
}

}  // namespace

model_weights weights_to_device(const model_weights& w, const model_config& c, device dev,
                                device_weight_format format) {
  DI_CHECK(dev.kind == device_kind::cuda, "weights_to_device: {} is not a CUDA device",
           to_string(dev));
  DI_CHECK(w.dev.kind == device_kind::cpu, "weights_to_device: the weights are on {} already",
           to_string(w.dev));
  const uploader u(dev, format);
  model_weights d;
  d.embed = u.vec(w.embed);
  d.norm = u.vec(w.norm);
  d.head = u.big(w.head);
  d.hc_head = u.hc(w.hc_head);
  for (const layer_weights& l : w.layers) d.layers.push_back(layer_to(u, c, l));
  d.dev = dev;
  d.index_scale_folded = true;
  cuda::synchronize();
  return d;
}

#else

model_weights weights_to_device(const model_weights&, const model_config&, device dev,
                                device_weight_format) {
  DI_FAIL("weights_to_device: {} needs a build with the CUDA backend", to_string(dev));
}

#endif

}  // namespace di
