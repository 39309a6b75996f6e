// Where the tokenizer files a generated checkpoint ships with come from at run time: the
// installed layout (<executable dir>/../share/deepinfer/assets) or, for a binary run from its
// build tree, the repository's assets/ folder. Also the few facts about that tokenizer the
// generator needs (how many ids it defines, which are added/special tokens).
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace di {

/// Name of the bundled tokenizer's folder inside an assets directory.
inline constexpr const char* bundled_tokenizer_dir = "deepseek-v3-tokenizer";

/// The folder holding the bundled tokenizer.json and tokenizer_config.json. Throws di::error
/// naming every place looked at when none has them.
std::filesystem::path find_tokenizer_assets();

/// What the generator needs to know about a tokenizer.json.
struct tokenizer_facts {
  std::int64_t num_ids = 0;             ///< one past the largest id it defines
  std::vector<std::int64_t> added_ids;  ///< ids of added tokens (special or not)
};

/// Reads `tokenizer_json` (Hugging Face tokenizers format).
tokenizer_facts read_tokenizer_facts(const std::filesystem::path& tokenizer_json);

}  // namespace di
