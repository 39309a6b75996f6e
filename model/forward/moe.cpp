// The MoE sub-block: sqrt-softplus router (bias-corrected top-k, or V4's token-id hash
// routing on its first layers), routed SwiGLU experts weighted before their down projection
// (so the activation quantization sees the weighted input, as in the reference), and one
// shared expert added unscaled.
#include "model/forward/detail/forward_pass.hpp"

#include <vector>

namespace di::detail {

namespace {

/// Token rows and routing weights of the tokens routed to each expert.
struct expert_batch {
  std::vector<std::int64_t> rows;  // [n] batch rows
  std::vector<float> weights;      // [n] routing weight of each
};

std::vector<expert_batch> group_by_expert(const ops::routing& route, int num_experts) {
  std::vector<expert_batch> out(static_cast<std::size_t>(num_experts));
  const std::int64_t rows = route.experts.size(0), k = route.experts.size(1);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int32_t e = route.experts.data<std::int32_t>()[r * k + j];
      out[std::size_t(e)].rows.push_back(r);
      out[std::size_t(e)].weights.push_back(route.weights.data<float>()[r * k + j]);
    }
  }
  return out;
}

ops::routing route_tokens(const forward_pass& pass, int layer, const tensor& x) {
  const model_config& c = pass.config;
  const moe_weights& m = pass.weights.layers[std::size_t(layer)].moe;
  const int k = c.num_experts_per_tok;
  tensor logits = ops::linear(x, m.gate);  // [rows, experts] fp32 gate, never act-quantized
  tensor fixed;                            // [rows, k] i32: V4 hash routing by token id
  if (c.is_hash_routed(layer)) fixed = ops::gather_rows(m.tid2eid, pass.tokens);
  ops::router_params rp{k, float(c.gate_temp), float(c.routed_scaling_factor), c.norm_topk_prob,
                        c.is_v41() ? 1e-20f : 0.0f};
  if (c.is_v41() && k == 1) rp.normalize = false;
  return ops::route(logits, m.bias, fixed, rp);
}

}  // namespace

tensor moe_forward(const forward_pass& pass, int layer, const tensor& x) {
  const model_config& c = pass.config;
  const moe_weights& m = pass.weights.layers[std::size_t(layer)].moe;
  const float limit = float(c.swiglu_limit);
  const std::vector<expert_batch> groups =
      group_by_expert(route_tokens(pass, layer, x), c.n_routed_experts);
  tensor y = tensor::zeros(x.shape(), dtype::f32);  // [rows, dim]
  for (int e = 0; e < c.n_routed_experts; ++e) {
    const expert_batch& g = groups[std::size_t(e)];
    if (g.rows.empty()) continue;
    const std::int64_t n = std::int64_t(g.rows.size());
    const tensor rows = tensor::view_of(g.rows.data(), {n}, dtype::i64);
    const tensor scale = tensor::view_of(g.weights.data(), {n}, dtype::f32);
    const tensor xe = ops::gather_rows(x, rows);  // [n, dim]
    const expert_weights& ew = m.experts[std::size_t(e)];
    tensor act = ops::swiglu(pass.linear(xe, ew.w1), pass.linear(xe, ew.w3), limit, scale);
    ops::scatter_add_rows(y, rows, pass.linear(act, ew.w2));  // [n, dim] into its rows
  }
  tensor shared = pass.linear(
      ops::swiglu(pass.linear(x, m.shared.w1), pass.linear(x, m.shared.w3), limit, tensor()),
      m.shared.w2);  // [rows, dim]
  ops::add_inplace(y, shared);
  return y;
}

}  // namespace di::detail
