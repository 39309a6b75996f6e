// CUDA graphs of a batched decode step's fixed-shape pieces. A decode step's shapes depend
// only on its row count except inside attention, whose per-sequence window/compressed work
// is host-shaped (entry counts grow with each sequence). So each block is cut into two
// pieces that are captured once per (layer, piece, padded row count) and replayed: the
// attention site (mHC mix, norm, q/kv projections, rotary) and the output + FFN site
// (inverse rotary, output projection, mHC expand, MoE, mHC expand); the per-sequence
// attention between them runs eagerly. A site piece is normally captured inside the piece
// before it (graphs_merge_sites), so a step launches the start and one graph per layer.
// Rows are padded to the next captured size; padding rows hold zeros (token 0, position 0)
// and are never read back.
#pragma once

#include "kernels/tensor.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace di::detail {

/// Computes a piece's outputs from its padded inputs (one eager warm-up call, one captured).
using piece_body = std::function<std::vector<tensor>(const std::vector<tensor>& padded)>;

/// Whether the attention piece also captures the compressed branch's row-wise projections
/// (compressed_project); DEEPINFER_GRAPH_COMPRESSED=0 runs them eagerly after the piece, as
/// before session 34 (for comparisons).
bool graphs_capture_compressed();
/// Whether the batched decode attention writes into the output piece's input_slot (no copy
/// before the piece). On by default since session 35 (test_forward_cuda passed with it on the
/// H200, plain and batched with graphs; v4-flash-L4 b64 4.99 against 5.03-5.05 ms, v41-flash-L4
/// b64 7.80-7.85 against 7.82); DEEPINFER_GRAPH_SLOTS=0 copies as before. (Session 34's first
/// version failed the batched-graphs test on the capture step -- the warm-up's in-place inverse
/// rotary changed the shared buffer before the launch read it; run() now keeps such inputs and
/// restores them before the launch.)
bool graphs_use_slots();
/// Whether a step's start -- the embedding expanded to the hc streams, the one-hot initial mix
/// and, when layer 0 is an Engram layer, its Engram -- is one captured piece (layer -1) instead
/// of eager launches (run.cpp's graphed_start). On by default (session 39 on the H200: the same
/// bits, v41-flash-L4 b1 1.52-1.55 against 1.54-1.56 ms eager, v4-flash-L4 b1 1.29 / 1.29-1.32,
/// b64 4.80-4.83 / 4.82-4.96); DEEPINFER_GRAPH_START=0 launches it eagerly.
/// set_graphs_capture_start sets it for graphs captured afterwards (tests compare both ways).
bool graphs_capture_start();
void set_graphs_capture_start(bool on);
/// Whether, with the captured start, a step's tokens, positions and layer 0's Engram hash ids
/// are staged in mapped host memory that the start piece reads by address, its first nodes
/// copying the tokens and positions to the device buffers (begin_step_staged) -- no copy
/// launched before the step's first graph (the H100 timeline of session 50 had the step's
/// first ~31 us spent on three such eager copies with the host between them). On by default
/// since session 51 (H100: its GPU test passed, the greedy text of v41-flash-L4 the same with
/// graphs on and off and the switch on and off; decode, 3 rounds, v41-flash-L4 b1 1.60-1.61
/// against 1.61 ms, b8 2.93-2.94 against 2.94 -- at most 0.01 ms of the 31 us, so the
/// copies' own cost was not most of them); DEEPINFER_GRAPH_STAGED=0 copies them eagerly as before
/// (the same values either way).
/// set_graphs_stage_inputs sets it for later steps (tests compare both ways).
bool graphs_stage_inputs();
void set_graphs_stage_inputs(bool on);
/// Steps begun staged so far, in this process (begin_step_staged returned true).
std::int64_t graphs_staged_steps();
/// Whether a layer's attention-site piece is captured at the end of the piece before it --
/// the step's start for layer 0, the previous layer's output + FFN piece (with the layer's
/// Engram, when its projection was computed ahead) for the others -- so that a step launches
/// one graph per layer plus the start instead of two: nothing eager runs between those
/// pieces, yet the device idled at each graph's first kernel (the session 50 H100 timeline:
/// 4-7 us before every piece, no programmatic launch across a graph's edge). The same ops on
/// the same values: the same bits. On by default; DEEPINFER_GRAPH_MERGE=0 captures the pieces
/// apart as before. set_graphs_merge_sites sets it for later steps (their pieces are captured
/// under ids of their own, so a switch never replays a piece captured the other way).
bool graphs_merge_sites();
void set_graphs_merge_sites(bool on);

class decode_graphs {
 public:
  /// `sizes`: the row counts graphs are captured for (ascending after construction).
  explicit decode_graphs(std::vector<int> sizes);
  ~decode_graphs();
  decode_graphs(const decode_graphs&) = delete;
  decode_graphs& operator=(const decode_graphs&) = delete;

  /// The captured size `rows` pads to, or 0 when it exceeds every size.
  std::int64_t padded_size(std::int64_t rows) const;
  /// Starts a step of `rows` (<= the largest size) real rows: copies its tokens and
  /// positions ([rows] i64 on the device) into the padded size's buffers.
  void begin_step(std::int64_t rows, const tensor& tokens, const tensor& positions);
  /// Starts a step as begin_step does, but writes its tokens and positions ([rows] i64 host
  /// tensors) into staging buffers of mapped host memory (the padding rows zero) and launches
  /// nothing: copy_step_inputs(), the first thing the captured start piece does, moves them
  /// into tokens() / positions(). False (nothing done) where the staging cannot be mapped:
  /// then use begin_step.
  bool begin_step_staged(std::int64_t rows, const tensor& tokens, const tensor& positions,
                         device dev);
  /// Whether this step began staged (begin_step_staged).
  bool step_staged() const;
  /// Copies a staged step's tokens and positions into tokens() / positions() on the current
  /// stream (captured with the start piece: the copies read the staging by address).
  void copy_step_inputs();
  /// A staged step's input kept under `name`: `host` ([rows, ...] on the host) written into
  /// mapped host memory of [padded, ...] (padding rows zero) that kernels read in place by
  /// address -- for a captured piece's input, with no copy launched before it.
  tensor staged_input(const std::string& name, const tensor& host);
  const tensor& tokens() const;     // [padded] i64
  const tensor& positions() const;  // [padded] i64
  /// Runs piece `piece` of `layer` on inputs [rows, ...] (copied into the piece's padded
  /// buffers), capturing it on first use. Returns its outputs' first `rows` rows: views
  /// valid until the piece runs again (the next step). If a capture fails, the step goes on
  /// with the eager warm-up's outputs and usable() turns false (failure() says why).
  std::vector<tensor> run(int layer, int piece, const std::vector<tensor>& inputs,
                          const piece_body& body);
  /// The first rows of the buffer that input `index` of piece `piece` of `layer` reads at
  /// this step's padded size ([padded, row...] of `type`, kept across steps; row: the shape
  /// after the first dimension): an eager producer writing there saves run() its copy. At
  /// capture, run() keeps a copy of such an input and restores it after the eager warm-up
  /// (which may change it in place) before the launch.
  tensor input_slot(int layer, int piece, int index, const tensor_shape& row, dtype type,
                    device dev);
  /// The device tensor kept under `name` for this step's padded size, made by
  /// `make(padded)` on first use (outside any capture): constants a captured piece reads by
  /// address, alive as long as the graphs.
  const tensor& constant(const std::string& name,
                         const std::function<tensor(std::int64_t padded)>& make);
  /// Graphs captured so far.
  std::int64_t captured() const;
  /// False once a capture failed: the model then runs its steps eagerly.
  bool usable() const;
  const std::string& failure() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace di::detail
