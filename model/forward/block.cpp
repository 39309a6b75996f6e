// One decoder block with manifold hyper-connections. V4.1 collapses each sub-block's input
// with the `pre` computed at the previous mixing site (single pass: attention uses the last
// FFN site's, the FFN this attention site's); V4 uses each site's own. Engram and MoE blocks
// are separate files.
#include "model/forward/detail/forward_pass.hpp"

#include <algorithm>

namespace di::detail {

namespace {

ops::hc_params hc_params_of(const model_config& c) {
  return {c.hc_mult, c.hc_sinkhorn_iters, float(c.hc_eps), float(c.rms_norm_eps)};
}

}  // namespace

tensor block_forward(forward_pass& pass, int layer, const tensor& x, tensor& pre_mix) {
  const model_config& c = pass.config;
  const layer_weights& w = pass.weights.layers[std::size_t(layer)];
  const ops::hc_params hp = hc_params_of(c);
  const float eps = float(c.rms_norm_eps);

  // attention site: x [rows, hc, dim]
  ops::hc_mix attn_mix = ops::hc_mixes(x, w.hc_attn.fn, w.hc_attn.scale, w.hc_attn.base, hp);
  const tensor& attn_pre = c.is_v41() ? pre_mix : attn_mix.pre;               // [rows, hc]
  tensor h = ops::rms_norm(ops::hc_collapse(x, attn_pre), w.attn_norm, eps);  // [rows, dim]
  tensor a = attention_forward(pass, layer, h);                               // [rows, dim]
  tensor y = ops::hc_expand(a, x, attn_mix.post, attn_mix.comb);              // [rows, hc, dim]

  // FFN site
  ops::hc_mix ffn_mix = ops::hc_mixes(y, w.hc_ffn.fn, w.hc_ffn.scale, w.hc_ffn.base, hp);
  const tensor& ffn_pre = c.is_v41() ? attn_mix.pre : ffn_mix.pre;   // [rows, hc]
  h = ops::rms_norm(ops::hc_collapse(y, ffn_pre), w.ffn_norm, eps);  // [rows, dim]
  tensor f = moe_forward(pass, layer, h);                            // [rows, dim]
  pre_mix = ffn_mix.pre;
  return ops::hc_expand(f, y, ffn_mix.post, ffn_mix.comb);  // [rows, hc, dim]
}

tensor moe_forward(const forward_pass& pass, int layer, const tensor& x) {
  const model_config& c = pass.config;
  const moe_weights& m = pass.weights.layers[std::size_t(layer)].moe;
  const std::int64_t rows = x.size(0), dim = x.size(1);
  const int k = c.num_experts_per_tok;
  tensor logits = ops::linear(x, m.gate);  // [rows, experts] fp32 gate, never act-quantized
  tensor fixed;                            // [rows, k] i32 for hash-routed layers
  if (c.is_hash_routed(layer)) {
    fixed = tensor::empty({rows, k}, dtype::i32);
    for (std::int64_t r = 0; r < rows; ++r)
      for (int j = 0; j < k; ++j)
        fixed.data<std::int32_t>()[r * k + j] =
            m.tid2eid.data<std::int32_t>()[pass.tokens.data<std::int64_t>()[r] * k + j];
  }
  ops::router_params rp{k, float(c.gate_temp), float(c.routed_scaling_factor), c.norm_topk_prob,
                        c.is_v41() ? 1e-20f : 0.0f};
  if (c.is_v41() && k == 1) rp.normalize = false;
  ops::routing route = ops::route(logits, m.bias, fixed, rp);

  tensor y = tensor::zeros({rows, dim}, dtype::f32);  // [rows, dim]
  const float limit = float(c.swiglu_limit);
  for (int e = 0; e < c.n_routed_experts; ++e) {
    std::vector<std::int64_t> picked;  // token rows routed to e
    std::vector<float> weight;
    for (std::int64_t r = 0; r < rows; ++r)
      for (int j = 0; j < k; ++j)
        if (route.experts.data<std::int32_t>()[r * k + j] == e) {
          picked.push_back(r);
          weight.push_back(route.weights.data<float>()[r * k + j]);
        }
    if (picked.empty()) continue;
    const std::int64_t n = std::int64_t(picked.size());
    tensor xe = tensor::empty({n, dim}, dtype::f32);  // [n, dim]
    for (std::int64_t i = 0; i < n; ++i)
      std::copy_n(x.data<float>() + picked[std::size_t(i)] * dim, dim, xe.data<float>() + i * dim);
    const expert_weights& ew = m.experts[std::size_t(e)];
    tensor scale = tensor::view_of(weight.data(), {n}, dtype::f32);
    tensor act = ops::swiglu(pass.linear(xe, ew.w1), pass.linear(xe, ew.w3), limit, scale);
    tensor out = pass.linear(act, ew.w2);  // [n, dim]
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t d = 0; d < dim; ++d)
        y.data<float>()[picked[std::size_t(i)] * dim + d] += out.data<float>()[i * dim + d];
  }
  tensor shared = pass.linear(
      ops::swiglu(pass.linear(x, m.shared.w1), pass.linear(x, m.shared.w3), limit, tensor()),
      m.shared.w2);  // [rows, dim]
  for (std::int64_t i = 0; i < rows * dim; ++i) y.data<float>()[i] += shared.data<float>()[i];
  return y;
}

tensor engram_forward(const forward_pass& pass, int layer, const tensor& x,
                      const tensor& hash_ids) {
  const model_config& c = pass.config;
  const engram_weights& e = pass.weights.layers[std::size_t(layer)].engram;
  const std::int64_t rows = x.size(0), hc = c.hc_mult, dim = c.hidden_size;
  const std::int64_t cols = hash_ids.size(1), head_dim = e.table_codes.size(1);
  tensor flat_ids = hash_ids.clone().view({rows * cols});                    // [rows * cols]
  tensor emb = ops::embedding_fp8(e.table_codes, e.table_scales, flat_ids);  // [rows*cols, hd]
  tensor kv = pass.linear(emb.view({rows, cols * head_dim}), e.wkv);         // [rows, (hc+1)*dim]
  tensor key = tensor::empty({rows, hc, dim}, dtype::f32);                   // [rows, hc, dim]
  tensor value = tensor::empty({rows, dim}, dtype::f32);                     // [rows, dim]
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* src = kv.data<float>() + r * (hc + 1) * dim;
    std::copy_n(src, hc * dim, key.data<float>() + r * hc * dim);
    std::copy_n(src + hc * dim, dim, value.data<float>() + r * dim);
  }
  tensor weight = tensor::empty({hc, dim}, dtype::f32);  // [hc, dim] q_weight * k_weight
  for (std::int64_t i = 0; i < hc * dim; ++i)
    weight.data<float>()[i] = e.q_weight.data<float>()[i] * e.k_weight.data<float>()[i];
  return ops::engram_gate(x, key, value, weight, {float(c.rms_norm_eps), 1e-6f});
}

}  // namespace di::detail
