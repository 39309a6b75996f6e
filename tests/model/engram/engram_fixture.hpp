// Shared fixtures for the Engram tests: the DeepSeek-V3 tokenizer, the v41_public golden
// config, and the official outputs read from its expected.safetensors (loaded once each).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/model_config.hpp"
#include "model/engram/token_map.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace di::test {

/// The folder of the v41_public golden checkpoint (config.json, expected.safetensors).
std::string engram_golden_dir();

/// The tokenizer the golden token map was built from.
const tok::tokenizer& engram_tokenizer();

/// The golden model config (engram_layer_ids [1, 4], max_ngram 4, 8 heads, vocab 509).
const model_config& engram_golden_config();

/// build_engram_token_map(engram_tokenizer()), built once.
const engram_token_map& engram_built_map();

/// The official outputs of expected.safetensors that the Engram tests compare against.
struct engram_golden {
  std::vector<std::int32_t> token_map;   // [128815]
  std::vector<std::int64_t> input_ids;   // [T]
  std::vector<std::int64_t> hash_ids;    // [T, num_layers, num_columns]
  std::vector<std::int64_t> hash_shape;  // {T, num_layers, num_columns}
};
const engram_golden& engram_golden_outputs();

}  // namespace di::test
