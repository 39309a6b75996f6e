// The attention sub-block: low-rank queries, one shared K = V head with rope on its tail,
// attention with sinks over the sliding window (its FP8 ring in the sequence state plus the
// new rows) and, on compressed layers, the selected compressed entries; then the inverse
// rotation of the output and the grouped low-rank output projection.
#include "model/forward/detail/forward_pass.hpp"

#include <algorithm>
#include <cmath>

namespace di::detail {

namespace {

/// The window part of one sequence: the previous rows from the ring (decoded) followed by the
/// new rows; indices[t] names the rows at positions max(0, p - window + 1) .. p.
struct window_rows {
  tensor kv;       // [previous + count, head_dim]
  tensor indices;  // [count, window] i32 (host)
};

/// Runs f(first ring slot, first row, n) over the at most two contiguous ring runs that hold
/// positions [begin, begin + n).
template <typename F>
void for_ring_runs(std::int64_t win, std::int64_t begin, std::int64_t n, F f) {
  for (std::int64_t done = 0; done < n;) {
    const std::int64_t slot = (begin + done) % win;
    const std::int64_t run = std::min(n - done, win - slot);
    f(slot, done, run);
    done += run;
  }
}

window_rows gather_window(const forward_pass& pass, int layer, sequence_pass& s,
                          const tensor& kv_new) {
  const std::int64_t win = pass.layout.window;
  const std::int64_t prev = std::min(s.start, win - 1);
  tensor ring = s.state->window_ring(layer);  // [window, row_bytes]
  tensor prev_rows = tensor::empty({prev, kv_new.size(1)}, dtype::f32, pass.dev());
  for_ring_runs(win, s.start - prev, prev, [&](std::int64_t slot, std::int64_t row, std::int64_t n) {
    tensor out = prev_rows.slice(0, row, row + n);
    ops::decode_cache_rows(ring.slice(0, slot, slot + n), pass.layout.window_format, out);
  });
  const tensor parts[] = {prev_rows, kv_new};
  window_rows w{ops::concat_rows(parts), tensor::empty({s.count, win}, dtype::i32)};
  const std::int64_t first = s.start - prev;  // position of row 0
  for (std::int64_t t = 0; t < s.count; ++t) {
    const std::int64_t pos = s.start + t;
    std::int32_t* idx = w.indices.data<std::int32_t>() + t * win;
    for (std::int64_t j = 0; j < win; ++j) {
      const std::int64_t p = pos - win + 1 + j;
      idx[j] = p < 0 ? -1 : std::int32_t(p - first);
    }
  }
  return w;
}

/// Stores the last `window` new rows of a sequence in its ring.
void update_ring(const forward_pass& pass, int layer, sequence_pass& s, const tensor& kv_new) {
  const std::int64_t win = pass.layout.window;
  tensor ring = s.state->window_ring(layer);  // [window, row_bytes]
  const std::int64_t first = std::max<std::int64_t>(0, s.count - win);
  for_ring_runs(win, s.start + first, s.count - first,
                [&](std::int64_t slot, std::int64_t row, std::int64_t n) {
                  tensor out = ring.slice(0, slot, slot + n);
                  ops::encode_cache_rows(kv_new.slice(0, first + row, first + row + n),
                                         pass.layout.window_format, out);
                });
}

/// Window plus compressed entries of one sequence, and its attention output [count, H, hd].
tensor attend_sequence(forward_pass& pass, int layer, sequence_pass& s, const tensor& q,
                       const tensor& kv, const compressed_rows& rows) {
  const layer_weights& w = pass.weights.layers[std::size_t(layer)];
  window_rows win = gather_window(pass, layer, s, kv);
  update_ring(pass, layer, s, kv);
  const float scale = 1.0f / std::sqrt(float(pass.config.head_dim));
  compressed_attention comp;
  if (pass.config.compress_ratio(layer) > 0)
    comp = compressed_forward(pass, layer, s, rows);
  if (pass.on_cuda())  // two pools, two index lists: nothing merged on the host
    return two_pool_attention(q, w.attn.sinks, win.kv, pass.upload(win.indices), comp.kv,
                              comp.indices, scale);
  tensor pool = win.kv, indices = win.indices;
  if (comp.kv.defined()) {
    const std::int64_t base = win.kv.size(0), kw = win.indices.size(1), kc = comp.indices.size(1);
    const tensor parts[] = {win.kv, comp.kv};
    pool = ops::concat_rows(parts);
    indices = tensor::empty({s.count, kw + kc}, dtype::i32);  // [count, window + k]
    for (std::int64_t t = 0; t < s.count; ++t) {
      std::int32_t* dst = indices.data<std::int32_t>() + t * (kw + kc);
      std::copy_n(win.indices.data<std::int32_t>() + t * kw, kw, dst);
      for (std::int64_t j = 0; j < kc; ++j) {
        const std::int32_t e = comp.indices.data<std::int32_t>()[t * kc + j];
        dst[kw + j] = e < 0 ? -1 : std::int32_t(base + e);
      }
    }
  }
  return ops::sparse_attention(q, pool, w.attn.sinks, indices, {scale});
}

}  // namespace

namespace {

const tensor& inv_freq_of(const forward_pass& pass, int layer) {
  return pass.config.compress_ratio(layer) > 0 ? pass.inv_freq_compress : pass.inv_freq_main;
}

}  // namespace

attention_inputs attention_project(const forward_pass& pass, int layer,
                                   const ops::quantized_rows& x, const attention_extras& extras) {
  const model_config& c = pass.config;
  const attention_weights& w = pass.weights.layers[std::size_t(layer)].attn;
  const std::int64_t rows = x.x.size(0), heads = c.num_heads, hd = c.head_dim;
  const float eps = float(c.rms_norm_eps);
  const tensor& inv_freq = inv_freq_of(pass, layer);

  attention_inputs in;
  auto [q_a, kv_a] = pass.linear_pair(x, w.wq_a, w.wkv);  // [rows, q_lora], [rows, hd]
  // Norm, rope and the window cache's FP8 rounding of the new rows (V4.1 quantizes the whole row,
  // V4 its non-rope part), one op: one launch on CUDA -- on a side branch beside the queries.
  const cache_row_format& f = pass.layout.window_format;
  auto kv_rows = [&] {
    tensor kv =
        ops::norm_rope_quant(kv_a, w.kv_norm, eps, pass.positions, inv_freq, f.block, f.quant_dims);
    if (extras.beside) extras.beside();
    return kv;
  };
  auto queries = [&] {
    // The norm hands wq_b its activation codes (on CUDA computed in the norm's kernel).
    const ops::quantized_rows qr =
        ops::rms_norm_quantized(q_a, w.q_norm, eps, pass.act(w.wq_b).act_quant_block);
    in.q_residual = qr.x;
    tensor q = pass.linear(qr, w.wq_b);  // [rows, H * hd]
    // V4 normalises each head of the query.
    if (!c.is_v41()) q = ops::rms_norm(q.view({rows * heads, hd}), tensor(), eps);
    in.q = q.view({rows, heads, hd});
    ops::rotary(in.q, pass.positions, inv_freq, false);
    if (extras.after_queries) extras.after_queries(in.q_residual);
    return 0;
  };
  in.kv = beside(pass, kv_rows, queries).first;
  return in;
}

tensor attention_core(forward_pass& pass, int layer, const attention_inputs& in,
                      const compressed_rows& rows) {
  if (pass.batched) return batched_attention_core(pass, layer, in, rows);
  compressed_feed(pass, layer, rows);
  std::vector<tensor> outs;  // per sequence [count, H, hd]
  for (sequence_pass& s : pass.seqs)
    outs.push_back(attend_sequence(pass, layer, s, forward_pass::rows_of(in.q, s),
                                   forward_pass::rows_of(in.kv, s), rows));
  return ops::concat_rows(outs);  // [rows, H, hd]
}

tensor attention_output(const forward_pass& pass, int layer, tensor o) {
  const model_config& c = pass.config;
  const attention_weights& w = pass.weights.layers[std::size_t(layer)].attn;
  const std::int64_t rows = o.size(0), heads = c.num_heads, hd = c.head_dim;
  ops::rotary(o, pass.positions, inv_freq_of(pass, layer), true);
  tensor grouped = ops::grouped_linear(o.view({rows, c.o_groups, heads * hd / c.o_groups}), w.wo_a);
  return pass.linear(grouped.view({rows, std::int64_t(c.o_groups) * c.o_lora_rank}), w.wo_b);
}

}  // namespace di::detail
