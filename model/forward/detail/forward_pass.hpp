// Internals shared by the files of the forward pass: the per-call context (all tokens of the
// batch stacked in rows, one entry per sequence) and the layer functions. Dense work runs on
// all rows at once (compressor and indexer projections included); attention, pooling and
// scoring run per sequence on its rows.
#pragma once

#include "kernels/ops.hpp"
#include "model/forward/detail/decode_graphs.hpp"
#include "model/forward/model.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace di::detail {

/// Decoded entries of one stream, kept for the layers that share it within a forward call.
struct decoded_stream {
  int stream = -1;
  std::int64_t entries = -1;
  tensor rows;  // [entries, dim] f32
};

/// One sequence within a forward call.
struct sequence_pass {
  sequence_state* state = nullptr;
  std::int64_t start = 0;   ///< position of its first new token
  std::int64_t count = 0;   ///< new tokens
  std::int64_t offset = 0;  ///< first row of the batch
  tensor positions;         // [count] i64
  // What V4.1 layers hand down to the later layers of their group (the reference's shared
  // attention runtime): compressed KV and keys of the current source, the last top-k.
  decoded_stream kv;
  decoded_stream keys;
  tensor topk;        // [count, k] i32 entries chosen by the last index source
  tensor candidates;  // [count, entries] u8 kept by the candidate source
};

struct decode_batch;

/// steady_clock seconds (forward_pass::entered, DEEPINFER_FORWARD_TIMING).
double host_seconds();

/// A layer's attention-site piece outputs (block.cpp's site_outputs) computed ahead, inside the
/// captured piece before it (the step's start, or the last layer's output piece), so that no
/// graph launch separates the two (detail/decode_graphs.hpp: graphs_merge_sites).
struct prepared_site {
  int layer = -1;               ///< the layer they are for (-1: none)
  std::vector<tensor> outputs;  ///< as the layer's own site piece would return them
  tensor engram_x;  ///< the layer's input with its Engram applied in the piece (else undefined)
};

struct forward_pass {
  const model_config& config;
  const model_weights& weights;
  const cache_layout& layout;
  const forward_options& options;
  const tensor& inv_freq_main;      // [rope_head_dim / 2]
  const tensor& inv_freq_compress;  // [rope_head_dim / 2]
  tensor tokens;                    // [rows] i64
  tensor positions;                 // [rows] i64
  std::vector<sequence_pass> seqs;
  /// Set for a decode step run through CUDA graphs (tokens/positions above stay the real
  /// rows; the graphs hold padded copies).
  decode_graphs* graphs = nullptr;
  /// True inside a captured piece (and its eager warm-up): nothing may be read back.
  bool in_graph = false;
  /// steady_clock seconds when the forward call began (DEEPINFER_FORWARD_TIMING's "prep").
  double entered = 0.0;
  /// Where the batched decode attention writes its output [rows, H, hd] when defined (a
  /// decode graph's input buffer: the piece after it then reads it without a copy).
  tensor attention_out;
  /// Set when the call is a decode step batched across its sequences (batched_decode.cpp).
  std::shared_ptr<decode_batch> batched;
  /// Whether this step's graph pieces merge each layer's attention site into the piece before
  /// it (graphs_merge_sites(), read once per step so that every piece of a step agrees).
  bool merge_sites = false;
  /// The next layer's attention-site outputs, computed at the end of the piece before it.
  prepared_site next_site;

  /// Where the weights (and every activation of the call) live.
  device dev() const { return weights.dev; }
  bool on_cuda() const { return weights.dev.kind == device_kind::cuda; }
  /// A host tensor moved to the model's device without waiting (returned as is on the CPU).
  tensor upload(const tensor& host) const;
  /// Row indices [n] i64 on the model's device (on the CPU a view of `rows`, which must
  /// outlive the use).
  tensor index(const std::vector<std::int64_t>& rows) const {
    return upload(tensor::view_of(rows.data(), {std::int64_t(rows.size())}, dtype::i64));
  }
  /// Activation-quantization block for a linear (0 = none).
  ops::linear_params act(const linear_weight& w) const {
    return {options.act_quant && w.quantized ? int(config.quant.block_k) : 0};
  }
  tensor linear(const tensor& x, const linear_weight& w) const {
    return ops::linear(x, w.w, act(w));
  }
  /// linear(x.x, w), from x's activation codes when they are w's quantization.
  tensor linear(const ops::quantized_rows& x, const linear_weight& w) const {
    return ops::linear(x, w.w, act(w));
  }
  /// linear(x, a) and linear(x, b) -- the same results -- with x's activation quantization
  /// done once when both use the same block (ops::linear_pair).
  std::pair<tensor, tensor> linear_pair(const tensor& x, const linear_weight& a,
                                        const linear_weight& b) const {
    return linear_pair(ops::quantized_rows{x}, a, b);  // no codes: ops::linear_pair on x
  }
  /// linear_pair(x.x, a, b), from x's activation codes when they are the pair's quantization.
  std::pair<tensor, tensor> linear_pair(const ops::quantized_rows& x, const linear_weight& a,
                                        const linear_weight& b) const {
    const ops::linear_params pa = act(a), pb = act(b);
    if (pa.act_quant_block != pb.act_quant_block) return {linear(x, a), linear(x, b)};
    return ops::linear_pair(x, a.w, b.w, pa);
  }
  /// Rows [s.offset, s.offset + s.count) of a batch tensor.
  static tensor rows_of(const tensor& t, const sequence_pass& s) {
    return t.slice(0, s.offset, s.offset + s.count);
  }
};

/// The next layer's Engram projection (engram_project), which reads the token ids only: a block
/// given one computes it on a side branch beside its per-sequence attention (eager, and
/// latency-bound: the projection's weight stream runs in its shadow) instead of the Engram
/// layer computing it alone in turn. The same kernels on the same inputs: the same bits.
struct engram_ahead {
  int layer = -1;   ///< the Engram layer the ids are for
  tensor hash_ids;  ///< [rows, columns] i64 on the device: that layer's
  tensor kv;        ///< set by block_forward: engram_project(pass, layer, hash_ids)
};

/// The pass a captured piece runs with: the graphs' padded tokens and positions, no
/// sequences (pieces never touch per-sequence state). `pass.graphs` must be set.
forward_pass padded_pass(const forward_pass& pass);

/// A layer's attention-site piece outputs from x [rows, hc, dim] and pre_mix [rows, hc] on a
/// padded pass (inside a captured piece): the mix's pre, post and comb, the queries' latent,
/// the queries, the new window rows, the normed input, then the compressed branch's row-wise
/// tensors (undefined where the layer has none, or all when graphs_capture_compressed() is
/// off: block.cpp then projects them eagerly).
std::vector<tensor> graphed_site_outputs(const forward_pass& padded, int layer, const tensor& x,
                                         const tensor& pre_mix);

/// One block: mHC around attention and MoE. x [rows, hc, dim]; pre_mix [rows, hc] is the
/// previous site's pre (V4.1) and is replaced by this block's FFN-site pre. `ahead` (or null):
/// the next layer's Engram projection, computed here.
tensor block_forward(forward_pass& pass, int layer, const tensor& x, tensor& pre_mix,
                     engram_ahead* ahead = nullptr);

/// Queries and the new window rows of every batch row (fixed-shape: graph-capturable).
struct attention_inputs {
  tensor q_residual;  // [rows, q_lora_rank]
  tensor q;           // [rows, H, hd] rotated
  tensor kv;          // [rows, hd] rotated, window-quantized
};
/// Work a caller adds to attention_project's branches: `beside` on the side branch after the
/// new window rows (it may read x, not the queries), `after_queries` on the caller's stream
/// after the queries, given their latent q_residual. Either may be empty.
struct attention_extras {
  std::function<void()> beside;
  std::function<void(const tensor& q_residual)> after_queries;
};
attention_inputs attention_project(const forward_pass& pass, int layer,
                                   const ops::quantized_rows& x,
                                   const attention_extras& extras = {});
struct compressed_rows;
/// Per sequence: window + compressed entries, cache updates, attention -> [rows, H, hd].
/// `rows`: compressed_project's work for the layer on the same rows (x = the normed input).
tensor attention_core(forward_pass& pass, int layer, const attention_inputs& in,
                      const compressed_rows& rows);
/// Inverse rotation (in place on o [rows, H, hd]) and the output projection -> [rows, dim].
tensor attention_output(const forward_pass& pass, int layer, tensor o);

/// A compressor's projections of every row of the call: kv [rows, width] and score [rows,
/// width] (with the position bias), or, at ratio 1, kv already normalised and no score.
struct compressor_rows {
  tensor kv, score;
};
/// Index queries [rows, index_heads, index_head_dim] (rotated, V4 Hadamard, FP4) and their
/// head weights [rows, index_heads].
struct index_query {
  tensor q, weights;
};
/// The row-wise work of a layer's compressed branch for all rows of the call at once (one
/// launch each instead of one per sequence); members the layer does not use stay undefined.
struct compressed_rows {
  compressor_rows main;   // the layer's compressor (V4.1: KV source layers only)
  compressor_rows index;  // V4: the indexer's compressor
  index_query query;      // layers that run an indexer
  // V4.1 KV source at ratio 1 (every token an entry at its own position): the entries as
  // stored, rotated [rows, head_dim], and for an index source their keys [rows, index_dim].
  tensor entry_kv, entry_keys;
};
compressed_rows compressed_project(const forward_pass& pass, int layer, const tensor& x,
                                   const tensor& q_residual);
/// compressed_project in two parts: what reads only the normed input x (the compressors'
/// projections, V4.1's ratio-1 entries, the index heads' weights) and what reads the query
/// latent (the index queries), so that they can run on different branches.
void compressed_project_rows(const forward_pass& pass, int layer, const tensor& x,
                             compressed_rows& out);
void compressed_project_queries(const forward_pass& pass, int layer, const tensor& q_residual,
                                compressed_rows& out);

/// V4.1 source entries: indexer keys derived from the pre-rope latent [n, head_dim] (index
/// sources only) and the latent itself, both rotated to the entries' positions [n].
struct v41_entries {
  tensor kv, keys;
};
v41_entries v41_source_entries(const forward_pass& pass, int layer, const tensor& latent,
                               const tensor& positions);

/// Batched decode (CUDA): when every sequence of the call adds one token and holds a slot of
/// its pool's arena, each layer's attention runs as a few launches over all sequences --
/// compressor pooling through the states in the arena, one scatter of the new window rows and
/// entries, one index-score and top-k launch, one attention launch reading the packed rings
/// and streams in place. Returns the call's batch state, or null when the call does not
/// qualify (forward_options::batched_decode off, CPU, multi-token rows, no arena slots, rows
/// of a cached prefix).
std::shared_ptr<decode_batch> make_decode_batch(const forward_pass& pass);
/// attention_core for a batched decode step: [seqs, H, hd].
tensor batched_attention_core(forward_pass& pass, int layer, const attention_inputs& in,
                              const compressed_rows& rows);

/// Feeds every sequence's rows of `rows` through the layer's compressors (if it owns any),
/// appending the entries that complete, then decodes the entries (and keys) the layer reads
/// for all sequences at once.
void compressed_feed(forward_pass& pass, int layer, const compressed_rows& rows);
/// The compressed entries and their selection for one sequence (after compressed_feed): the
/// decoded entries [entries, head_dim] and per-token entry indices [count, k] i32 (-1 unused).
struct compressed_attention {
  tensor kv;       // [entries, head_dim]
  tensor indices;  // [count, k] i32
};
compressed_attention compressed_forward(forward_pass& pass, int layer, sequence_pass& seq,
                                        const compressed_rows& rows);

/// Copies a contiguous host tensor to `dev` asynchronously on the current stream, staged in
/// pinned memory that stays valid until reset_uploads() (called at the start of every CUDA
/// forward call, after a sync).
tensor upload_async(const tensor& host, device dev);
void reset_uploads();
/// Waits for the device's queued work (no-op on the CPU).
void device_sync(const forward_pass& pass);

/// A side branch of a forward call. On CUDA (cuda::stream_fork), the ops enqueued between the
/// construction and end() run on a second stream beside what the caller enqueues after end(),
/// until join(); elsewhere -- the CPU, side streams off, a branch inside a branch -- they
/// simply run in place, in order. The branch may read the caller's tensors that outlive the
/// join; the caller reads the branch's results only after join(). The results are the same
/// bits either way (the same kernels on the same inputs).
class side_branch {
 public:
  explicit side_branch(const forward_pass& pass);
  ~side_branch();
  side_branch(const side_branch&) = delete;
  side_branch& operator=(const side_branch&) = delete;
  void end();   ///< the caller's own stream is current again
  void join();  ///< the caller's stream waits for the branch (ends it first)

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// Whether an attention site runs the compressed branch's row-wise projections (and V4.1's
/// mix) beside the queries (attention_site_forward): on by default; DEEPINFER_SITE_BRANCHES=0
/// runs them as before session 39 (V4.1's mix beside the whole projection, the compressed
/// projections after it). The same bits either way. set_site_branches (CUDA builds; tests
/// compare both ways) applies to forward calls and graphs captured afterwards.
bool site_branches();
void set_site_branches(bool on);

/// Asks the L2 cache for the first weights that layer's output piece reads -- wo_a, wo_b, the
/// shared expert's w1 / w3 / w2, in that order, in the layout decode reads them -- up to
/// l2_prefetch_bytes() (CUDA, a decode step inside a captured piece: called at the end of the
/// attention site, so that they stream in while the eager attention runs, which reads little).
/// A hint: no result changes. DEEPINFER_L2_PREFETCH_MB sets the budget (0: off).
void prefetch_output_weights(const forward_pass& pass, int layer);
std::size_t l2_prefetch_bytes();

/// side() on a side branch, main() beside it, then the join: {side's result, main's result}.
template <class Side, class Main>
auto beside(const forward_pass& pass, Side&& side, Main&& main) {
  side_branch branch(pass);
  auto on_side = side();
  branch.end();
  auto on_main = main();
  branch.join();
  return std::make_pair(std::move(on_side), std::move(on_main));
}

inline tensor forward_pass::upload(const tensor& host) const {
  return on_cuda() ? upload_async(host, dev()) : host;
}

#if defined(DEEPINFER_HAVE_CUDA)
}  // namespace di::detail
namespace di::cuda {
struct attention_params;
}
namespace di::detail {
/// Launches the attention on the current stream (its split workspace allocated on `dev`) into
/// `out` ([tokens, heads, dim] f32) when defined, else into a new tensor; returns the output.
tensor run_attention(cuda::attention_params& p, device dev, const tensor& out = tensor());
#endif

/// CUDA attention of q [count, H, hd] over two f32 pools: kv1 rows named by idx1 [count, k1]
/// then kv2 rows (undefined: none) named by idx2 [count, k2] (i32, -1 unused).
tensor two_pool_attention(const tensor& q, const tensor& sinks, const tensor& kv1,
                          const tensor& idx1, const tensor& kv2, const tensor& idx2, float scale);

/// The MoE sub-block on normed inputs x [rows, dim] -> [rows, dim]. With grouped experts the
/// shared expert runs on a side branch beside the routed ones, after `also_beside` (work of
/// the caller's that nothing here reads) when given.
tensor moe_forward(const forward_pass& pass, int layer, const ops::quantized_rows& x,
                   const std::function<void()>& also_beside = {});
/// Whether layer's MoE runs without reading anything back to the host (grouped experts).
bool moe_is_graphable(const forward_pass& pass, int layer);

/// Engram: the layer's n-gram rows looked up and projected, from its hash_ids [rows, columns] i64
/// -> kv [rows, (hc + 1) * dim] (one key per stream, then the shared value); engram_apply adds
/// the memory to the streams x [rows, hc, dim] through the gate.
tensor engram_project(const forward_pass& pass, int layer, const tensor& hash_ids);
tensor engram_apply(const forward_pass& pass, int layer, const tensor& x, const tensor& kv);

/// Embedding, the blocks (with Engram before its layers; hash_ids [rows, engram layers,
/// columns] or undefined), and the head at every request's logit rows.
std::vector<forward_output> run_model(forward_pass& pass, std::span<forward_request> batch,
                                      const tensor& hash_ids);

}  // namespace di::detail
