// The weights of a DeepSeek-V4.1 / V4 checkpoint in the layout the forward pass reads: every
// matrix (linears, experts, embedding, head, Engram tables) stays in its stored format as a
// view into the memory-mapped checkpoint -- FP8 and FP4 blocks are decoded exactly inside the
// GEMMs, BF16 widened as it is read -- so loading copies nothing large and resident memory is
// what the forward pass touches. Only small vectors (norms, sinks, biases, mHC) become fp32.
// Each linear is tagged with whether the reference quantizes its input activation.
#pragma once

#include "config/model_config.hpp"
#include "kernels/tensor.hpp"
#include "kernels/weight_matrix.hpp"

#include <filesystem>
#include <memory>
#include <vector>

namespace di {

class checkpoint;

/// A linear layer's weight [out, in] and whether the reference runs it as an FP8/FP4 GEMM
/// (then, with activation quantization on, its input is FP8-quantized per block first).
struct linear_weight {
  weight_matrix w;  // [out, in]
  bool quantized = false;
};

struct attention_weights {
  tensor sinks;        // [heads]
  linear_weight wq_a;  // [q_lora, dim]
  tensor q_norm;       // [q_lora]
  linear_weight wq_b;  // [heads * head_dim, q_lora]
  linear_weight wkv;   // [head_dim, dim]
  tensor kv_norm;      // [head_dim]
  weight_matrix wo_a;  // [o_groups * o_lora, heads * head_dim / o_groups] (no act quant)
  linear_weight wo_b;  // [dim, o_groups * o_lora]
};

/// A compressor: pools `ratio` tokens into one entry. V4 has `ape` and `wgate` always and
/// doubles the width at ratio 4 (overlap); V4.1 has no `ape` and no `wgate` at ratio 1.
struct compressor_weights {
  tensor ape;           // [ratio, width] or undefined
  weight_matrix wkv;    // [width, dim]
  weight_matrix wgate;  // [width, dim] or undefined
  tensor norm;          // [entry_dim]
};

struct indexer_weights {
  linear_weight wq_b;             // [index_heads * index_head_dim, q_lora]
  weight_matrix weights_proj;     // [index_heads, dim]
  weight_matrix wk;               // V4.1 key owners: [index_head_dim, head_dim]
  tensor k_norm;                  // V4.1 key owners: [index_head_dim]
  compressor_weights compressor;  // V4: the indexer's own compressor
};

struct expert_weights {
  linear_weight w1;  // [inter, dim]
  linear_weight w2;  // [dim, inter]
  linear_weight w3;  // [inter, dim]
};

struct moe_weights {
  weight_matrix gate;  // [experts, dim]
  tensor bias;         // [experts] (score-routed layers)
  tensor tid2eid;      // [vocab, top_k] i32 (V4 hash-routed layers)
  /// The most times one token's routes name the same expert: 1 unless a hash-routed layer's
  /// tid2eid repeats an expert in a row (its weight then counts twice, as the reference sums
  /// it). Bounds an expert's rows per step: at most this many per token.
  int route_repeats = 1;
  std::vector<expert_weights> experts;
  expert_weights shared;
  /// CUDA weights in their stored format: every expert's w1/w2/w3 stacked into one
  /// [experts * out, in] matrix for the grouped expert GEMM (`experts` is then empty).
  expert_weights stacked;
};

/// The most times any row of a [vocab, top_k] i32 expert table names one expert (1 when every
/// row's experts are distinct; 0 for an empty table).
int max_route_repeats(const tensor& tid2eid);

struct hc_site_weights {
  tensor fn;     // [(2 + hc) * hc, hc * dim] (head: [hc, hc * dim])
  tensor base;   // [(2 + hc) * hc] (head: [hc])
  tensor scale;  // [3] (head: [1])
};

/// An Engram layer: the FP8 table stays in the checkpoint mapping.
struct engram_weights {
  tensor table_codes;   // [rows, head_dim] u8 (e4m3), a view into the checkpoint
  tensor table_scales;  // [rows, head_dim / 32] u8 (e8m0), a view into the checkpoint
  linear_weight wkv;    // [(hc + 1) * dim, hash_columns * head_dim]
  tensor q_weight;      // [hc, dim]
  tensor k_weight;      // [hc, dim]
  tensor qk_weight;     // [hc, dim] q_weight * k_weight (computed at load)
};

struct layer_weights {
  tensor attn_norm;  // [dim]
  tensor ffn_norm;   // [dim]
  attention_weights attn;
  compressor_weights compressor;  // layers that own a compressor
  indexer_weights indexer;        // layers with an indexer
  moe_weights moe;
  hc_site_weights hc_attn;
  hc_site_weights hc_ffn;
  engram_weights engram;  // Engram layers
};

struct model_weights {
  tensor embed;             // [vocab, dim] bf16 (or f32), a view into the checkpoint
  tensor norm;              // [dim]
  weight_matrix head;       // [vocab, dim]
  hc_site_weights hc_head;  // V4 only
  std::vector<layer_weights> layers;
  std::shared_ptr<const checkpoint> source;  // keeps the mapping every view points into alive
  device dev = cpu_device;                   // where every tensor lives
  /// The indexer's weights_proj rows already carry its 1/sqrt(dim * heads) score scale
  /// (CUDA weights: folded in at upload instead of scaling every step's output).
  bool index_scale_folded = false;
};

/// Loads every tensor the forward pass needs from `ckpt` (names and shapes as
/// model/weight_spec.hpp lists them); throws di::error naming a missing or malformed tensor.
model_weights load_model_weights(std::shared_ptr<const checkpoint> ckpt,
                                 const model_config& config);

}  // namespace di
