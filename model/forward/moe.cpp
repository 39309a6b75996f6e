// The MoE sub-block: sqrt-softplus router (bias-corrected top-k, or V4's token-id hash
// routing on its first layers), routed SwiGLU experts weighted before their down projection
// (so the activation quantization sees the weighted input, as in the reference), and one
// shared expert added unscaled.
#include "model/forward/detail/forward_pass.hpp"

#include <algorithm>

namespace di::detail {

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

}  // namespace di::detail
