// One decoder block with manifold hyper-connections. V4.1 collapses each sub-block's input
// with the `pre` computed at the previous mixing site (single pass: attention uses the last
// FFN site's, the FFN this attention site's); V4 uses each site's own. The sub-blocks live in
// attention.cpp and moe.cpp.
#include "model/forward/detail/forward_pass.hpp"

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

}  // namespace di::detail
