// The MoE sub-block: sqrt-softplus router (bias-corrected top-k, or V4's token-id hash
// routing on its first layers), routed SwiGLU experts weighted before their down projection
// (so the activation quantization sees the weighted input, as in the reference), and one
// shared expert added unscaled.
#include "model/forward/detail/forward_pass.hpp"

#include <algorithm>
#include <vector>

namespace di::detail {

namespace {

/// Token rows and routing weights of the tokens routed to each expert.
struct expert_batch {
  std::vector<std::int64_t> rows;  // [n] batch rows
  std::vector<float> weights;      // [n] routing weight of each
};

std::vector<expert_batch> group_on_host(const ops::routing& route, int num_experts) {
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

/// Rows [e * out, (e + 1) * out) of a stacked [experts * out, in] matrix: expert e's own.
weight_matrix expert_rows(const weight_matrix& stacked, int e, int experts) {
  const std::int64_t out = stacked.rows() / experts;
  weight_matrix w = stacked;
  w.values = stacked.values.slice(0, e * out, (e + 1) * out);
  if (stacked.scales.defined()) {
    const std::int64_t srows = stacked.scales.size(0) / experts;
    w.scales = stacked.scales.slice(0, e * srows, (e + 1) * srows);
  }
  return w;
}

/// Expert e's projections: its own (host weights, f32 device weights) or its rows of the
/// stacked stored-format matrices.
expert_weights expert_of(const moe_weights& m, int e, int experts) {
  if (!m.experts.empty()) return m.experts[std::size_t(e)];
  const expert_weights& s = m.stacked;
  return {{expert_rows(s.w1.w, e, experts), s.w1.quantized},
          {expert_rows(s.w2.w, e, experts), s.w2.quantized},
          {expert_rows(s.w3.w, e, experts), s.w3.quantized}};
}

/// Whether the experts run as one grouped GEMM per projection (CUDA, stored-format stacked
/// weights, activation quantization on).
bool grouped_experts(const forward_pass& pass, const moe_weights& m) {
  return pass.on_cuda() && m.stacked.w1.w.values.defined() && m.stacked.w1.quantized &&
         pass.act(m.stacked.w1).act_quant_block > 0;
}

/// Tokens up to which the expert GEMM's tile (sized by the largest group) is the same for any
/// group size: sm90_block_gemm runs one 8-token tile per block up to 8 rows per expert.
constexpr std::int64_t small_group_rows = 8;

/// Bound on any expert's rows: no expert gets more rows than there are tokens times the most
/// routes one token gives one expert (moe_weights::route_repeats: 1 -- a token picks distinct
/// experts -- unless a hash-routed layer's table repeats one; a bound below a group's size
/// would leave its rows past the bound uncomputed). Past small_group_rows the kernel's token
/// tile grows with the bound (fewer blocks per SM), so an eager step reads the group sizes back
/// and uses the largest; a captured step (and batches up to small_group_rows) keeps the bound:
/// no read-back.
std::int64_t largest_group(const forward_pass& pass, const ops::expert_groups& g,
                           std::int64_t tokens, int route_repeats) {
  if (pass.in_graph || tokens <= small_group_rows) return tokens * std::max(1, route_repeats);
  const tensor offsets = g.offsets.to(cpu_device);  // [experts + 1]
  const std::int32_t* o = offsets.data<std::int32_t>();
  std::int64_t most = 0;
  for (std::int64_t e = 0; e + 1 < offsets.numel(); ++e)
    most = std::max<std::int64_t>(most, o[e + 1] - o[e]);
  return most;
}

/// Every routed token through its experts in one expert_linear per projection: the routed
/// pairs grouped by expert where the routing lives (ops::group_by_expert, so a decode step
/// can be captured in a CUDA graph), SwiGLU weighted by the routing weight, then added back
/// into their tokens' rows of y.
void grouped_expert_forward(const forward_pass& pass, const moe_weights& m,
                            const ops::routing& route, const tensor& x, tensor& y) {
  const float limit = float(pass.config.swiglu_limit);
  const ops::expert_groups g = ops::group_by_expert(route, pass.config.n_routed_experts);
  const std::int64_t most = largest_group(pass, g, x.size(0), m.route_repeats);
  // Captured steps bound the groups by the token count: twice the mean group keeps the
  // kernel's narrow token tile (eager steps know the largest group and need no hint).
  const std::int64_t experts = pass.config.n_routed_experts;
  const std::int64_t hint =
      pass.in_graph ? std::max<std::int64_t>(1, (2 * g.rows.numel() + experts - 1) / experts) : 0;
  // (rows_all_grouped: xe below is exactly the grouped pairs, so the products leave their
  // outputs unzeroed -- every row is stored)
  const ops::expert_linear_params p{pass.act(m.stacked.w1).act_quant_block, most, hint, true};
  const tensor xe = ops::gather_rows(x, g.rows);  // [tokens * k, dim] grouped by expert
  // w1 and w3 read the same rows with the same activation blocks: quantized once.
  const auto [h1, h3] = ops::expert_linear_pair(xe, g.offsets, m.stacked.w1.w, m.stacked.w3.w, p);
  const ops::expert_linear_params p2{pass.act(m.stacked.w2).act_quant_block, most, hint, true};
  // SwiGLU hands w2 its activation codes (on CUDA computed in the SwiGLU kernel).
  const ops::quantized_rows act =
      ops::swiglu_quantized(h1, h3, limit, g.weights, p2.act_quant_block);
  // Each token's k rows back into it in grouped order: the sums scatter_add_rows(y, g.rows, .)
  // made, gathered through the pairs' slots instead of every row scanning every source.
  const std::int64_t k = route.experts.size(1);
  ops::gather_add_rows(y, g.slots.view({x.size(0), k}),
                       ops::expert_linear(act, g.offsets, m.stacked.w2.w, p2));
}

}  // namespace

bool moe_is_graphable(const forward_pass& pass, int layer) {
  return grouped_experts(pass, pass.weights.layers[std::size_t(layer)].moe);
}

tensor moe_forward(const forward_pass& pass, int layer, const ops::quantized_rows& xq,
                   const std::function<void()>& also_beside) {
  const tensor& x = xq.x;  // [rows, dim]; xq carries the shared experts' activation codes
  const model_config& c = pass.config;
  const moe_weights& m = pass.weights.layers[std::size_t(layer)].moe;
  const float limit = float(c.swiglu_limit);
  auto shared_expert = [&] {
    const auto [s1, s3] = pass.linear_pair(xq, m.shared.w1, m.shared.w3);
    return pass.linear(
        ops::swiglu_quantized(s1, s3, limit, tensor(), pass.act(m.shared.w2).act_quant_block),
        m.shared.w2);  // [rows, dim]
  };
  if (grouped_experts(pass, m)) {
    // The shared expert (and the caller's work) on a side branch beside the routing and the
    // routed experts: at batch 1 each is a chain of latency-bound launches on a few SMs. The
    // sum is formed after the join in the same order as below (the same bits).
    auto [shared, y] = beside(
        pass,
        [&] {
          if (also_beside) also_beside();
          return shared_expert();
        },
        [&] {
          const ops::routing route = route_tokens(pass, layer, x);
          tensor routed = tensor::zeros(x.shape(), dtype::f32, pass.dev());  // [rows, dim]
          grouped_expert_forward(pass, m, route, x, routed);
          return routed;
        });
    ops::add_inplace(y, shared);
    return y;
  }
  if (also_beside) also_beside();
  ops::routing route = route_tokens(pass, layer, x);
  tensor y = tensor::zeros(x.shape(), dtype::f32, pass.dev());  // [rows, dim]
  if (pass.on_cuda()) {  // the per-expert loop needs each group's size on the host
    route.experts = route.experts.to(cpu_device);
    route.weights = route.weights.to(cpu_device);
  }
  const std::vector<expert_batch> groups = group_on_host(route, c.n_routed_experts);
  for (int e = 0; e < c.n_routed_experts; ++e) {
    const expert_batch& g = groups[std::size_t(e)];
    if (g.rows.empty()) continue;
    const std::int64_t n = std::int64_t(g.rows.size());
    const tensor rows = pass.index(g.rows);
    const tensor scale = pass.upload(tensor::view_of(g.weights.data(), {n}, dtype::f32));
    const tensor xe = ops::gather_rows(x, rows);  // [n, dim]
    const expert_weights ew = expert_of(m, e, c.n_routed_experts);
    const auto [h1, h3] = pass.linear_pair(xe, ew.w1, ew.w3);
    tensor act = ops::swiglu(h1, h3, limit, scale);
    ops::scatter_add_rows(y, rows, pass.linear(act, ew.w2));  // [n, dim] into its rows
  }
  ops::add_inplace(y, shared_expert());
  return y;
}

}  // namespace di::detail
