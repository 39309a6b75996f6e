// Presets: the released configs of DeepSeek-V4.1-Flash (deepseek_v41) and DeepSeek-V4-Flash
// (deepseek_v4) written out key by key in the official layout, then reduced per preset.
// Engram row counts are derived with the official prime-bucket rule, never typed in.
#include "model/make_model/presets.hpp"

#include "common/error.hpp"
#include "config/model_config.hpp"

#include <fmt/format.h>

namespace di {

namespace {

using ordered_json = nlohmann::ordered_json;

void add_v41_sparse_attention_and_moe(ordered_json& t);
void add_v41_engram_and_drafter(ordered_json& t);

/// text_config of DeepSeek-V4.1-Flash as released, without the DSpark drafter (no weights
/// are generated for it) and with the bundled tokenizer's Engram vocabulary. Keys in the
/// official order.
ordered_json v41_flash_text_config() {
  ordered_json t;
  t["model_type"] = "deepseek_v41_text";
  t["vocab_size"] = 129280;
  t["hidden_size"] = 5120;
  t["moe_intermediate_size"] = 2304;
  t["num_hidden_layers"] = 40;
  t["num_attention_heads"] = 64;
  t["num_key_value_heads"] = 1;
  t["head_dim"] = 512;
  t["qk_rope_head_dim"] = 64;
  t["q_lora_rank"] = 1280;
  t["o_lora_rank"] = 1024;
  t["o_groups"] = 8;
  t["hidden_act"] = "silu";
  t["swiglu_limit"] = 10.0;
  t["rms_norm_eps"] = 1e-20;
  t["attention_bias"] = false;
  t["max_position_embeddings"] = 1048576;
  t["rope_theta"] = 10000;
  t["rope_scaling"] = {{"rope_type", "yarn"},
                       {"factor", 16},
                       {"beta_fast", 32},
                       {"beta_slow", 1},
                       {"original_max_position_embeddings", 65536}};
  add_v41_sparse_attention_and_moe(t);
  add_v41_engram_and_drafter(t);
  return t;
}

/// MoE, compressed attention (sources, indexer, candidates) and mHC keys of V4.1-Flash.
void add_v41_sparse_attention_and_moe(ordered_json& t) {
  t["n_routed_experts"] = 384;
  t["n_shared_experts"] = 1;
  t["num_experts_per_tok"] = 6;
  t["scoring_func"] = "sqrtsoftplus";
  t["topk_method"] = "noaux_tc";
  t["norm_topk_prob"] = true;
  t["routed_scaling_factor"] = 1.5;
  t["sliding_window"] = 128;
  std::vector<int> ratios = {0, 0};
  ratios.insert(ratios.end(), 18, 2);
  ratios.insert(ratios.end(), 20, 1);
  t["compress_ratios"] = ratios;
  t["compress_rope_theta"] = 160000;
  t["kv_source_layer_ids"] = {2, 8, 14, 20};
  t["index_source_layer_ids"] = {2, 8, 14, 20, 24, 28, 32, 36};
  t["index_n_heads"] = 32;
  t["index_head_dim"] = 128;
  t["index_topk"] = 512;
  t["candidate_source_layer_id"] = 20;
  t["candidate_topk_blocks"] = 2048;
  t["candidate_block_size"] = 8;
  t["hc_mult"] = 4;
  t["hc_sinkhorn_iters"] = 20;
  t["hc_eps"] = 1e-6;
}

/// Engram and DSpark keys of V4.1-Flash (no drafter layers are generated).
void add_v41_engram_and_drafter(ordered_json& t) {
  t["engram_layer_ids"] = {1, 14};
  t["engram_num_embeddings"] = {384006168, 384016682};
  t["engram_max_ngram_size"] = 4;
  t["engram_vocab_size"] = 16000000;
  t["engram_n_heads"] = 8;
  t["engram_head_dim"] = 256;
  t["engram_pad_token_id"] = 2;
  t["engram_compressed_vocab_size"] = bundled_tokenizer_engram_vocab;
  t["num_nextn_predict_layers"] = 0;
  t["dspark_block_size"] = 0;
  t["dspark_noise_token_id"] = 128799;
  t["dspark_target_layer_ids"] = ordered_json::array();
  t["dspark_markov_rank"] = 256;
  t["dspark_n_routed_experts"] = 128;
  t["dspark_num_experts_per_tok"] = 3;
}

/// The whole V4.1 config.json around `text` (no vision tower weights: 0 vision layers).
ordered_json v41_config(ordered_json text) {
  ordered_json c;
  c["architectures"] = {"DeepseekV41ForCausalLM"};
  c["model_type"] = "deepseek_v41";
  c["dtype"] = "bfloat16";
  c["bos_token_id"] = 0;
  c["eos_token_id"] = 1;
  c["pad_token_id"] = 2;
  c["image_token_id"] = 129264;
  c["quantization_config"] = {{"quant_method", "fp8"},
                              {"activation_scheme", "dynamic"},
                              {"weight_block_size", {32, 32}},
                              {"scale_fmt", "ue8m0"},
                              {"expert_dtype", "fp4"}};
  c["text_config"] = std::move(text);
  c["vision_config"] = {{"model_type", "deepseek_v41_vision"},
                        {"num_hidden_layers", 0},
                        {"hidden_size", 1024},
                        {"num_attention_heads", 16},
                        {"intermediate_size", 2816},
                        {"patch_size", 14},
                        {"rope_theta", 10000},
                        {"downsample_ratio", 3},
                        {"max_image_tokens", 1024},
                        {"min_pixels", 295936},
                        {"max_wh_ratio", nullptr}};
  return c;
}

void add_v4_rope_and_routing(ordered_json& c);

/// DeepSeek-V4-Flash's config.json as released, without the MTP layer. Keys in the official
/// order.
ordered_json v4_flash_config() {
  ordered_json c;
  c["architectures"] = {"DeepseekV4ForCausalLM"};
  c["attention_bias"] = false;
  c["attention_dropout"] = 0.0;
  c["bos_token_id"] = 0;
  c["eos_token_id"] = 1;
  c["expert_dtype"] = "fp4";
  c["hc_eps"] = 1e-6;
  c["hc_mult"] = 4;
  c["hc_sinkhorn_iters"] = 20;
  c["head_dim"] = 512;
  c["hidden_act"] = "silu";
  c["hidden_size"] = 4096;
  c["index_head_dim"] = 128;
  c["index_n_heads"] = 64;
  c["index_topk"] = 512;
  c["initializer_range"] = 0.02;
  c["max_position_embeddings"] = 1048576;
  c["model_type"] = "deepseek_v4";
  c["moe_intermediate_size"] = 2048;
  c["n_routed_experts"] = 256;
  c["n_shared_experts"] = 1;
  c["norm_topk_prob"] = true;
  c["num_attention_heads"] = 64;
  c["num_experts_per_tok"] = 6;
  c["num_hidden_layers"] = 43;
  c["num_hash_layers"] = 3;
  c["num_key_value_heads"] = 1;
  c["num_nextn_predict_layers"] = 0;
  c["o_groups"] = 8;
  c["o_lora_rank"] = 1024;
  c["q_lora_rank"] = 1024;
  c["qk_rope_head_dim"] = 64;
  c["quantization_config"] = {{"activation_scheme", "dynamic"},
                              {"fmt", "e4m3"},
                              {"quant_method", "fp8"},
                              {"scale_fmt", "ue8m0"},
                              {"weight_block_size", {128, 128}}};
  add_v4_rope_and_routing(c);
  return c;
}

/// The keys of V4-Flash's config.json from rms_norm_eps to the end.
void add_v4_rope_and_routing(ordered_json& c) {
  c["rms_norm_eps"] = 1e-6;
  c["rope_scaling"] = {{"beta_fast", 32},
                       {"beta_slow", 1},
                       {"factor", 16},
                       {"original_max_position_embeddings", 65536},
                       {"type", "yarn"}};
  c["rope_theta"] = 10000;
  c["routed_scaling_factor"] = 1.5;
  c["scoring_func"] = "sqrtsoftplus";
  c["sliding_window"] = 128;
  c["swiglu_limit"] = 10.0;
  c["tie_word_embeddings"] = false;
  c["topk_method"] = "noaux_tc";
  c["torch_dtype"] = "bfloat16";
  c["transformers_version"] = "4.57.1";
  c["use_cache"] = true;
  c["vocab_size"] = 129280;
  c["compress_rope_theta"] = 160000;
  std::vector<int> ratios = {0, 0};
  for (int i = 0; i < 20; ++i) ratios.insert(ratios.end(), {4, 128});
  ratios.push_back(4);
  c["compress_ratios"] = ratios;
}

/// Sets engram_num_embeddings from the other Engram keys (sum of each layer's primes).
void derive_engram_rows(ordered_json& text) {
  engram_config e;
  e.layer_ids = text["engram_layer_ids"].get<std::vector<int>>();
  e.max_ngram_size = text["engram_max_ngram_size"].get<int>();
  e.vocab_size = text["engram_vocab_size"].get<std::int64_t>();
  e.n_heads = text["engram_n_heads"].get<int>();
  std::vector<std::int64_t> rows;
  for (const auto& primes : engram_bucket_primes(e)) {
    std::int64_t sum = 0;
    for (auto p : primes) sum += p;
    rows.push_back(sum);
  }
  text["engram_num_embeddings"] = rows;
}

/// Attention, indexer and MoE widths shared by the two tiny presets.
void set_tiny_widths(ordered_json& t) {
  t["hidden_size"] = 128;
  t["num_attention_heads"] = 8;
  t["head_dim"] = 128;
  t["q_lora_rank"] = 128;
  t["o_lora_rank"] = 64;
  t["o_groups"] = 4;
  t["moe_intermediate_size"] = 128;
  t["n_routed_experts"] = 16;
  t["num_experts_per_tok"] = 4;
  t["sliding_window"] = 32;
  t["index_n_heads"] = 8;
  t["index_head_dim"] = 128;
  t["index_topk"] = 32;
}

model_preset tiny_v41() {
  ordered_json t = v41_flash_text_config();
  set_tiny_widths(t);
  t["num_hidden_layers"] = 10;
  t["compress_ratios"] = {0, 0, 2, 2, 2, 2, 1, 1, 1, 1};
  t["kv_source_layer_ids"] = {2, 4, 6};
  t["index_source_layer_ids"] = {2, 4, 6, 8};
  t["candidate_source_layer_id"] = 6;
  t["candidate_topk_blocks"] = 8;
  t["engram_layer_ids"] = {1, 4};
  t["engram_vocab_size"] = 4096;
  t["engram_head_dim"] = 32;
  derive_engram_rows(t);
  return {"tiny-v41", "deepseek_v41, hidden 128, 10 layers, every V4.1 feature; CPU demo",
          "DeepSeek-V4.1 in miniature for the CPU: hidden 128, 10 layers, 8 heads x 128 (rope "
          "64), q_lora 128, o_lora 64 x 4 groups, window 32, 16 routed experts (top-4, inter "
          "128) + 1 shared, 4 mHC streams, the real 129280-token vocabulary. Layers 0-1 "
          "sliding-window only; 2-5 ratio 2 (KV sources 2 and 4, the others reuse them); 6-9 "
          "ratio 1 (KV source 6, also the candidate source: top-8 blocks of 8; index sources "
          "2, 4, 6 and 8, layer 8 re-scoring only inside the candidate blocks); Engram on "
          "layers 1 and 4 (2/3/4-grams x 8 heads x 32, engram_vocab_size 4096 -> ~100k rows "
          "per table).",
          v41_config(std::move(t))};
}

model_preset tiny_v4() {
  ordered_json c = v4_flash_config();
  set_tiny_widths(c);
  c["num_hidden_layers"] = 7;
  c["compress_ratios"] = {0, 0, 4, 128, 4, 128, 4};
  c["num_hash_layers"] = 3;
  return {"tiny-v4", "deepseek_v4, hidden 128, 7 layers, every V4 feature; CPU demo",
          "DeepSeek-V4 in miniature for the CPU: hidden 128, 7 layers, 8 heads x 128 (rope 64), "
          "q_lora 128, o_lora 64 x 4 groups, window 32, 16 routed experts (top-4, inter 128) + "
          "1 shared, 4 mHC streams with the V4 head mix, the real 129280-token vocabulary. "
          "Compress ratios [0, 0, 4, 128, 4, 128, 4] as in the released model's first layers: "
          "two sliding-window layers, ratio-4 overlapping compressors with an indexer (top-32), "
          "ratio-128 compressors attending every entry; layers 0-2 hash-routed (tid2eid), the "
          "rest score-routed.",
          std::move(c)};
}

model_preset v41_flash_l4() {
  ordered_json t = v41_flash_text_config();
  t["num_hidden_layers"] = 4;
  t["compress_ratios"] = {0, 2, 2, 1};
  t["kv_source_layer_ids"] = {1, 3};
  t["index_source_layer_ids"] = {1, 3};
  t["candidate_source_layer_id"] = 3;
  t["engram_layer_ids"] = {0, 1};
  t["engram_vocab_size"] = 262144;
  derive_engram_rows(t);
  return {"v41-flash-L4", "DeepSeek-V4.1-Flash widths, 4 layers (~36 GB); GPU benchmarks",
          "DeepSeek-V4.1-Flash at full width with 4 of its 40 layers, for single-GPU "
          "benchmarks: hidden 5120, 64 heads x 512 (rope 64), q_lora 1280, o_lora 1024 x 8 "
          "groups, window 128, 384 routed experts (top-6, inter 2304) + 1 shared, indexer 32 x "
          "128 top-512, candidates 2048 blocks of 8. Layer 0 sliding-window only + Engram (as "
          "real layer 1); layer 1 ratio 2, KV/index source + Engram (as real layer 14); layer 2 "
          "ratio 2 reusing layer 1 (like most encoder layers); layer 3 ratio 1, KV/index and "
          "candidate source (as real layer 20). Engram tables are shrunk: engram_vocab_size "
          "262144 instead of 16,000,000 gives ~6.3M rows (~1.7 GB) per table instead of "
          "384M rows (~101 GB); hashing and table layout are otherwise the real ones.",
          v41_config(std::move(t))};
}

model_preset v4_flash_l4() {
  ordered_json c = v4_flash_config();
  c["num_hidden_layers"] = 4;
  c["compress_ratios"] = {0, 4, 128, 4};
  c["num_hash_layers"] = 2;
  return {"v4-flash-L4", "DeepSeek-V4-Flash widths, 4 layers (~16 GB); GPU benchmarks",
          "DeepSeek-V4-Flash at full width with 4 of its 43 layers, for single-GPU benchmarks: "
          "hidden 4096, 64 heads x 512 (rope 64), q_lora 1024, o_lora 1024 x 8 groups, window "
          "128, 256 routed experts (top-6, inter 2048) + 1 shared, indexer 64 x 128 top-512. "
          "Compress ratios [0, 4, 128, 4]: a sliding-window layer, ratio-4 overlapping "
          "compressors with indexers, a ratio-128 compressor; layers 0-1 hash-routed "
          "(tid2eid), 2-3 score-routed.",
          std::move(c)};
}

}  // namespace

const std::vector<model_preset>& model_presets() {
  static const std::vector<model_preset> presets = {tiny_v41(), tiny_v4(), v41_flash_l4(),
                                                    v4_flash_l4()};
  return presets;
}

const model_preset& find_model_preset(std::string_view name) {
  std::string names;
  for (const auto& p : model_presets()) {
    if (p.name == name) return p;
    names += names.empty() ? p.name : ", " + p.name;
  }
  DI_FAIL("unknown preset '{}' (available: {})", name, names);
}

}  // namespace di
