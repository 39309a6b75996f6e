// Tensor-level entry points of the CUDA model kernels (cuda_model_twins.hpp): checks on the
// host, outputs on the operands' device, launches on the current stream.
#include "kernels/cuda/cuda_model_twins.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/kernel_attributes.hpp"
#include "kernels/cuda/stream.hpp"

#include <algorithm>

namespace di::cuda {

namespace {

void same_device(const tensor& a, const tensor& b, const char* what) {
  DI_CHECK(!b.defined() || a.dev() == b.dev(), "{}: operands on {} and {}", what,
           to_string(a.dev()), to_string(b.dev()));
}

/// Device scratch of `bytes` (undefined when 0).
tensor scratch(std::size_t bytes, device dev) {
  if (bytes == 0) return {};
  return tensor::empty({std::int64_t((bytes + 15) / 16) * 16}, dtype::u8, dev);
}

/// Gives p a device scratch of `bytes` for its launch (stream-ordered: it may be released as
/// soon as the launch is queued).
template <typename Params>
tensor attach_workspace(Params& p, std::size_t bytes, device dev) {
  tensor work = scratch(bytes, dev);
  p.workspace = work.defined() ? work.raw() : nullptr;
  p.workspace_bytes = work.defined() ? work.nbytes() : 0;
  return work;
}

void run_hc_mixes(hc_mixes_params& p, device dev) {
  const tensor work = attach_workspace(p, hc_mixes_workspace_bytes(p), dev);
  launch_hc_mixes(p, current_stream());
}

void run_attention(attention_params& p, device dev) {
  const tensor work = attach_workspace(p, attention_workspace_bytes(p), dev);
  launch_attention(p, current_stream());
}

}  // namespace

tensor sparse_attention(const tensor& q, const tensor& kv, const tensor& sinks,
                        const tensor& indices, const ops::sparse_attention_params& params) {
  check_cuda_tensor(q, dtype::f32, 3, "attention q");
  check_cuda_tensor(kv, dtype::f32, 2, "attention kv");
  check_cuda_tensor(indices, dtype::i32, 2, "attention indices");
  const std::int64_t tokens = q.size(0), heads = q.size(1), dim = q.size(2);
  DI_CHECK(kv.size(1) == dim, "attention: q head dim {} vs kv rows of {}", dim, kv.size(1));
  DI_CHECK(indices.size(0) == tokens, "attention: {} index rows for {} tokens", indices.size(0),
           tokens);
  check_tensor(sinks, dtype::f32, {heads}, "attention sinks");
  same_device(q, kv, "attention");
  same_device(q, indices, "attention");
  same_device(q, sinks, "attention");
  tensor out = tensor::empty({tokens, heads, dim}, dtype::f32, q.dev());  // [tokens, heads, dim]
  attention_params p;
  p.q = q.data<float>();
  p.out = out.data<float>();
  p.sinks = sinks.data<float>();
  p.tokens = int(tokens);
  p.heads = int(heads);
  p.dim = int(dim);
  p.softmax_scale = params.softmax_scale;
  p.window = {kv.raw(), kv.size(0), false, {}};
  p.window_idx = indices.data<std::int32_t>();
  p.window_k = int(indices.size(1));
  run_attention(p, q.dev());
  return out;
}

tensor attention_packed(const tensor& q, const tensor& sinks, const tensor& window,
                        const cache_row_format& wf, const tensor& window_idx, const tensor& extra,
                        const cache_row_format& ef, const tensor& extra_idx, float softmax_scale) {
  check_cuda_tensor(q, dtype::f32, 3, "attention q");
  const std::int64_t tokens = q.size(0), heads = q.size(1), dim = q.size(2);
  check_tensor(sinks, dtype::f32, {heads}, "attention sinks");
  check_cuda_tensor(window, dtype::u8, 2, "attention window rows");
  DI_CHECK(window.size(1) == std::int64_t(wf.row_bytes()), "attention: window rows of {} bytes, "
           "format {}", window.size(1), wf.row_bytes());
  check_cuda_tensor(window_idx, dtype::i32, 2, "attention window indices");
  DI_CHECK(window_idx.size(0) == tokens, "attention: {} window index rows for {} tokens",
           window_idx.size(0), tokens);
  same_device(q, window, "attention");
  same_device(q, window_idx, "attention");
  same_device(q, sinks, "attention");
  attention_params p;
  if (extra.defined()) {
    check_cuda_tensor(extra, dtype::u8, 2, "attention extra rows");
    DI_CHECK(extra.size(1) == std::int64_t(ef.row_bytes()), "attention: extra rows of {} bytes, "
             "format {}", extra.size(1), ef.row_bytes());
    check_cuda_tensor(extra_idx, dtype::i32, 2, "attention extra indices");
    DI_CHECK(extra_idx.size(0) == tokens, "attention: {} extra index rows for {} tokens",
             extra_idx.size(0), tokens);
    same_device(q, extra, "attention");
    same_device(q, extra_idx, "attention");
    p.extra = {extra.raw(), extra.size(0), true, ef};
    p.extra_idx = extra_idx.data<std::int32_t>();
    p.extra_k = int(extra_idx.size(1));
  }
  tensor out = tensor::empty({tokens, heads, dim}, dtype::f32, q.dev());  // [tokens, heads, dim]
  p.q = q.data<float>();
  p.out = out.data<float>();
  p.sinks = sinks.data<float>();
  p.tokens = int(tokens);
  p.heads = int(heads);
  p.dim = int(dim);
  p.softmax_scale = softmax_scale;
  p.window = {window.raw(), window.size(0), true, wf};
  p.window_idx = window_idx.data<std::int32_t>();
  p.window_k = int(window_idx.size(1));
  run_attention(p, q.dev());
  return out;
}

tensor index_scores(const tensor& q, const tensor& keys, const tensor& weights) {
  check_cuda_tensor(q, dtype::f32, 3, "index_scores q");
  check_cuda_tensor(keys, dtype::f32, 2, "index_scores keys");
  const std::int64_t tokens = q.size(0), heads = q.size(1), dim = q.size(2);
  const std::int64_t entries = keys.size(0);
  DI_CHECK(keys.size(1) == dim, "index_scores: q dim {} vs keys of {}", dim, keys.size(1));
  check_tensor(weights, dtype::f32, {tokens, heads}, "index_scores weights");
  same_device(q, keys, "index_scores");
  same_device(q, weights, "index_scores");
  tensor out = tensor::empty({tokens, entries}, dtype::f32, q.dev());  // [tokens, entries]
  index_scores_params p;
  p.q = q.data<float>();
  p.weights = weights.data<float>();
  p.keys = {keys.raw(), entries, false, {}};
  p.scores = out.data<float>();
  p.tokens = int(tokens);
  p.heads = int(heads);
  p.dim = int(dim);
  launch_index_scores(p, current_stream());
  return out;
}

tensor index_scores_packed(const tensor& q, const tensor& keys, const cache_row_format& fmt,
                           const tensor& weights) {
  check_cuda_tensor(q, dtype::f32, 3, "index_scores q");
  check_cuda_tensor(keys, dtype::u8, 2, "index_scores packed keys");
  const std::int64_t tokens = q.size(0), heads = q.size(1), dim = q.size(2);
  const std::int64_t entries = keys.size(0);
  DI_CHECK(keys.size(1) == std::int64_t(fmt.row_bytes()) && fmt.dim() == dim,
           "index_scores: key rows of {} bytes / {} values, format {} / {}", keys.size(1), dim,
           fmt.row_bytes(), fmt.dim());
  check_tensor(weights, dtype::f32, {tokens, heads}, "index_scores weights");
  same_device(q, keys, "index_scores");
  same_device(q, weights, "index_scores");
  tensor out = tensor::empty({tokens, entries}, dtype::f32, q.dev());  // [tokens, entries]
  index_scores_params p;
  p.q = q.data<float>();
  p.weights = weights.data<float>();
  p.keys = {keys.raw(), entries, true, fmt};
  p.scores = out.data<float>();
  p.tokens = int(tokens);
  p.heads = int(heads);
  p.dim = int(dim);
  launch_index_scores(p, current_stream());
  return out;
}

namespace {

/// launch_topk over checked operands; `mapped` (with `map`) receives the picks' mapped rows.
tensor run_topk(const tensor& scores, const tensor& visible, const tensor& allowed, int k,
                bool index_order, const tensor& map = {}, tensor* mapped = nullptr) {
  check_cuda_tensor(scores, dtype::f32, 2, "topk scores");
  const std::int64_t rows = scores.size(0), n = scores.size(1);
  if (visible.defined()) {
    check_tensor(visible, dtype::i64, {rows}, "masked_topk visible counts");
    same_device(scores, visible, "masked_topk");
  }
  if (allowed.defined()) {
    check_tensor(allowed, dtype::u8, {rows, n}, "masked_topk mask");
    same_device(scores, allowed, "masked_topk");
  }
  DI_CHECK(k >= 0 && k <= n, "topk: k = {} of {} values", k, n);
  tensor out = tensor::empty({rows, k}, dtype::i32, scores.dev());  // [rows, k]
  topk_params p;
  p.scores = scores.data<float>();
  p.visible = visible.defined() ? visible.data<std::int64_t>() : nullptr;
  p.allowed = allowed.defined() ? allowed.data<std::uint8_t>() : nullptr;
  p.out = out.data<std::int32_t>();
  p.rows = rows;
  p.n = n;
  p.k = k;
  p.index_order = index_order;
  if (mapped != nullptr) {
    check_tensor(map, dtype::i32, {rows, n}, "masked_topk map");
    same_device(scores, map, "masked_topk");
    *mapped = tensor::empty({rows, k}, dtype::i32, scores.dev());  // [rows, k]
    p.map = map.data<std::int32_t>();
    p.mapped = mapped->data<std::int32_t>();
  }
  launch_topk(p, current_stream());
  return out;
}

}  // namespace

namespace {
/// DEEPINFER_TOPK_IN_ORDER=0: masked_topk sorts its picks by score again and maps them by a
/// launch of its own, as before picks came in entry order -- for timing comparisons only (the
/// CPU twin returns entry order, so the picks then differ from it in order).
const bool g_topk_in_order = detail::env_switch("DEEPINFER_TOPK_IN_ORDER", true);
}  // namespace

tensor masked_topk(const tensor& scores, const tensor& visible, const tensor& allowed, int k) {
  return run_topk(scores, visible, allowed, k, g_topk_in_order);
}

std::pair<tensor, tensor> masked_topk_mapped(const tensor& scores, const tensor& visible,
                                             const tensor& allowed, int k, const tensor& map) {
  tensor mapped;
  if (!g_topk_in_order) {
    tensor picks = run_topk(scores, visible, allowed, k, false);
    check_tensor(map, dtype::i32, {scores.size(0), scores.size(1)}, "masked_topk map");
    mapped = tensor::empty(picks.shape(), dtype::i32, scores.dev());  // [rows, k]
    launch_map_rows({.idx = picks.data<std::int32_t>(),
                     .map = map.data<std::int32_t>(),
                     .out = mapped.data<std::int32_t>(),
                     .batch = picks.size(0),
                     .k = picks.size(1),
                     .n = map.size(1)},
                    current_stream());
    return {picks, mapped};
  }
  tensor picks = run_topk(scores, visible, allowed, k, true, map, &mapped);
  return {picks, mapped};
}

tensor topk(const tensor& scores, int k) {
  return run_topk(scores, tensor(), tensor(), k, false);
}

tensor candidate_blocks(const tensor& scores, const tensor& visible, int topk_blocks,
                        int block_size) {
  check_cuda_tensor(scores, dtype::f32, 2, "candidate_blocks scores");
  const std::int64_t tokens = scores.size(0), entries = scores.size(1);
  check_tensor(visible, dtype::i64, {tokens}, "candidate_blocks visible counts");
  same_device(scores, visible, "candidate_blocks");
  tensor keep = tensor::zeros({tokens, entries}, dtype::u8, scores.dev());  // [tokens, entries]
  const tensor work =
      scratch(candidate_blocks_work_bytes(tokens, entries, block_size, topk_blocks), scores.dev());
  launch_candidate_blocks({scores.data<float>(), visible.data<std::int64_t>(),
                           keep.data<std::uint8_t>(), tokens, entries, topk_blocks, block_size,
                           work.defined() ? work.raw() : nullptr},
                          current_stream());
  return keep;
}

ops::routing route(const tensor& logits, const tensor& bias, const tensor& fixed,
                   const ops::router_params& rp) {
  check_cuda_tensor(logits, dtype::f32, 2, "router logits");
  const std::int64_t tokens = logits.size(0), experts = logits.size(1);
  const int k = rp.top_k;
  DI_CHECK(k > 0 && k <= experts, "router: top {} of {} experts", k, experts);
  if (bias.defined()) check_tensor(bias, dtype::f32, {experts}, "router bias");
  if (fixed.defined()) check_tensor(fixed, dtype::i32, {tokens, k}, "router fixed experts");
  same_device(logits, bias, "route");
  same_device(logits, fixed, "route");
  ops::routing out{tensor::empty({tokens, k}, dtype::f32, logits.dev()),
                   tensor::empty({tokens, k}, dtype::i32, logits.dev())};
  route_params p;
  p.logits = logits.data<float>();
  p.bias = bias.defined() ? bias.data<float>() : nullptr;
  p.fixed = fixed.defined() ? fixed.data<std::int32_t>() : nullptr;
  p.weights = out.weights.data<float>();
  p.experts_out = out.experts.data<std::int32_t>();
  p.tokens = tokens;
  p.experts = int(experts);
  p.top_k = k;
  p.gate_temp = rp.gate_temp;
  p.route_scale = rp.route_scale;
  p.normalize = rp.normalize;
  p.normalize_eps = rp.normalize_eps;
  launch_route(p, current_stream());
  return out;
}

ops::expert_groups group_by_expert(const ops::routing& route, int experts) {
  check_cuda_tensor(route.experts, dtype::i32, 2, "group_by_expert experts");
  check_tensor(route.weights, dtype::f32, route.experts.shape(), "group_by_expert weights");
  same_device(route.experts, route.weights, "group_by_expert");
  DI_CHECK(experts > 0, "group_by_expert: {} experts", experts);
  const std::int64_t n = route.experts.numel();
  const device dev = route.experts.dev();
  ops::expert_groups g{tensor::empty({n}, dtype::i64, dev), tensor::empty({n}, dtype::f32, dev),
                       tensor::empty({std::int64_t(experts) + 1}, dtype::i32, dev),
                       tensor::empty({n}, dtype::i32, dev)};
  group_experts_params p;
  p.experts_in = route.experts.data<std::int32_t>();
  p.weights_in = route.weights.data<float>();
  p.rows = g.rows.data<std::int64_t>();
  p.weights = g.weights.data<float>();
  p.offsets = g.offsets.data<std::int32_t>();
  p.slots = g.slots.data<std::int32_t>();
  p.pairs = n;
  p.k = int(std::max<std::int64_t>(1, route.experts.size(1)));
  p.experts = experts;
  const tensor work = attach_workspace(p, group_experts_workspace_bytes(p), dev);
  launch_group_experts(p, current_stream());
  return g;
}

tensor swiglu(const tensor& gate, const tensor& up, float limit, const tensor& row_scale) {
  check_cuda_tensor(gate, dtype::f32, 2, "swiglu gate");
  check_tensor(up, dtype::f32, gate.shape(), "swiglu up");
  const std::int64_t rows = gate.size(0), inter = gate.size(1);
  if (row_scale.defined()) check_tensor(row_scale, dtype::f32, {rows}, "swiglu row scale");
  same_device(gate, up, "swiglu");
  same_device(gate, row_scale, "swiglu");
  tensor out = tensor::empty({rows, inter}, dtype::f32, gate.dev());  // [rows, inter]
  launch_swiglu({gate.data<float>(), up.data<float>(),
                 row_scale.defined() ? row_scale.data<float>() : nullptr, out.data<float>(), rows,
                 inter, limit},
                current_stream());
  return out;
}

namespace {

/// Points a fused kernel's FP8 outputs (codes, scales, their block) at q's.
template <typename Params>
void point_codes(Params& p, ops::quantized_rows& q) {
  p.codes = q.codes.data<std::uint8_t>();
  p.scales = q.scales.data<float>();
  p.quant_block = q.block;
  p.scales_mn = q.scales_mn.defined() ? q.scales_mn.data<float>() : nullptr;
}

}  // namespace

ops::quantized_rows swiglu_quantized(const tensor& gate, const tensor& up, float limit,
                                     const tensor& row_scale, int block) {
  const std::int64_t inter = gate.rank() == 2 ? gate.size(1) : 0;
  if (!fuses_act_quant(block, inter))
    return {swiglu(gate, up, limit, row_scale), {}, {}, block};  // the consumer quantizes
  check_cuda_tensor(gate, dtype::f32, 2, "swiglu gate");
  check_tensor(up, dtype::f32, gate.shape(), "swiglu up");
  const std::int64_t rows = gate.size(0);
  if (row_scale.defined()) check_tensor(row_scale, dtype::f32, {rows}, "swiglu row scale");
  same_device(gate, up, "swiglu");
  same_device(gate, row_scale, "swiglu");
  ops::quantized_rows q = quantized_rows_for(rows, inter, block, gate.dev());
  swiglu_params p{gate.data<float>(),
                  up.data<float>(),
                  row_scale.defined() ? row_scale.data<float>() : nullptr,
                  q.x.data<float>(),
                  rows,
                  inter,
                  limit};
  point_codes(p, q);
  launch_swiglu(p, current_stream());
  return q;
}

tensor compress_tokens(const tensor& kv, const tensor& score, std::int64_t start, tensor& state_kv,
                       tensor& state_score, const ops::compress_params& cp) {
  check_cuda_tensor(kv, dtype::f32, 2, "compressor kv");
  check_tensor(score, dtype::f32, kv.shape(), "compressor score");
  const int r = cp.ratio, coff = cp.overlap ? 2 : 1;
  const std::int64_t n = kv.size(0), width = kv.size(1), dim = width / coff;
  DI_CHECK(r > 0 && width % coff == 0 && start >= 0, "compressor: ratio {}, rows of {}", r, width);
  check_tensor(state_kv, dtype::f32, {coff * r, width}, "compressor state kv");
  check_tensor(state_score, dtype::f32, {coff * r, width}, "compressor state score");
  same_device(kv, score, "compress_tokens");
  same_device(kv, state_kv, "compress_tokens");
  same_device(kv, state_score, "compress_tokens");
  const std::int64_t completed = (start + n) / r - start / r;
  tensor out = tensor::empty({completed, dim}, dtype::f32, kv.dev());  // [completed, dim]
  compress_params p;
  p.kv = kv.data<float>();
  p.score = score.data<float>();
  p.state_kv = state_kv.data<float>();
  p.state_score = state_score.data<float>();
  p.out = completed > 0 ? out.data<float>() : nullptr;
  p.n = n;
  p.start = start;
  p.width = int(width);
  p.ratio = r;
  p.overlap = cp.overlap;
  launch_compress_tokens(p, current_stream());
  return out;
}

tensor engram_gate(const tensor& h, const tensor& key, const tensor& value, const tensor& weight,
                   const ops::engram_params& ep) {
  check_cuda_tensor(h, dtype::f32, 3, "engram streams");
  const std::int64_t tokens = h.size(0), hc = h.size(1), dim = h.size(2);
  check_tensor(key, dtype::f32, h.shape(), "engram key");
  check_tensor(value, dtype::f32, {tokens, dim}, "engram value");
  check_tensor(weight, dtype::f32, {hc, dim}, "engram weight");
  same_device(h, key, "engram_gate");
  same_device(h, value, "engram_gate");
  same_device(h, weight, "engram_gate");
  tensor out = tensor::empty(h.shape(), dtype::f32, h.dev());  // [tokens, hc, dim]
  launch_engram_gate({h.data<float>(), key.data<float>(), value.data<float>(),
                      weight.data<float>(), out.data<float>(), tokens, dim, int(hc), ep.eps,
                      ep.clamp},
                     current_stream());
  return out;
}

tensor engram_gate_kv(const tensor& h, const tensor& kv, const tensor& weight,
                      const ops::engram_params& ep) {
  check_cuda_tensor(h, dtype::f32, 3, "engram streams");
  const std::int64_t tokens = h.size(0), hc = h.size(1), dim = h.size(2);
  check_tensor(kv, dtype::f32, {tokens, (hc + 1) * dim}, "engram keys and value");
  check_tensor(weight, dtype::f32, {hc, dim}, "engram weight");
  same_device(h, kv, "engram_gate_kv");
  same_device(h, weight, "engram_gate_kv");
  tensor out = tensor::empty(h.shape(), dtype::f32, h.dev());  // [tokens, hc, dim]
  engram_gate_params p{h.data<float>(), kv.data<float>(),   kv.data<float>() + hc * dim,
                       weight.data<float>(), out.data<float>(), tokens, dim, int(hc), ep.eps,
                       ep.clamp};
  p.key_stride = p.value_stride = (hc + 1) * dim;
  launch_engram_gate(p, current_stream());
  return out;
}

namespace {

hc_mixes_params mix_params(const tensor& x, const tensor& fn, const tensor& scale,
                           const tensor& base, const ops::hc_params& hp, std::int64_t num_mixes,
                           std::int64_t num_scales) {
  check_cuda_tensor(x, dtype::f32, 3, "hc streams");
  DI_CHECK(x.size(1) == hp.hc_mult, "hc streams: {} streams, config says {}", x.size(1), hp.hc_mult);
  check_tensor(fn, dtype::f32, {num_mixes, hp.hc_mult * x.size(2)}, "hc fn");
  check_tensor(scale, dtype::f32, {num_scales}, "hc scale");
  check_tensor(base, dtype::f32, {num_mixes}, "hc base");
  same_device(x, fn, "hc_mixes");
  same_device(x, scale, "hc_mixes");
  same_device(x, base, "hc_mixes");
  hc_mixes_params p;
  p.x = x.data<float>();
  p.fn = fn.data<float>();
  p.scale = scale.data<float>();
  p.base = base.data<float>();
  p.tokens = x.size(0);
  p.dim = x.size(2);
  p.hc = hp.hc_mult;
  p.sinkhorn_iters = hp.sinkhorn_iters;
  p.hc_eps = hp.hc_eps;
  p.norm_eps = hp.norm_eps;
  return p;
}

}  // namespace

ops::hc_mix hc_mixes(const tensor& x, const tensor& fn, const tensor& scale, const tensor& base,
                     const ops::hc_params& hp) {
  const int hc = hp.hc_mult;
  hc_mixes_params p = mix_params(x, fn, scale, base, hp, (2 + hc) * hc, 3);
  const std::int64_t tokens = x.size(0);
  ops::hc_mix out{tensor::empty({tokens, hc}, dtype::f32, x.dev()),
                  tensor::empty({tokens, hc}, dtype::f32, x.dev()),
                  tensor::empty({tokens, hc, hc}, dtype::f32, x.dev())};
  p.pre = out.pre.data<float>();
  p.post = out.post.data<float>();
  p.comb = out.comb.data<float>();
  run_hc_mixes(p, x.dev());
  return out;
}

tensor hc_head_pre(const tensor& x, const tensor& fn, const tensor& scale, const tensor& base,
                   const ops::hc_params& hp) {
  hc_mixes_params p = mix_params(x, fn, scale, base, hp, hp.hc_mult, 1);
  tensor pre = tensor::empty({x.size(0), hp.hc_mult}, dtype::f32, x.dev());  // [tokens, hc]
  p.pre = pre.data<float>();
  p.head_pre = true;
  run_hc_mixes(p, x.dev());
  return pre;
}

tensor hc_collapse(const tensor& x, const tensor& pre) {
  check_cuda_tensor(x, dtype::f32, 3, "hc_collapse streams");
  const std::int64_t tokens = x.size(0), hc = x.size(1), dim = x.size(2);
  check_tensor(pre, dtype::f32, {tokens, hc}, "hc_collapse pre");
  same_device(x, pre, "hc_collapse");
  tensor out = tensor::empty({tokens, dim}, dtype::f32, x.dev());  // [tokens, dim]
  launch_hc_collapse({x.data<float>(), pre.data<float>(), out.data<float>(), tokens, dim, int(hc)},
                     current_stream());
  return out;
}

namespace {

/// Whether hc_collapse_norm runs as one kernel for `hc` streams of `dim` (EXPERIMENT switch:
/// DEEPINFER_HC_COLLAPSE_NORM=0 runs hc_collapse and rms_norm).
bool fuses_hc_collapse_norm(std::int64_t hc, std::int64_t dim) {
  static const bool fused = detail::env_switch("DEEPINFER_HC_COLLAPSE_NORM", true);
  return fused && dim <= hc_collapse_norm_max_dim && hc <= hc_collapse_norm_max_streams;
}

/// The fused collapse + norm of x's streams into q.x (and q's codes and scales when it has
/// them), after the operand checks.
void run_hc_collapse_norm(const tensor& x, const tensor& pre, const tensor& weight, float eps,
                          ops::quantized_rows& q) {
  const std::int64_t tokens = x.size(0), hc = x.size(1), dim = x.size(2);
  check_tensor(pre, dtype::f32, {tokens, hc}, "hc_collapse_norm pre");
  same_device(x, pre, "hc_collapse_norm");
  if (weight.defined()) {
    check_tensor(weight, dtype::f32, {dim}, "hc_collapse_norm weight");
    same_device(x, weight, "hc_collapse_norm");
  }
  hc_collapse_norm_params p{x.data<float>(),
                            pre.data<float>(),
                            weight.defined() ? weight.data<float>() : nullptr,
                            q.x.data<float>(),
                            tokens,
                            dim,
                            int(hc),
                            eps};
  if (q.codes.defined()) point_codes(p, q);
  launch_hc_collapse_norm(p, current_stream());
}

}  // namespace

tensor hc_collapse_norm(const tensor& x, const tensor& pre, const tensor& weight, float eps) {
  check_cuda_tensor(x, dtype::f32, 3, "hc_collapse_norm streams");
  const std::int64_t tokens = x.size(0), hc = x.size(1), dim = x.size(2);
  if (!fuses_hc_collapse_norm(hc, dim)) return rms_norm(hc_collapse(x, pre), weight, eps);
  ops::quantized_rows q{tensor::empty({tokens, dim}, dtype::f32, x.dev()), {}, {}, 0};
  run_hc_collapse_norm(x, pre, weight, eps, q);
  return q.x;
}

ops::quantized_rows hc_collapse_norm_quantized(const tensor& x, const tensor& pre,
                                               const tensor& weight, float eps, int block) {
  check_cuda_tensor(x, dtype::f32, 3, "hc_collapse_norm streams");
  const std::int64_t tokens = x.size(0), hc = x.size(1), dim = x.size(2);
  if (!fuses_hc_collapse_norm(hc, dim) || !fuses_act_quant(block, dim))
    return {hc_collapse_norm(x, pre, weight, eps), {}, {}, block};  // the consumer quantizes
  ops::quantized_rows q = quantized_rows_for(tokens, dim, block, x.dev());
  run_hc_collapse_norm(x, pre, weight, eps, q);
  return q;
}

tensor hc_expand(const tensor& y, const tensor& residual, const tensor& post, const tensor& comb) {
  check_cuda_tensor(residual, dtype::f32, 3, "hc_expand residual");
  const std::int64_t tokens = residual.size(0), hc = residual.size(1), dim = residual.size(2);
  check_tensor(y, dtype::f32, {tokens, dim}, "hc_expand sub-block output");
  check_tensor(post, dtype::f32, {tokens, hc}, "hc_expand post");
  check_tensor(comb, dtype::f32, {tokens, hc, hc}, "hc_expand comb");
  same_device(residual, y, "hc_expand");
  same_device(residual, post, "hc_expand");
  same_device(residual, comb, "hc_expand");
  tensor out = tensor::empty({tokens, hc, dim}, dtype::f32, y.dev());  // [tokens, hc, dim]
  launch_hc_expand({y.data<float>(), residual.data<float>(), post.data<float>(),
                    comb.data<float>(), out.data<float>(), tokens, dim, int(hc)},
                   current_stream());
  return out;
}

tensor sample_tokens(const tensor& logits, std::span<const sample_row> settings,
                     tensor* logsumexp) {
  check_cuda_tensor(logits, dtype::f32, 2, "sample logits");
  const std::int64_t rows = logits.size(0), vocab = logits.size(1);
  DI_CHECK(std::int64_t(settings.size()) == rows, "sample: {} settings for {} rows",
           settings.size(), rows);
  tensor tokens = tensor::empty({rows}, dtype::i32, logits.dev());  // [rows]
  if (rows == 0) return tokens;
  const std::int64_t cfg_bytes = rows * std::int64_t(sizeof(sample_row));
  tensor cfg = tensor::empty({cfg_bytes}, dtype::u8, logits.dev());
  cfg.copy_from(tensor::view_of(settings.data(), {cfg_bytes}, dtype::u8));
  sample_params p;
  p.logits = logits.data<float>();
  p.rows_cfg = static_cast<const sample_row*>(cfg.raw());
  p.tokens = tokens.data<std::int32_t>();
  p.rows = rows;
  p.vocab = vocab;
  if (logsumexp) {
    *logsumexp = tensor::empty({rows}, dtype::f32, logits.dev());  // [rows]
    p.logsumexp = logsumexp->data<float>();
  }
  launch_sample(p, current_stream());
  return tokens;
}

void encode_cache_rows(const tensor& x, const cache_row_format& fmt, tensor& out) {
  check_cuda_tensor(x, dtype::f32, 2, "encode_cache_rows input");
  DI_CHECK(x.size(1) == fmt.dim(), "encode_cache_rows: rows of {}, format holds {}", x.size(1),
           fmt.dim());
  check_tensor(out, dtype::u8, {x.size(0), std::int64_t(fmt.row_bytes())},
               "encode_cache_rows output");
  same_device(x, out, "encode_cache_rows");
  launch_encode_cache_rows({x.data<float>(), out.data<std::uint8_t>(), nullptr, x.size(0), fmt},
                           current_stream());
}

void encode_cache_rows_at(const tensor& x, const cache_row_format& fmt, tensor& pool,
                          const tensor& dst_rows) {
  check_cuda_tensor(x, dtype::f32, 2, "encode_cache_rows input");
  DI_CHECK(x.size(1) == fmt.dim(), "encode_cache_rows: rows of {}, format holds {}", x.size(1),
           fmt.dim());
  check_cuda_tensor(pool, dtype::u8, 2, "encode_cache_rows pool");
  DI_CHECK(pool.size(1) == std::int64_t(fmt.row_bytes()), "encode_cache_rows: pool rows of {} "
           "bytes, format {}", pool.size(1), fmt.row_bytes());
  check_tensor(dst_rows, dtype::i64, {x.size(0)}, "encode_cache_rows destination rows");
  same_device(x, pool, "encode_cache_rows");
  same_device(x, dst_rows, "encode_cache_rows");
  launch_encode_cache_rows({x.data<float>(), pool.data<std::uint8_t>(),
                            dst_rows.data<std::int64_t>(), x.size(0), fmt, pool.size(0)},
                           current_stream());
}

void decode_cache_rows(const tensor& rows, const cache_row_format& fmt, tensor& out) {
  check_cuda_tensor(rows, dtype::u8, 2, "decode_cache_rows input");
  check_tensor(rows, dtype::u8, {rows.size(0), std::int64_t(fmt.row_bytes())},
               "decode_cache_rows input");
  check_tensor(out, dtype::f32, {rows.size(0), fmt.dim()}, "decode_cache_rows output");
  same_device(rows, out, "decode_cache_rows");
  launch_decode_cache_rows({rows.data<std::uint8_t>(), nullptr, out.data<float>(), rows.size(0),
                            fmt},
                           current_stream());
}

}  // namespace di::cuda
