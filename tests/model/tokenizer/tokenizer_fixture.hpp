// Shared fixtures for the tokenizer tests: the real DeepSeek-V3 tokenizer (loaded once per
// engine) and the public golden file produced by HF tokenizers.
#pragma once

#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.hpp"
#include "tests/test_support.hpp"

namespace di::test {

/// The folder with DeepSeek-V3's tokenizer.json and tokenizer_config.json.
inline std::string deepseek_tokenizer_dir() {
  return shared_path("models/deepseek-v3-tokenizer").string();
}

/// The tokenizer with the hand-written pre-tokenizer (fast = true) or forced PCRE2.
const tok::tokenizer& deepseek_tokenizer(bool fast);

/// One line of testdata/tokenizer/golden_public.jsonl.
struct golden_line {
  std::string id;
  std::string text;
  std::vector<tok::token_id> ids;              // encode(add_special_tokens=false)
  std::vector<tok::token_id> ids_add_special;  // encode(add_special_tokens=true)
  std::vector<tok::token_id> ids_bos;          // transformers: [BOS] + ids
  std::string decoded;                         // decode(ids)
  std::string decoded_skip_special;            // decode(ids, skip_special_tokens=true)
};

/// All golden lines (loaded once).
const std::vector<golden_line>& golden_lines();

}  // namespace di::test
