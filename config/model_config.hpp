// The typed model configuration of a DeepSeek-V4.1 (`deepseek_v41`, nested `text_config`) or
// DeepSeek-V4 (`deepseek_v4`, flat) checkpoint, parsed from its config.json and validated so
// that every later stage can trust it. Errors name the file and the offending key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace di {

enum class model_family { deepseek_v41, deepseek_v4 };

/// YaRN rotary scaling as stored in `rope_scaling` (applies to compressed layers).
struct yarn_config {
  bool enabled = false;
  double factor = 1.0;
  std::int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

/// `quantization_config`: FP8 block-scaled weights and FP4 routed experts.
struct quant_config {
  std::string method;           ///< "fp8" (empty when the checkpoint is unquantized)
  std::int64_t block_n = 0;     ///< weight_block_size[0] (output rows per scale)
  std::int64_t block_k = 0;     ///< weight_block_size[1] (input columns per scale)
  std::string scale_fmt;        ///< "ue8m0"
  std::string expert_dtype;     ///< "fp4" (MXFP4, one ue8m0 scale per 32 inputs) or "fp8"
  std::string activation_scheme;
};

/// Engram n-gram memory (V4.1 only; empty `layer_ids` when absent).
struct engram_config {
  std::vector<int> layer_ids;
  std::vector<std::int64_t> num_embeddings;  ///< rows of each layer's table
  int max_ngram_size = 0;
  std::int64_t vocab_size = 0;               ///< primes are drawn above this
  int n_heads = 0;
  int head_dim = 0;
  std::int64_t pad_token_id = 0;
  std::int64_t compressed_vocab_size = 0;
  /// (max_ngram_size - 1) * n_heads hash columns per position.
  int num_hash_columns() const { return (max_ngram_size - 1) * n_heads; }
};

/// Speculative-decoding drafter settings (V4.1 DSpark, V4 MTP).
struct drafter_config {
  int num_layers = 0;  ///< num_nextn_predict_layers
  int dspark_block_size = 0;
  std::int64_t dspark_noise_token_id = -1;
  std::vector<int> dspark_target_layer_ids;
  int dspark_markov_rank = 0;
  int dspark_n_routed_experts = 0;
  int dspark_num_experts_per_tok = 0;
};

struct model_config {
  model_family family = model_family::deepseek_v41;
  std::string model_type;  ///< "deepseek_v41" or "deepseek_v4"

  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 1;
  int head_dim = 0;
  int rope_head_dim = 0;
  int q_lora_rank = 0;
  int o_lora_rank = 0;
  int o_groups = 0;
  double rms_norm_eps = 1e-6;

  // MoE
  std::int64_t moe_intermediate_size = 0;
  int n_routed_experts = 0;
  int n_shared_experts = 0;
  int num_experts_per_tok = 0;
  std::string scoring_func;  ///< "sqrtsoftplus"
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  double swiglu_limit = 0.0;
  double gate_temp = 1.0;
  int num_hash_layers = 0;  ///< V4: the first layers route by token id (tid2eid)

  // attention geometry
  std::int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  double compress_rope_theta = 10000.0;
  yarn_config yarn;
  int sliding_window = 0;
  std::vector<int> compress_ratios;  ///< one per layer; 0 = sliding window only
  int index_n_heads = 0;
  int index_head_dim = 0;
  int index_topk = 0;
  // V4.1 shared compressed KV and indexer results
  std::vector<int> kv_source_layer_ids;
  std::vector<int> index_source_layer_ids;
  int candidate_source_layer_id = -1;
  int candidate_topk_blocks = 0;
  int candidate_block_size = 0;

  // manifold hyper-connections
  int hc_mult = 1;
  int hc_sinkhorn_iters = 0;
  double hc_eps = 1e-6;

  engram_config engram;
  drafter_config drafter;
  quant_config quant;

  std::int64_t bos_token_id = 0;
  std::int64_t eos_token_id = 1;
  std::int64_t pad_token_id = -1;
  std::int64_t image_token_id = -1;

  bool is_v41() const { return family == model_family::deepseek_v41; }
  /// The compress ratio of layer `l` (0 for sliding-window-only layers).
  int compress_ratio(int l) const { return compress_ratios[std::size_t(l)]; }
  bool is_kv_source(int l) const;
  bool is_index_source(int l) const;
  bool is_engram_layer(int l) const;
  /// The V4.1 layer whose compressed KV layer `l` reads (itself for a source); -1 if none.
  int kv_source_of(int l) const;
  /// V4: layer `l` routes by token id (tid2eid) instead of by score.
  bool is_hash_routed(int l) const { return !is_v41() && l < num_hash_layers; }
  /// V4: a ratio-4 layer compresses overlapping windows (two entries' worth of width).
  bool has_overlap(int l) const { return !is_v41() && compress_ratio(l) == 4; }
  /// Layer `l` has its own indexer (V4.1: index sources; V4: overlapping ratio-4 layers).
  bool has_indexer(int l) const;
};

/// Parses and validates a config.json document. `source` names it in error messages.
model_config parse_model_config(const std::string& json_text, const std::string& source);

/// Reads `<dir>/config.json` (or the file itself when `path` is a file).
model_config load_model_config(const std::string& path);

/// The prime bucket sizes of each Engram layer: [layer][(ngram-2)*n_heads + head], drawn
/// in order above engram.vocab_size and never reused (the official layout).
std::vector<std::vector<std::int64_t>> engram_bucket_primes(const engram_config& engram);

std::string to_string(model_family family);

}  // namespace di
