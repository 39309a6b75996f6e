// What the router and the schedulers need from the model besides the runner: the tokenizer
// (the router tokenizes, schedulers detokenize), the vocabulary size (ids are validated
// against it) and the end-of-sequence ids, read from the cluster file's [model] section.
#pragma once

#include "config/cluster_config.hpp"

#include <cstdint>
#include <memory>
#include <vector>

namespace di::tok {
class tokenizer;
}

namespace di::actors {

struct model_assets {
  std::shared_ptr<const tok::tokenizer> tokenizer;
  std::int64_t vocab_size = 0;  ///< token ids below it are valid (model: sampleable_ids)
  std::vector<std::int32_t> eos_token_ids;
};

/// Loads the tokenizer (model.tokenizer, model.path, or the bundled one for the toy runner)
/// and reads vocab_size / eos from config.json (the toy runner: the tokenizer's vocabulary).
model_assets load_model_assets(const cluster_config& config);

}  // namespace di::actors
