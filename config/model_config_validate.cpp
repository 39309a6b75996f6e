// Cross-field validation of a parsed model_config: per-layer list lengths, source-layer
// topology of V4.1's shared compressed KV / indexer, Engram bucket layout, and geometry
// that later stages divide by. Every message names the file and the key.
#include "common/error.hpp"
#include "config/model_config.hpp"

#include <algorithm>
#include <set>

namespace di {

namespace {

bool is_prime(std::int64_t n) {
  if (n < 2) return false;
  if (n % 2 == 0) return n == 2;
  if (n % 3 == 0) return n == 3;
  for (std::int64_t i = 5; i * i <= n; i += 6)
    if (n % i == 0 || n % (i + 2) == 0) return false;
  return true;
}

void check_layer_list(const std::vector<int>& ids, const model_config& c, const std::string& src,
                      const char* key) {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    DI_CHECK(ids[i] >= 0 && ids[i] < c.num_layers, "{}: key '{}': layer id {} out of range [0, {})",
             src, key, ids[i], c.num_layers);
    DI_CHECK(i == 0 || ids[i] > ids[i - 1], "{}: key '{}': layer ids must be strictly increasing",
             src, key);
  }
}

void validate_geometry(const model_config& c, const std::string& src) {
  // Where the text model's keys are: under text_config in V4.1 (the reader's errors say so too).
  const char* t = c.is_v41() ? "text_config." : "";
  std::size_t n = c.compress_ratios.size();
  std::size_t layers = std::size_t(c.num_layers);
  DI_CHECK(n == layers || n == layers + std::size_t(c.drafter.num_layers),
           "{}: key '{}compress_ratios': has {} entries but num_hidden_layers is {}{}", src, t, n,
           layers,
           c.drafter.num_layers ? fmt::format(" (+{} drafter layers)", c.drafter.num_layers) : "");
  for (std::size_t l = 0; l < n; ++l)
    DI_CHECK(c.compress_ratios[l] >= 0, "{}: key '{}compress_ratios': entry {} is negative ({})",
             src, t, l, c.compress_ratios[l]);
  DI_CHECK(c.rope_head_dim % 2 == 0 && c.rope_head_dim < c.head_dim,
           "{}: key '{}qk_rope_head_dim': must be even and smaller than head_dim ({}), got {}", src,
           t, c.head_dim, c.rope_head_dim);
  DI_CHECK((std::int64_t(c.num_heads) * c.head_dim) % c.o_groups == 0,
           "{}: key '{}o_groups': num_attention_heads*head_dim ({}) is not divisible by {}", src, t,
           c.num_heads * c.head_dim, c.o_groups);
  DI_CHECK(c.num_kv_heads == 1,
           "{}: key '{}num_key_value_heads': DeepSeek-V4 uses one shared KV "
           "head, got {}",
           src, t, c.num_kv_heads);
  DI_CHECK(c.num_experts_per_tok <= c.n_routed_experts,
           "{}: key '{}num_experts_per_tok': {} exceeds n_routed_experts ({})", src, t,
           c.num_experts_per_tok, c.n_routed_experts);
  DI_CHECK(c.rms_norm_eps >= 0, "{}: key '{}rms_norm_eps': must not be negative", src, t);
  DI_CHECK(c.bos_token_id >= 0 && c.bos_token_id < c.vocab_size,
           "{}: key 'bos_token_id': {} outside the vocabulary [0, {})", src, c.bos_token_id, c.vocab_size);
  DI_CHECK(c.eos_token_id >= 0 && c.eos_token_id < c.vocab_size,
           "{}: key 'eos_token_id': {} outside the vocabulary [0, {})", src, c.eos_token_id, c.vocab_size);
  // -1 (or absent): none.
  DI_CHECK(c.pad_token_id >= -1 && c.pad_token_id < c.vocab_size,
           "{}: key 'pad_token_id': {} outside the vocabulary [0, {}) (-1: none)", src,
           c.pad_token_id, c.vocab_size);
  DI_CHECK(c.image_token_id >= -1 && c.image_token_id < c.vocab_size,
           "{}: key 'image_token_id': {} outside the vocabulary [0, {}) (-1: none)", src,
           c.image_token_id, c.vocab_size);
  if (c.quant.expert_dtype == "fp4") {
    DI_CHECK(c.hidden_size % 2 == 0 && c.moe_intermediate_size % 2 == 0,
             "{}: FP4 experts pack two values per byte: hidden_size ({}) and "
             "moe_intermediate_size ({}) must be even", src, c.hidden_size, c.moe_intermediate_size);
  }
}

void validate_v41_sources(const model_config& c, const std::string& src) {
  check_layer_list(c.kv_source_layer_ids, c, src, "text_config.kv_source_layer_ids");
  check_layer_list(c.index_source_layer_ids, c, src, "text_config.index_source_layer_ids");
  for (int s : c.kv_source_layer_ids) {
    DI_CHECK(c.compress_ratio(s) > 0, "{}: key 'text_config.kv_source_layer_ids': layer {} has "
             "compress ratio 0 and cannot own a compressor", src, s);
    DI_CHECK(c.is_index_source(s), "{}: key 'text_config.index_source_layer_ids': KV source layer "
             "{} must also be an index source (it owns the group's indexer keys)", src, s);
  }
  for (int s : c.index_source_layer_ids)
    DI_CHECK(c.compress_ratio(s) > 0, "{}: key 'text_config.index_source_layer_ids': layer {} has "
             "compress ratio 0", src, s);
  for (int l = 0; l < c.num_layers; ++l) {
    if (c.compress_ratio(l) == 0) continue;
    int kv = c.kv_source_of(l);
    DI_CHECK(kv >= 0, "{}: key 'text_config.kv_source_layer_ids': compressed layer {} has no KV "
             "source layer at or before it", src, l);
    DI_CHECK(c.compress_ratio(kv) == c.compress_ratio(l), "{}: key 'text_config.compress_ratios': "
             "layer {} (ratio {}) reads the compressed KV of layer {} (ratio {})", src, l,
             c.compress_ratio(l), kv, c.compress_ratio(kv));
    int index = -1;
    for (int s : c.index_source_layer_ids)
      if (s <= l) index = s;
    DI_CHECK(index >= 0 && c.kv_source_of(index) == kv, "{}: key 'text_config.index_source_layer_ids':"
             " compressed layer {} has no index source in its KV group (source layer {})", src, l, kv);
  }
  if (c.candidate_source_layer_id >= 0) {
    DI_CHECK(c.is_index_source(c.candidate_source_layer_id), "{}: key "
             "'text_config.candidate_source_layer_id': layer {} is not an index source", src,
             c.candidate_source_layer_id);
    DI_CHECK(c.candidate_topk_blocks > 0 && c.candidate_block_size > 0, "{}: keys "
             "'text_config.candidate_topk_blocks'/'candidate_block_size' must be positive when a "
             "candidate source layer is set", src);
  }
}

constexpr std::int64_t k_max_engram_columns = 1024;

void validate_engram(const model_config& c, const std::string& src) {
  const engram_config& e = c.engram;
  if (e.layer_ids.empty()) return;
  DI_CHECK(c.is_v41(), "{}: Engram layers are a deepseek_v41 feature", src);
  check_layer_list(e.layer_ids, c, src, "text_config.engram_layer_ids");
  DI_CHECK(e.num_embeddings.size() == e.layer_ids.size(), "{}: key "
           "'text_config.engram_num_embeddings': has {} entries for {} engram layers", src,
           e.num_embeddings.size(), e.layer_ids.size());
  DI_CHECK(e.max_ngram_size >= 2, "{}: key 'text_config.engram_max_ngram_size': must be >= 2", src);
  // Real checkpoints have (4 - 1) * 8 = 24 hash columns a layer; far more is no Engram layer.
  DI_CHECK(std::int64_t(e.max_ngram_size - 1) * e.n_heads <= k_max_engram_columns,
           "{}: keys 'text_config.engram_max_ngram_size' ({}) and 'text_config.engram_n_heads' "
           "({}): (max_ngram_size - 1) * n_heads must be at most {}",
           src, e.max_ngram_size, e.n_heads, k_max_engram_columns);
  DI_CHECK(e.head_dim % 32 == 0, "{}: key 'text_config.engram_head_dim': {} is not a multiple of "
           "the 32-channel scale block", src, e.head_dim);
  DI_CHECK(e.compressed_vocab_size <= c.vocab_size, "{}: key "
           "'text_config.engram_compressed_vocab_size': {} exceeds vocab_size {}", src,
           e.compressed_vocab_size, c.vocab_size);
  DI_CHECK(e.pad_token_id >= 0 && e.pad_token_id < c.vocab_size,
           "{}: key 'text_config.engram_pad_token_id': {} outside the vocabulary", src, e.pad_token_id);
  auto primes = engram_bucket_primes(e);
  for (std::size_t i = 0; i < primes.size(); ++i) {
    std::int64_t rows = 0;
    for (auto p : primes[i]) rows += p;
    DI_CHECK(rows == e.num_embeddings[i], "{}: key 'text_config.engram_num_embeddings': entry {} is "
             "{} but the prime bucket layout of layer {} needs {} rows", src, i,
             e.num_embeddings[i], e.layer_ids[i], rows);
  }
}

}  // namespace

std::vector<std::vector<std::int64_t>> engram_bucket_primes(const engram_config& e) {
  // The official code starts each n-gram's search at vocab_size again and takes, head by head,
  // the next prime it has not taken yet. What it has taken is always every prime from
  // vocab_size up to the last one taken, so each column simply gets the next prime: the same
  // numbers, without walking past the taken ones again (quadratic in the columns).
  std::vector<std::vector<std::int64_t>> out;
  std::int64_t candidate = e.vocab_size;
  for (std::size_t layer = 0; layer < e.layer_ids.size(); ++layer) {
    std::vector<std::int64_t> row;
    for (int column = 0; column < e.num_hash_columns(); ++column) {
      while (!is_prime(candidate)) ++candidate;
      row.push_back(candidate++);
    }
    out.push_back(std::move(row));
  }
  return out;
}

void validate_model_config(const model_config& c, const std::string& src) {
  validate_geometry(c, src);
  if (c.is_v41()) {
    DI_CHECK(c.num_hash_layers == 0, "{}: key 'text_config.num_hash_layers': hash routing is a "
             "deepseek_v4 feature", src);
    validate_v41_sources(c, src);
  } else {
    DI_CHECK(c.num_hash_layers >= 0 && c.num_hash_layers <= c.num_layers,
             "{}: key 'num_hash_layers': {} outside [0, num_hidden_layers={}]", src,
             c.num_hash_layers, c.num_layers);
    DI_CHECK(c.kv_source_layer_ids.empty() && c.index_source_layer_ids.empty(),
             "{}: keys 'kv_source_layer_ids'/'index_source_layer_ids' are deepseek_v41 features", src);
  }
  validate_engram(c, src);
}

}  // namespace di
