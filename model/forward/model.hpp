// The DeepSeek-V4.1 (`deepseek_v41`) and V4 (`deepseek_v4`) text forward pass over the op
// interface, with incremental per-sequence state: a batch of (state, new tokens, positions)
// runs in one call, prefill in chunks of any size and one-token decode steps compute the
// same as one pass over the whole sequence.
#pragma once

#include "config/model_config.hpp"
#include "kernels/tensor.hpp"
#include "model/engram/hasher.hpp"
#include "model/forward/cache_layout.hpp"
#include "model/forward/device_weights.hpp"
#include "model/forward/sequence_state.hpp"
#include "model/forward/weights.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace di {

struct forward_options {
  /// Variant A (default, DeepSeek's official numerics): every GEMM with FP8/FP4 weights first
  /// FP8-quantizes its input per block of quant.block_k. Variant B (false) skips that; both
  /// keep the model's KV-cache and indexer quantization.
  bool act_quant = true;
  /// CUDA only: one-token-per-sequence decode steps (no hidden-state capture) of at most
  /// the largest of graph_batch_sizes sequences replay each block's fixed-shape pieces from
  /// CUDA graphs, the batch padded to the next size (captured on first use); attention per
  /// sequence stays eager. Needs the grouped MoE path (stored weights, act_quant); models
  /// without it run eagerly.
  bool cuda_graphs = false;
  /// CUDA only: a decode step (one new token per sequence, every state in its pool's slot
  /// arena, see kv_block_pool) runs each layer's attention as a few launches over all
  /// sequences instead of a dozen per sequence. Off: the per-sequence path (the reference).
  bool batched_decode = true;
  std::vector<int> graph_batch_sizes = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256};
  /// CUDA only: forward() copies the logits to host memory before it returns (true), or
  /// returns them on the device without waiting for the GPU (false: a caller that samples on
  /// the device, or a benchmark timing the forward as transformers' model() call is timed;
  /// synchronize() or reading them waits). Captured hidden states always come to the host.
  bool logits_to_host = true;

  bool operator==(const forward_options&) const = default;
};

namespace detail {
class decode_graphs;
}

/// One sequence's part of a batched forward.
struct forward_request {
  sequence_state* state = nullptr;
  std::span<const std::int64_t> tokens;     ///< new token ids
  std::span<const std::int64_t> positions;  ///< state->num_tokens(), +1, ... (one per token)
  std::vector<std::int64_t> logit_rows;     ///< indices into `tokens` whose logits to return
  /// [tokens, engram layers, columns] i64 hash row ids; undefined: the model's hasher computes
  /// them (from the state's engram history, which the hasher advances either way).
  tensor engram_hash_ids;
  bool capture_hidden = false;  ///< also return block outputs and final norm at logit_rows
};

struct forward_output {
  tensor logits;      // [logit_rows, vocab] f32
  tensor hidden;      // [logit_rows, layers, hc, dim] f32 (capture_hidden)
  tensor final_norm;  // [logit_rows, dim] f32 (capture_hidden)
};

class deepseek_model {
 public:
  deepseek_model(model_config config, model_weights weights, forward_options options = {});
  /// Opens the checkpoint folder (config.json + safetensors) and loads every weight.
  static std::unique_ptr<deepseek_model> load(const std::filesystem::path& dir,
                                              forward_options options = {});

  const model_config& config() const { return config_; }
  /// Where the weights live; sequence states must live there too.
  device dev() const { return weights_.dev; }
  /// Moves the weights (and rope tables) to `dev`, a CUDA device, in `format`: forward()
  /// then runs on the CUDA twins of the ops and takes states of a pool on `dev`.
  void to_device(device dev, device_weight_format format = device_weight_format::stored);
  const cache_layout& layout() const { return layout_; }
  const forward_options& options() const { return options_; }
  /// Replaces the options (dropping any captured decode graphs unless only logits_to_host
  /// changed).
  void set_options(const forward_options& options);
  /// Decode-graph pieces captured so far (0 with graphs off).
  std::int64_t captured_graphs() const;
  /// Why a decode-graph capture failed (steps then run eagerly); empty when none did.
  std::string graph_failure() const;
  /// Engram models hash each sequence's tokens with it (model/engram); without one every
  /// request must carry its engram_hash_ids.
  void set_engram_hasher(std::shared_ptr<const engram_hasher> hasher) {
    hasher_ = std::move(hasher);
  }
  /// The attached Engram hasher, or null.
  const engram_hasher* hasher() const { return hasher_.get(); }

  /// Runs every request's new tokens through the model, advancing each state. Invalid input
  /// (token ids outside the vocabulary, positions that do not continue the state or exceed
  /// max_position_embeddings or the state's capacity, a full block pool or block tables that
  /// do not cover the new entries) throws di::error before any state changes. Rows below a
  /// state's num_cached_tokens() rebuild its slot without writing stream entries.
  std::vector<forward_output> forward(std::span<forward_request> batch) const;
  /// Waits until the device has finished everything forward() enqueued (nothing on the CPU).
  void synchronize() const;

 private:
  model_config config_;
  model_weights weights_;
  forward_options options_;
  cache_layout layout_;
  tensor inv_freq_main_;      // [rope_head_dim / 2]
  tensor inv_freq_compress_;  // [rope_head_dim / 2]
  std::shared_ptr<const engram_hasher> hasher_;
  /// Captured decode graphs (options_.cuda_graphs on a CUDA model); forward() is not
  /// reentrant on one model (one executor thread drives it).
  mutable std::shared_ptr<detail::decode_graphs> graphs_;
};

}  // namespace di
