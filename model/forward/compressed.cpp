// The compressed branch of attention: compressors pool the new tokens into entries (appended,
// quantized, to the sequence's paged streams), indexers score the visible entries and keep
// the top-k. V4.1 shares one source layer's entries, keys and selections with the later layers
// of its group; V4 gives each compressed layer its own, with overlapping windows, position
// biases and a Hadamard-rotated FP4 indexer at ratio 4. The row-wise part (compressor
// projections, index queries) runs once on all rows of the call (compressed_project); pooling
// and appends per sequence, then one gather + decode of the entries every sequence reads
// (compressed_feed); scoring and top-k per sequence (compressed_forward).
#include "model/forward/detail/forward_pass.hpp"

#include <algorithm>
#include <cmath>

namespace di::detail {

namespace {

/// Positions [count] i64 of the entries first, first + 1, ...: entry w stands at w * ratio.
tensor entry_positions(const forward_pass& pass, std::int64_t first, std::int64_t count,
                       int ratio) {
  tensor p = tensor::empty({count}, dtype::i64);  // [count]
  for (std::int64_t i = 0; i < count; ++i) p.data<std::int64_t>()[i] = (first + i) * ratio;
  return pass.upload(p);
}

/// Compressor `cw`'s projections of every row of the call (its state slot `slot`; < 0: ratio
/// 1, every token an entry, so kv is already the normalised entries).
compressor_rows project_compressor(const forward_pass& pass, const tensor& x,
                                   const compressor_weights& cw, int slot) {
  const float eps = float(pass.config.rms_norm_eps);
  compressor_rows out;
  out.kv = ops::linear(x, cw.wkv);  // [rows, width] fp32, never act-quantized
  if (slot < 0) {
    out.kv = ops::rms_norm(out.kv, cw.norm, eps);
    return out;
  }
  const int ratio = pass.layout.compressors[std::size_t(slot)].ratio;
  DI_CHECK(!cw.ape.defined() || cw.ape.size(0) == ratio,
           "compressor position bias of {} rows for ratio {}", cw.ape.size(0), ratio);
  out.score = ops::linear(x, cw.wgate);  // [rows, width]
  // score[row] += ape[position % ratio], the row's phase in its group (positions read on the
  // device: a decode graph captures it).
  if (cw.ape.defined()) ops::add_position_rows(out.score, cw.ape, pass.positions);
  return out;
}

/// Feeds the sequence's rows of the projections `rows` through compressor `cw` (state slot
/// `slot`) and returns the normalised entries that complete, [completed, entry_dim] (pre-rope).
tensor compress(const forward_pass& pass, sequence_pass& s, const compressor_rows& rows,
                const compressor_weights& cw, int slot) {
  const tensor kv = forward_pass::rows_of(rows.kv, s);  // [count, width]
  if (slot < 0) return kv;
  const compressor_slot& cs = pass.layout.compressors[std::size_t(slot)];
  tensor state_kv = s.state->compressor_kv(slot), state_score = s.state->compressor_score(slot);
  tensor pooled = ops::compress_tokens(kv, forward_pass::rows_of(rows.score, s), s.start, state_kv,
                                       state_score, {cs.ratio, cs.overlap});  // [completed, entry_dim]
  return ops::rms_norm(pooled, cw.norm, float(pass.config.rms_norm_eps));
}

/// Quantizes rows into stream `stream`'s format and appends them.
void append(const forward_pass& pass, sequence_pass& s, int stream, const tensor& rows) {
  const cache_row_format& f = pass.layout.streams[std::size_t(stream)].format;
  tensor packed =
      tensor::empty({rows.size(0), std::int64_t(f.row_bytes())}, dtype::u8, pass.dev());
  ops::encode_cache_rows(rows, f, packed);
  s.state->append_entries(stream, packed);
}

/// The first `entries` entries of `stream` as prefetch_stream decoded them for this call
/// (reused across the layers of a group).
const tensor& decoded(const decoded_stream& d, int stream, std::int64_t entries) {
  DI_CHECK(d.stream == stream && d.entries == entries,
           "stream {}: {} entries were not decoded for this layer (have stream {}, {} entries)",
           stream, entries, d.stream, d.entries);
  return d.rows;
}

}  // namespace

v41_entries v41_source_entries(const forward_pass& pass, int layer, const tensor& latent,
                               const tensor& positions) {
  const model_config& c = pass.config;
  const layer_weights& w = pass.weights.layers[std::size_t(layer)];
  v41_entries e;
  if (c.is_index_source(layer)) {
    e.keys = ops::rms_norm(ops::linear(latent, w.indexer.wk), w.indexer.k_norm,
                           float(c.rms_norm_eps));  // [n, index_head_dim]
    ops::rotary(e.keys, positions, pass.inv_freq_compress, false);
  }
  e.kv = latent.clone();  // [n, head_dim]
  ops::rotary(e.kv, positions, pass.inv_freq_compress, false);
  return e;
}

namespace {

/// V4.1 KV source: compress, derive the entries (at ratio 1 already done on all rows by
/// compressed_project) and store them.
void feed_v41_source(const forward_pass& pass, int layer, sequence_pass& s,
                     const compressed_rows& rows) {
  const model_config& c = pass.config;
  const layer_weights& w = pass.weights.layers[std::size_t(layer)];
  const int r = c.compress_ratio(layer);
  v41_entries e;
  if (rows.entry_kv.defined()) {
    e.kv = forward_pass::rows_of(rows.entry_kv, s);
    if (rows.entry_keys.defined()) e.keys = forward_pass::rows_of(rows.entry_keys, s);
  } else {
    tensor latent =
        compress(pass, s, rows.main, w.compressor, pass.layout.compressor_of(layer, false));
    e = v41_source_entries(pass, layer, latent,
                           entry_positions(pass, s.start / r, latent.size(0), r));
  }
  if (e.keys.defined())
    append(pass, s, pass.layout.stream_of(layer, stream_kind::index_keys), e.keys);
  append(pass, s, pass.layout.stream_of(layer, stream_kind::compressed_kv), e.kv);
}

/// V4 layer: its own compressor and, at ratio 4, its indexer's compressor (Hadamard + FP4).
void feed_v4_layer(const forward_pass& pass, int layer, sequence_pass& s,
                   const compressed_rows& rows) {
  const layer_weights& w = pass.weights.layers[std::size_t(layer)];
  const int r = pass.config.compress_ratio(layer);
  tensor latent =
      compress(pass, s, rows.main, w.compressor, pass.layout.compressor_of(layer, false));
  tensor pos = entry_positions(pass, s.start / r, latent.size(0), r);
  ops::rotary(latent, pos, pass.inv_freq_compress, false);
  append(pass, s, pass.layout.stream_of(layer, stream_kind::compressed_kv), latent);
  if (!pass.config.has_indexer(layer)) return;
  tensor keys =
      compress(pass, s, rows.index, w.indexer.compressor, pass.layout.compressor_of(layer, true));
  ops::rotary(keys, pos, pass.inv_freq_compress, false);
  ops::hadamard(keys);
  append(pass, s, pass.layout.stream_of(layer, stream_kind::index_keys), keys);
}

/// Index queries of every row of the call [rows, heads, index_head_dim] (rotated, V4
/// Hadamard, FP4), from the query latent q_residual [rows, q_lora_rank].
tensor index_queries(const forward_pass& pass, int layer, const tensor& q_residual) {
  const model_config& c = pass.config;
  const indexer_weights& iw = pass.weights.layers[std::size_t(layer)].indexer;
  const std::int64_t rows = q_residual.size(0), heads = c.index_n_heads, dim = c.index_head_dim;
  tensor q = pass.linear(q_residual, iw.wq_b).view({rows, heads, dim});
  ops::rotary(q, pass.positions, pass.inv_freq_compress, false);
  tensor flat = q.view({rows * heads, dim});
  if (!c.is_v41()) ops::hadamard(flat);
  ops::fp4_fake_quant(flat, 32, ops::fp4_scale::ue8m0);
  return q;
}

/// The index heads' weights of every row [rows, heads] (fp32), from the normed input x.
tensor index_head_weights(const forward_pass& pass, int layer, const tensor& x) {
  const model_config& c = pass.config;
  const indexer_weights& iw = pass.weights.layers[std::size_t(layer)].indexer;
  tensor weights = ops::linear(x, iw.weights_proj);  // [rows, heads] fp32
  if (!pass.weights.index_scale_folded) {
    const float scale =
        1.0f / std::sqrt(float(c.index_head_dim)) * (1.0f / std::sqrt(float(c.index_n_heads)));
    for (std::int64_t i = 0; i < weights.numel(); ++i) weights.data<float>()[i] *= scale;
  }
  return weights;
}

tensor visible_counts(const forward_pass& pass, const sequence_pass& s, int ratio) {
  tensor v = tensor::empty({s.count}, dtype::i64);  // [count]
  for (std::int64_t t = 0; t < s.count; ++t) v.data<std::int64_t>()[t] = (s.start + t + 1) / ratio;
  return pass.upload(v);
}

/// Scores the keys with the sequence's index queries and returns the top-k entries per token.
tensor run_indexer(const forward_pass& pass, int layer, sequence_pass& s,
                   const compressed_rows& rows, const tensor& keys) {
  const model_config& c = pass.config;
  const std::int64_t entries = keys.size(0);
  tensor scores = ops::index_scores(forward_pass::rows_of(rows.query.q, s), keys,
                                    forward_pass::rows_of(rows.query.weights, s));  // [count, entries]
  tensor visible = visible_counts(pass, s, c.compress_ratio(layer));
  tensor allowed;
  if (c.is_v41() && layer == c.candidate_source_layer_id) {
    s.candidates =
        ops::candidate_blocks(scores, visible, c.candidate_topk_blocks, c.candidate_block_size);
  } else if (c.is_v41() && c.candidate_source_layer_id >= 0 &&
             c.candidate_source_layer_id < layer && s.candidates.defined()) {
    DI_CHECK(s.candidates.size(1) == entries, "layer {}: candidate mask over {} entries, keys {}",
             layer, s.candidates.size(1), entries);
    allowed = s.candidates;
  }
  const int k = int(std::min<std::int64_t>(c.index_topk, entries));
  return ops::masked_topk(scores, visible, allowed, k);
}

/// Decodes the first entries of `stream` (entries = (start + count) / ratio) for every
/// sequence of the call whose copy in `member` is stale: one gather from the pool's arena and
/// one decode for all of them, left where decoded() finds them.
void prefetch_stream(forward_pass& pass, int stream, int ratio,
                     decoded_stream sequence_pass::*member) {
  if (stream < 0 || pass.seqs.empty()) return;
  const kv_block_pool& pool = pass.seqs.front().state->pool();
  std::vector<std::int64_t> rows;                              // arena rows of every stale copy
  std::vector<std::pair<sequence_pass*, std::int64_t>> stale;  // (sequence, entries)
  for (sequence_pass& s : pass.seqs) {
    DI_CHECK(&s.state->pool() == &pool, "the sequences of one forward call share one block pool");
    const std::int64_t entries = (s.start + s.count) / ratio;
    const decoded_stream& d = s.*member;
    if (d.stream == stream && d.entries == entries) continue;
    const std::vector<std::int64_t> r = s.state->entry_rows(stream, 0, entries);
    rows.insert(rows.end(), r.begin(), r.end());
    stale.emplace_back(&s, entries);
  }
  if (stale.empty()) return;
  const cache_row_format& f = pass.layout.streams[std::size_t(stream)].format;
  tensor all = tensor::empty({std::int64_t(rows.size()), f.dim()}, dtype::f32, pass.dev());
  if (!rows.empty())
    ops::decode_cache_rows(ops::gather_rows(pool.arena(stream), pass.index(rows)), f, all);
  std::int64_t at = 0;
  for (const auto& [s, entries] : stale) {
    decoded_stream& d = s->*member;
    d.stream = stream;
    d.entries = entries;
    d.rows = all.slice(0, at, at + entries);  // [entries, dim]
    at += entries;
  }
}

/// V4 layers without an indexer attend every visible entry.
tensor all_visible(const forward_pass& pass, const sequence_pass& s, int ratio,
                   std::int64_t entries) {
  tensor idx = tensor::empty({s.count, entries}, dtype::i32);  // [count, entries]
  for (std::int64_t t = 0; t < s.count; ++t)
    for (std::int64_t e = 0; e < entries; ++e)
      idx.data<std::int32_t>()[t * entries + e] =
          e < (s.start + t + 1) / ratio ? std::int32_t(e) : -1;
  return pass.upload(idx);
}

}  // namespace

void compressed_project_rows(const forward_pass& pass, int layer, const tensor& x,
                             compressed_rows& out) {
  const model_config& c = pass.config;
  if (c.compress_ratio(layer) == 0) return;
  const layer_weights& w = pass.weights.layers[std::size_t(layer)];
  const bool v41 = c.is_v41();
  if (!v41 || c.is_kv_source(layer))
    out.main = project_compressor(pass, x, w.compressor, pass.layout.compressor_of(layer, false));
  if (v41 && c.is_kv_source(layer) && pass.layout.compressor_of(layer, false) < 0) {
    // Ratio 1: row t is the entry at position t; its keys and rotation are row-wise too.
    v41_entries e = v41_source_entries(pass, layer, out.main.kv, pass.positions);
    out.entry_kv = e.kv;
    out.entry_keys = e.keys;
  }
  if (!v41 && c.has_indexer(layer))
    out.index = project_compressor(pass, x, w.indexer.compressor,
                                   pass.layout.compressor_of(layer, true));
  if (c.has_indexer(layer)) out.query.weights = index_head_weights(pass, layer, x);
}

void compressed_project_queries(const forward_pass& pass, int layer, const tensor& q_residual,
                                compressed_rows& out) {
  const model_config& c = pass.config;
  if (c.has_indexer(layer)) out.query.q = index_queries(pass, layer, q_residual);
}

compressed_rows compressed_project(const forward_pass& pass, int layer, const tensor& x,
                                   const tensor& q_residual) {
  compressed_rows out;
  compressed_project_rows(pass, layer, x, out);
  compressed_project_queries(pass, layer, q_residual, out);
  return out;
}

void compressed_feed(forward_pass& pass, int layer, const compressed_rows& rows) {
  const model_config& c = pass.config;
  const int r = c.compress_ratio(layer);
  if (r == 0) return;
  const bool v41 = c.is_v41();
  DI_CHECK(!v41 || c.kv_source_of(layer) >= 0,
           "layer {} compresses but no KV source layer precedes it", layer);
  for (sequence_pass& s : pass.seqs) {
    if (!v41)
      feed_v4_layer(pass, layer, s, rows);
    else if (c.is_kv_source(layer))
      feed_v41_source(pass, layer, s, rows);
  }
  const int source = v41 ? c.kv_source_of(layer) : layer;
  prefetch_stream(pass, pass.layout.stream_of(source, stream_kind::compressed_kv), r,
                  &sequence_pass::kv);
  if (c.has_indexer(layer))
    prefetch_stream(pass, pass.layout.stream_of(source, stream_kind::index_keys), r,
                    &sequence_pass::keys);
}

compressed_attention compressed_forward(forward_pass& pass, int layer, sequence_pass& s,
                                        const compressed_rows& rows) {
  const model_config& c = pass.config;
  const int r = c.compress_ratio(layer);
  const std::int64_t entries = (s.start + s.count) / r;
  if (!c.is_v41()) {
    const tensor& kv =
        decoded(s.kv, pass.layout.stream_of(layer, stream_kind::compressed_kv), entries);
    if (!c.has_indexer(layer)) return {kv, all_visible(pass, s, r, entries)};
    const tensor& keys =
        decoded(s.keys, pass.layout.stream_of(layer, stream_kind::index_keys), entries);
    return {kv, run_indexer(pass, layer, s, rows, keys)};
  }
  const int source = c.kv_source_of(layer);
  DI_CHECK(source >= 0, "layer {} compresses but no KV source layer precedes it", layer);
  const tensor& kv =
      decoded(s.kv, pass.layout.stream_of(source, stream_kind::compressed_kv), entries);
  if (c.is_index_source(layer)) {
    if (entries == 0) {
      s.topk = tensor::empty({s.count, 0}, dtype::i32, pass.dev());
    } else {
      const int key_stream = pass.layout.stream_of(source, stream_kind::index_keys);
      DI_CHECK(key_stream >= 0, "layer {}: KV source {} has no indexer keys", layer, source);
      s.topk = run_indexer(pass, layer, s, rows, decoded(s.keys, key_stream, entries));
    }
  }
  DI_CHECK(s.topk.defined(), "layer {} reuses top-k indices but no index source precedes it",
           layer);
  return {kv, s.topk};
}

}  // namespace di::detail
