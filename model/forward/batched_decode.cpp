// Decode steps batched across sequences on the CUDA executor. The per-sequence attention of
// attention.cpp / compressed.cpp issues about a dozen launches per sequence and layer (window
// decode and ring update, compressor pooling, appends, index scores, top-k, attention), which
// made a batch-64 step slower than the peer's. Here every sequence adds one token and keeps its
// slot in the pool's slot arena, so one launch covers the batch for each of them:
//   - compressor pooling through each sequence's partial-group state in the arena
//     (compress_decode), then norm / rotary / keys only for the sequences whose group
//     completes (known on the host from the positions), written straight into their streams'
//     pool rows;
//   - the new window rows scattered into the rings (one encode with destination rows);
//   - index scores of each sequence's query against its own keys, read in place from the
//     packed pool rows through a per-sequence entry -> pool-row map built from the block
//     tables on the device; one masked top-k (and V4.1 candidate-block) launch for the batch;
//   - attention reading the FP8 rings and the compressed entries in place (no decode to f32).
// The per-sequence path stays the reference (forward_options::batched_decode = false); the
// GPU test compares the two (bitwise with ordered splits, where both pick the same attention
// split).
#include "model/forward/detail/forward_pass.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#if defined(DEEPINFER_HAVE_CUDA)
#include "kernels/cuda/cuda_model_ops.hpp"
#include "kernels/cuda/cuda_model_twins.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/stream.hpp"
#endif

namespace di::detail {

/// The batch-wide state of one batched decode call.
struct decode_batch {
  const kv_block_pool* pool = nullptr;
  std::vector<std::int64_t> starts;  // per sequence: the new token's position
  std::vector<int> slots;            // per sequence: its arena slot
  tensor slot_ids;                   // [seqs] i32 on the device
  tensor start_dev;                  // [seqs] i64 on the device
  std::map<int, tensor> entry_maps;  // stream -> [seqs, entries] i32 pool rows (-1 unused)
  tensor topk;                       // [seqs, k] i32 entries of the last V4.1 index source
  tensor topk_rows;                  // [seqs, k] i32: topk's pool rows in topk_rows_stream
  int topk_rows_stream = -1;
  tensor candidates;                 // [seqs, entries] u8 of the V4.1 candidate source
};

#if defined(DEEPINFER_HAVE_CUDA)

namespace {

std::int64_t batch_size(const decode_batch& d) {
  return std::int64_t(d.starts.size());
}

/// Entries each sequence sees at `ratio` after this step, and their maximum.
std::int64_t max_entries(const decode_batch& d, int ratio) {
  std::int64_t n = 0;
  for (std::int64_t p : d.starts) n = std::max(n, (p + 1) / ratio);
  return n;
}

tensor visible_entries(const forward_pass& pass, const decode_batch& d, int ratio) {
  tensor v = tensor::empty({batch_size(d)}, dtype::i64);  // [seqs]
  for (std::size_t i = 0; i < d.starts.size(); ++i)
    v.data<std::int64_t>()[i] = (d.starts[i] + 1) / ratio;
  return pass.upload(v);
}

/// Pool rows [seqs, max entries] i32 of every sequence's entries of `stream` after this step
/// (reserve_streams sized the block tables for them before the call started).
const tensor& entry_map(const forward_pass& pass, decode_batch& d, int stream, int ratio) {
  auto it = d.entry_maps.find(stream);
  if (it != d.entry_maps.end()) return it->second;
  const std::int64_t b = batch_size(d), n = max_entries(d, ratio);
  std::size_t max_blocks = 0;
  for (const sequence_pass& s : pass.seqs)
    max_blocks = std::max(max_blocks, s.state->block_table(stream).size());
  tensor tables = tensor::zeros({b, std::int64_t(std::max<std::size_t>(1, max_blocks))}, dtype::i32);
  for (std::int64_t i = 0; i < b; ++i) {
    const std::vector<int>& t = pass.seqs[std::size_t(i)].state->block_table(stream);
    std::copy(t.begin(), t.end(), tables.data<std::int32_t>() + i * tables.size(1));
  }
  const tensor counts = visible_entries(pass, d, ratio);
  tensor out = tensor::empty({b, n}, dtype::i32, pass.dev());  // [seqs, entries]
  const tensor dev_tables = pass.upload(tables);
  cuda::launch_entry_rows({.tables = dev_tables.data<std::int32_t>(),
                           .counts = counts.data<std::int64_t>(),
                           .out = out.data<std::int32_t>(),
                           .batch = b,
                           .entries = n,
                           .max_blocks = int(tables.size(1)),
                           .per_block = pass.layout.entries_per_block},
                          cuda::current_stream());
  return d.entry_maps.emplace(stream, out).first->second;
}

/// Writes rows [n, dim] f32 as the next entry of stream `stream` of sequences `which` (one
/// row each, in order), quantized straight into their pool rows.
void append_rows(const forward_pass& pass, const decode_batch& d, int stream, const tensor& rows,
                 const std::vector<int>& which) {
  const cache_row_format& f = pass.layout.streams[std::size_t(stream)].format;
  std::vector<std::int64_t> dst;
  for (int i : which) {
    sequence_state& st = *pass.seqs[std::size_t(i)].state;
    const std::int64_t e = st.num_entries(stream);
    st.commit_entries(stream, 1);
    dst.push_back(st.entry_rows(stream, e, e + 1).front());
  }
  const tensor arena = d.pool->arena(stream);
  const tensor dev_dst = pass.index(dst);
  cuda::launch_encode_cache_rows({.x = rows.data<float>(),
                                  .out = arena.data<std::uint8_t>(),
                                  .dst_rows = dev_dst.data<std::int64_t>(),
                                  .rows = std::int64_t(which.size()),
                                  .format = f,
                                  .pool_rows = arena.size(0)},
                                 cuda::current_stream());
}

/// Feeds every sequence's new row of `rows` through compressor `slot` (states in the arena);
/// returns the pooled entries [done, dim] of the sequences `done` whose group completes.
tensor compress_batch(const forward_pass& pass, const decode_batch& d, const compressor_rows& rows,
                      int slot, std::vector<int>& done) {
  const std::int64_t b = batch_size(d);
  done.clear();
  if (slot < 0) {  // ratio 1: every row is an entry, already normalised
    for (int i = 0; i < int(b); ++i) done.push_back(i);
    return rows.kv;
  }
  const compressor_slot& cs = pass.layout.compressors[std::size_t(slot)];
  const int dim = cs.width / (cs.overlap ? 2 : 1);
  tensor out = tensor::empty({b, dim}, dtype::f32, pass.dev());  // [seqs, dim]
  cuda::launch_compress_decode({.kv = rows.kv.data<float>(),
                                .score = rows.score.data<float>(),
                                .slots = d.pool->slot_arena().data<std::uint8_t>(),
                                .slot_stride = d.pool->slot_stride(),
                                .state_offset = cs.offset,
                                .slot_ids = d.slot_ids.data<std::int32_t>(),
                                .starts = d.start_dev.data<std::int64_t>(),
                                .out = out.data<float>(),
                                .batch = b,
                                .width = cs.width,
                                .ratio = cs.ratio,
                                .overlap = cs.overlap},
                               cuda::current_stream());
  for (int i = 0; i < int(b); ++i)
    if ((d.starts[std::size_t(i)] + 1) % cs.ratio == 0) done.push_back(i);
  if (done.empty() || std::int64_t(done.size()) == b) return out;
  std::vector<std::int64_t> picked(done.begin(), done.end());
  return ops::gather_rows(out, pass.index(picked));
}

/// Positions [done] i64 of the entries the sequences `done` complete at `ratio`.
tensor completed_positions(const forward_pass& pass, const decode_batch& d,
                           const std::vector<int>& done, int ratio) {
  tensor p = tensor::empty({std::int64_t(done.size())}, dtype::i64);
  for (std::size_t i = 0; i < done.size(); ++i)
    p.data<std::int64_t>()[i] = d.starts[std::size_t(done[i])] / ratio * ratio;
  return pass.upload(p);
}

/// V4 layer: its compressor and, at ratio 4, its indexer's (Hadamard-rotated keys).
void feed_v4(const forward_pass& pass, const decode_batch& d, int layer,
             const compressed_rows& rows) {
  const model_config& c = pass.config;
  const layer_weights& w = pass.weights.layers[std::size_t(layer)];
  const int r = c.compress_ratio(layer);
  const float eps = float(c.rms_norm_eps);
  const int ms = pass.layout.compressor_of(layer, false);
  const int ks = c.has_indexer(layer) ? pass.layout.compressor_of(layer, true) : -1;
  std::vector<int> done, key_done;  // both compressors see every row, complete or not
  tensor latent = compress_batch(pass, d, rows.main, ms, done);
  tensor keys;
  if (c.has_indexer(layer)) keys = compress_batch(pass, d, rows.index, ks, key_done);
  if (done.empty()) return;
  if (ms >= 0) latent = ops::rms_norm(latent, w.compressor.norm, eps);
  const tensor pos = completed_positions(pass, d, done, r);
  ops::rotary(latent, pos, pass.inv_freq_compress, false);
  append_rows(pass, d, pass.layout.stream_of(layer, stream_kind::compressed_kv), latent, done);
  if (!c.has_indexer(layer)) return;
  DI_CHECK(key_done == done, "layer {}: the indexer's compressor completes other rows", layer);
  if (ks >= 0) keys = ops::rms_norm(keys, w.indexer.compressor.norm, eps);
  ops::rotary(keys, pos, pass.inv_freq_compress, false);
  ops::hadamard(keys);
  append_rows(pass, d, pass.layout.stream_of(layer, stream_kind::index_keys), keys, done);
}

/// V4.1 KV source: compress (ratio > 1) or take the row-wise entries (ratio 1), store them.
void feed_v41_source(const forward_pass& pass, const decode_batch& d, int layer,
                     const compressed_rows& rows) {
  const model_config& c = pass.config;
  const layer_weights& w = pass.weights.layers[std::size_t(layer)];
  std::vector<int> done;
  v41_entries e;
  if (rows.entry_kv.defined()) {
    for (int i = 0; i < int(batch_size(d)); ++i) done.push_back(i);
    e.kv = rows.entry_kv;
    e.keys = rows.entry_keys;
  } else {
    const int slot = pass.layout.compressor_of(layer, false);
    tensor latent = compress_batch(pass, d, rows.main, slot, done);
    if (done.empty()) return;
    if (slot >= 0) latent = ops::rms_norm(latent, w.compressor.norm, float(c.rms_norm_eps));
    e = v41_source_entries(pass, layer, latent,
                           completed_positions(pass, d, done, c.compress_ratio(layer)));
  }
  if (e.keys.defined())
    append_rows(pass, d, pass.layout.stream_of(layer, stream_kind::index_keys), e.keys, done);
  append_rows(pass, d, pass.layout.stream_of(layer, stream_kind::compressed_kv), e.kv, done);
}

/// Index scores [seqs, n] of each sequence's query rows against its own keys of `key_stream`.
tensor batched_index_scores(const forward_pass& pass, const decode_batch& d, const index_query& q,
                            int key_stream, const tensor& key_map) {
  const std::int64_t b = batch_size(d), n = key_map.size(1);
  const tensor arena = d.pool->arena(key_stream);
  tensor scores = tensor::empty({b, n}, dtype::f32, pass.dev());  // [seqs, n]
  cuda::index_scores_params p;
  p.q = q.q.data<float>();
  p.weights = q.weights.data<float>();
  p.keys = {arena.raw(), arena.size(0), true, pass.layout.streams[std::size_t(key_stream)].format};
  p.scores = scores.data<float>();
  p.tokens = int(b);
  p.heads = int(q.q.size(1));
  p.dim = int(q.q.size(2));
  p.key_rows = key_map.data<std::int32_t>();
  p.entries = n;
  cuda::launch_index_scores(p, cuda::current_stream());
  return scores;
}

/// The compressed entries the layer attends: their stream and pool rows [seqs, k] i32 (-1
/// unused); stream -1 when no sequence has an entry yet.
struct selected_entries {
  int stream = -1;
  tensor rows;
};

selected_entries select_entries(const forward_pass& pass, decode_batch& d, int layer,
                                const compressed_rows& rows) {
  const model_config& c = pass.config;
  const int r = c.compress_ratio(layer);
  const bool v41 = c.is_v41();
  const int source = v41 ? c.kv_source_of(layer) : layer;
  const bool indexes = c.has_indexer(layer);
  const std::int64_t n = max_entries(d, r);
  if (n == 0) {
    if (v41 && indexes) d.topk = tensor::empty({batch_size(d), 0}, dtype::i32, pass.dev());
    return {};
  }
  const int kv_stream = pass.layout.stream_of(source, stream_kind::compressed_kv);
  const tensor& kv_map = entry_map(pass, d, kv_stream, r);
  if (!v41 && !c.has_indexer(layer)) return {kv_stream, kv_map};  // every visible entry
  if (indexes) {
    const int key_stream = pass.layout.stream_of(source, stream_kind::index_keys);
    DI_CHECK(key_stream >= 0, "layer {}: KV source {} has no indexer keys", layer, source);
    const tensor scores = batched_index_scores(pass, d, rows.query, key_stream,
                                               entry_map(pass, d, key_stream, r));
    const tensor visible = visible_entries(pass, d, r);
    tensor allowed;
    if (v41 && layer == c.candidate_source_layer_id) {
      d.candidates =
          ops::candidate_blocks(scores, visible, c.candidate_topk_blocks, c.candidate_block_size);
    } else if (v41 && c.candidate_source_layer_id >= 0 && c.candidate_source_layer_id < layer &&
               d.candidates.defined()) {
      DI_CHECK(d.candidates.size(1) == n, "layer {}: candidate mask over {} entries, keys {}",
               layer, d.candidates.size(1), n);
      allowed = d.candidates;
    }
    // The picks and their pool rows in one launch; a later layer reusing the picks with the
    // same source's entries reuses the rows too.
    std::tie(d.topk, d.topk_rows) = cuda::masked_topk_mapped(
        scores, visible, allowed, int(std::min<std::int64_t>(c.index_topk, n)), kv_map);
    d.topk_rows_stream = kv_stream;
  }
  DI_CHECK(d.topk.defined(), "layer {} reuses top-k indices but no index source precedes it",
           layer);
  if (d.topk_rows.defined() && d.topk_rows_stream == kv_stream) return {kv_stream, d.topk_rows};
  tensor out = tensor::empty(d.topk.shape(), dtype::i32, pass.dev());  // [seqs, k]
  cuda::launch_map_rows({.idx = d.topk.data<std::int32_t>(),
                         .map = kv_map.data<std::int32_t>(),
                         .out = out.data<std::int32_t>(),
                         .batch = d.topk.size(0),
                         .k = d.topk.size(1),
                         .n = kv_map.size(1)},
                        cuda::current_stream());
  d.topk_rows = out;
  d.topk_rows_stream = kv_stream;
  return {kv_stream, out};
}

/// Writes the new window rows kv [seqs, hd] into the rings and returns each sequence's window
/// as ring-table rows [seqs, window] i32 (positions p - window + 1 .. p in order, -1 before 0).
tensor write_window(const forward_pass& pass, const decode_batch& d, int layer, const tensor& kv) {
  const std::int64_t b = batch_size(d), win = pass.layout.window;
  std::vector<std::int64_t> dst;
  tensor idx = tensor::empty({b, win}, dtype::i32);  // [seqs, window]
  for (std::int64_t i = 0; i < b; ++i) {
    const std::int64_t p = d.starts[std::size_t(i)];
    const int slot = d.slots[std::size_t(i)];
    dst.push_back(d.pool->ring_row(slot, layer, p % win));
    for (std::int64_t j = 0; j < win; ++j) {
      const std::int64_t q = p - win + 1 + j;
      idx.data<std::int32_t>()[i * win + j] =
          q < 0 ? -1 : std::int32_t(d.pool->ring_row(slot, layer, q % win));
    }
  }
  const tensor ring = d.pool->ring_rows();
  const tensor dev_dst = pass.index(dst);
  cuda::launch_encode_cache_rows({.x = kv.data<float>(),
                                  .out = ring.data<std::uint8_t>(),
                                  .dst_rows = dev_dst.data<std::int64_t>(),
                                  .rows = b,
                                  .format = pass.layout.window_format,
                                  .pool_rows = ring.size(0)},
                                 cuda::current_stream());
  return pass.upload(idx);
}

}  // namespace

std::shared_ptr<decode_batch> make_decode_batch(const forward_pass& pass) {
  if (!pass.on_cuda() || !pass.options.batched_decode || pass.seqs.empty()) return nullptr;
  const kv_block_pool& pool = pass.seqs.front().state->pool();
  if (pool.num_slots() == 0) return nullptr;
  auto d = std::make_shared<decode_batch>();
  d->pool = &pool;
  for (const sequence_pass& s : pass.seqs) {
    if (s.count != 1 || &s.state->pool() != &pool || s.state->slot_index() < 0 ||
        s.start < s.state->num_cached_tokens())
      return nullptr;
    d->starts.push_back(s.start);
    d->slots.push_back(s.state->slot_index());
  }
  const std::int64_t b = batch_size(*d);
  tensor ids = tensor::empty({b}, dtype::i32), starts = tensor::empty({b}, dtype::i64);
  std::copy(d->slots.begin(), d->slots.end(), ids.data<std::int32_t>());
  std::copy(d->starts.begin(), d->starts.end(), starts.data<std::int64_t>());
  d->slot_ids = pass.upload(ids);
  d->start_dev = pass.upload(starts);
  return d;
}

tensor batched_attention_core(forward_pass& pass, int layer, const attention_inputs& in,
                              const compressed_rows& rows) {
  decode_batch& d = *pass.batched;
  const model_config& c = pass.config;
  selected_entries sel;
  if (c.compress_ratio(layer) > 0) {
    DI_CHECK(!c.is_v41() || c.kv_source_of(layer) >= 0,
             "layer {} compresses but no KV source layer precedes it", layer);
    if (!c.is_v41())
      feed_v4(pass, d, layer, rows);
    else if (c.is_kv_source(layer))
      feed_v41_source(pass, d, layer, rows);
    sel = select_entries(pass, d, layer, rows);
  }
  const tensor window_idx = write_window(pass, d, layer, in.kv);
  const std::int64_t b = batch_size(d), heads = in.q.size(1), dim = in.q.size(2);
  const tensor ring = d.pool->ring_rows();
  cuda::attention_params p;
  p.q = in.q.data<float>();
  p.sinks = pass.weights.layers[std::size_t(layer)].attn.sinks.data<float>();
  p.tokens = int(b);
  p.heads = int(heads);
  p.dim = int(dim);
  p.softmax_scale = 1.0f / std::sqrt(float(c.head_dim));
  p.window = {ring.raw(), ring.size(0), true, pass.layout.window_format};
  p.window_idx = window_idx.data<std::int32_t>();
  p.window_k = int(window_idx.size(1));
  tensor arena;
  if (sel.stream >= 0 && sel.rows.size(1) > 0) {
    arena = d.pool->arena(sel.stream);
    p.extra = {arena.raw(), arena.size(0), true, pass.layout.streams[std::size_t(sel.stream)].format};
    p.extra_idx = sel.rows.data<std::int32_t>();
    p.extra_k = int(sel.rows.size(1));
  }
  if (cuda::get_ordered_gemm_splits()) {  // a sequence's split as if it ran alone: batch-invariant
    cuda::attention_params one = p;
    one.tokens = 1;
    p.num_splits = cuda::attention_splits(one);
  }
  return run_attention(p, pass.dev(), pass.attention_out);  // [seqs, H, hd]
}

#else

std::shared_ptr<decode_batch> make_decode_batch(const forward_pass&) {
  return nullptr;
}

tensor batched_attention_core(forward_pass& pass, int, const attention_inputs&,
                              const compressed_rows&) {
  DI_FAIL("batched decode on {} needs a build with the CUDA backend", to_string(pass.dev()));
}

#endif

}  // namespace di::detail
