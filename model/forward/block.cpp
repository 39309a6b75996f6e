// One decoder block with manifold hyper-connections. V4.1 collapses each sub-block's input
// with the `pre` computed at the previous mixing site (single pass: attention uses the last
// FFN site's, the FFN this attention site's); V4 uses each site's own. The sub-blocks live in
// attention.cpp and moe.cpp. With decode graphs, the fixed-shape parts before and after the
// per-sequence attention replay as captured pieces (detail/decode_graphs.hpp).
#include "model/forward/detail/forward_pass.hpp"

namespace di::detail {

namespace {

ops::hc_params hc_params_of(const model_config& c) {
  return {c.hc_mult, c.hc_sinkhorn_iters, float(c.hc_eps), float(c.rms_norm_eps)};
}

/// The attention site up to the per-sequence attention: mix, collapsed and normed input,
/// queries, new window rows and the compressed branch's row-wise projections.
struct attention_site {
  ops::hc_mix mix;
  ops::quantized_rows h;  // [rows, dim], with wq_a's activation codes where the backend fuses them
  attention_inputs in;
  compressed_rows rows;
};

/// The compressed branch's row-wise tensors as a captured piece's outputs, and back (members
/// a layer does not use stay undefined).
std::vector<tensor> tensors_of(const compressed_rows& r) {
  return {r.main.kv, r.main.score,    r.index.kv, r.index.score,
          r.query.q, r.query.weights, r.entry_kv, r.entry_keys};
}

compressed_rows compressed_rows_of(const std::vector<tensor>& t, std::size_t at) {
  DI_CHECK(t.size() == at + 8, "decode graph piece: {} outputs, expected {}", t.size(), at + 8);
  return {{t[at], t[at + 1]}, {t[at + 2], t[at + 3]}, {t[at + 4], t[at + 5]}, t[at + 6], t[at + 7]};
}

/// `with_rows`: compressed_project too (else a.rows stays empty). The site's latency-bound
/// launches run on two branches (site_branches()): beside the queries and the index queries,
/// the new window rows, the compressed branch's projections of the normed input and, on V4.1
/// (whose input collapses with the last site's pre), this site's mix.
attention_site attention_site_forward(const forward_pass& pass, int layer, const tensor& x,
                                      const tensor& pre_mix, bool with_rows = true) {
  const model_config& c = pass.config;
  const layer_weights& w = pass.weights.layers[std::size_t(layer)];
  const bool v41 = c.is_v41();
  attention_site a;
  auto mixes = [&] {
    return ops::hc_mixes(x, w.hc_attn.fn, w.hc_attn.scale, w.hc_attn.base, hc_params_of(c));
  };
  auto collapse = [&](const tensor& attn_pre) {  // [rows, hc]
    a.h = ops::hc_collapse_norm_quantized(x, attn_pre, w.attn_norm, float(c.rms_norm_eps),
                                          pass.act(w.attn.wq_a).act_quant_block);
  };
  if (site_branches()) {
    if (!v41) a.mix = mixes();
    collapse(v41 ? pre_mix : a.mix.pre);
    attention_extras extras;
    extras.beside = [&] {
      if (v41) a.mix = mixes();
      if (with_rows) compressed_project_rows(pass, layer, a.h.x, a.rows);
    };
    if (with_rows)
      extras.after_queries = [&](const tensor& q_residual) {
        compressed_project_queries(pass, layer, q_residual, a.rows);
      };
    a.in = attention_project(pass, layer, a.h, extras);
    return a;
  }
  auto project = [&](const tensor& attn_pre) {
    collapse(attn_pre);
    a.in = attention_project(pass, layer, a.h);
    return 0;
  };
  if (v41) {  // the mix on a side branch beside the collapse and the projections
    a.mix = beside(pass, mixes, [&] { return project(pre_mix); }).first;
  } else {
    a.mix = mixes();
    project(a.mix.pre);
  }
  // Row-wise like the rest of the site (positions read on the device), so a decode graph
  // captures it: the eager attention between the pieces keeps only the per-sequence work.
  if (with_rows) a.rows = compressed_project(pass, layer, a.h.x, a.in.q_residual);
  return a;
}

/// From the attention output o [rows, H, hd] to the block output [rows, hc, dim]: output
/// projection, expand, FFN site (pre_mix receives its pre).
tensor ffn_site_forward(const forward_pass& pass, int layer, const tensor& o, const tensor& x,
                        const ops::hc_mix& attn_mix, tensor& pre_mix) {
  const model_config& c = pass.config;
  const layer_weights& w = pass.weights.layers[std::size_t(layer)];
  tensor a = attention_output(pass, layer, o);                     // [rows, dim]
  tensor y = ops::hc_expand(a, x, attn_mix.post, attn_mix.comb);  // [rows, hc, dim]
  ops::hc_mix ffn_mix;
  auto mixes = [&] {
    ffn_mix = ops::hc_mixes(y, w.hc_ffn.fn, w.hc_ffn.scale, w.hc_ffn.base, hc_params_of(c));
  };
  // V4.1 collapses with the attention site's pre, so its FFN mix can wait: it runs on the
  // MoE's side branch (moe_forward), beside the routed experts.
  if (!c.is_v41()) mixes();
  const tensor& ffn_pre = c.is_v41() ? attn_mix.pre : ffn_mix.pre;  // [rows, hc]
  const ops::quantized_rows h = ops::hc_collapse_norm_quantized(
      y, ffn_pre, w.ffn_norm, float(c.rms_norm_eps), pass.act(w.moe.shared.w1).act_quant_block);
  tensor f = c.is_v41() ? moe_forward(pass, layer, h, mixes) : moe_forward(pass, layer, h);
  pre_mix = ffn_mix.pre;
  return ops::hc_expand(f, y, ffn_mix.post, ffn_mix.comb);  // [rows, hc, dim]
}

/// The per-sequence attention, with the next layer's Engram projection (if any) on a side
/// branch beside it: the attention's launches are latency-bound, so the projection's weight
/// stream runs in their shadow instead of alone before the next layer.
tensor attention_core_ahead(forward_pass& pass, int layer, const attention_inputs& in,
                            const compressed_rows& rows, engram_ahead* ahead) {
  if (ahead == nullptr) return attention_core(pass, layer, in, rows);
  auto [kv, o] = beside(
      pass, [&] { return engram_project(pass, ahead->layer, ahead->hash_ids); },
      [&] { return attention_core(pass, layer, in, rows); });
  ahead->kv = kv;
  return o;
}

/// The ids of a layer's decode graph pieces: apart (graphs_merge_sites off) the attention site
/// and the output + FFN piece; merged, a site piece of its own only where nothing before it
/// could take it, the output piece of the last layer (or of a layer whose next site stays
/// apart), and the output piece that also runs the next layer's site. Distinct ids per mode:
/// a switch between steps never replays a piece captured the other way.
enum piece_id : int {
  piece_site = 0,
  piece_output = 1,
  piece_merged_site = 2,
  piece_merged_output = 3,
  piece_output_then_site = 4,
};

/// block_forward through the decode graphs: the attention-site piece (or its outputs, computed
/// ahead in the piece before: pass.next_site), the eager attention, then the output + FFN
/// piece -- which, when merging, goes on into the next layer's site (after that layer's
/// Engram when `ahead` holds its projection) and leaves its outputs in pass.next_site.
tensor graphed_block(forward_pass& pass, int layer, const tensor& x, tensor& pre_mix,
                     engram_ahead* ahead) {
  decode_graphs& g = *pass.graphs;
  const model_config& c = pass.config;
  const bool with_rows = graphs_capture_compressed();
  std::vector<tensor> site;
  if (pass.next_site.layer == layer) {
    site = std::move(pass.next_site.outputs);
    pass.next_site = {};
  } else {
    site = g.run(layer, pass.merge_sites ? piece_merged_site : piece_site, {x, pre_mix},
                 [&](const std::vector<tensor>& in) {
                   return graphed_site_outputs(padded_pass(pass), layer, in[0], in[1]);
                 });
  }
  const ops::hc_mix mix{site[0], site[1], site[2]};
  const attention_inputs in{site[3], site[4], site[5]};
  const compressed_rows rows = with_rows ? compressed_rows_of(site, 7)
                                         : compressed_project(pass, layer, site[6], in.q_residual);
  const int next = layer + 1;
  const bool engram_next = next < c.num_layers && c.is_engram_layer(next);
  const bool merge = pass.merge_sites && next < c.num_layers &&
                     (!engram_next || (ahead != nullptr && ahead->layer == next));
  const int output_piece = merge              ? piece_output_then_site
                           : pass.merge_sites ? piece_merged_output
                                              : piece_output;
  // The batched attention writes straight into the output piece's input buffer (no copy).
  if (pass.batched && graphs_use_slots())
    pass.attention_out =
        g.input_slot(layer, output_piece, 0, {in.q.size(1), in.q.size(2)}, dtype::f32, pass.dev());
  const tensor o = attention_core_ahead(pass, layer, in, rows, ahead);
  pass.attention_out = tensor();
  std::vector<tensor> inputs{o, x, mix.pre, mix.post, mix.comb};
  if (merge && engram_next) inputs.push_back(ahead->kv);
  const std::vector<tensor> out =
      g.run(layer, output_piece, inputs, [&](const std::vector<tensor>& in) {
        const forward_pass p = padded_pass(pass);
        tensor next_pre;
        tensor y =
            ffn_site_forward(p, layer, in[0], in[1], ops::hc_mix{in[2], in[3], in[4]}, next_pre);
        std::vector<tensor> result{y, next_pre};
        if (!merge) return result;
        const tensor next_x = engram_next ? engram_apply(p, next, y, in[5]) : y;
        if (engram_next) result.push_back(next_x);
        for (tensor& t : graphed_site_outputs(p, next, next_x, next_pre))
          result.push_back(std::move(t));
        return result;
      });
  pre_mix = out[1];
  if (merge) {
    const std::size_t at = engram_next ? 3 : 2;
    pass.next_site = {next, std::vector<tensor>(out.begin() + std::ptrdiff_t(at), out.end()),
                      engram_next ? out[2] : tensor()};
  }
  return out[0];
}

}  // namespace

std::vector<tensor> graphed_site_outputs(const forward_pass& padded, int layer, const tensor& x,
                                         const tensor& pre_mix) {
  const attention_site a =
      attention_site_forward(padded, layer, x, pre_mix, graphs_capture_compressed());
  std::vector<tensor> out{a.mix.pre, a.mix.post, a.mix.comb, a.in.q_residual,
                          a.in.q,    a.in.kv,    a.h.x};
  for (tensor& t : tensors_of(a.rows)) out.push_back(std::move(t));
  prefetch_output_weights(padded, layer);  // streams in while the eager attention runs
  return out;
}

forward_pass padded_pass(const forward_pass& pass) {
  forward_pass p = pass;
  p.tokens = pass.graphs->tokens();
  p.positions = pass.graphs->positions();
  p.seqs.clear();
  p.graphs = nullptr;
  p.in_graph = true;
  return p;
}

tensor block_forward(forward_pass& pass, int layer, const tensor& x, tensor& pre_mix,
                     engram_ahead* ahead) {
  if (pass.graphs != nullptr) return graphed_block(pass, layer, x, pre_mix, ahead);
  const attention_site a = attention_site_forward(pass, layer, x, pre_mix);
  const tensor o = attention_core_ahead(pass, layer, a.in, a.rows, ahead);  // [rows, H, hd]
  return ffn_site_forward(pass, layer, o, x, a.mix, pre_mix);
}

}  // namespace di::detail
