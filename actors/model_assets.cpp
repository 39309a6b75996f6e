// load_model_assets (see model_assets.hpp).
#include "actors/model_assets.hpp"

#include "common/error.hpp"
#include "config/model_config.hpp"
#include "model/make_model/assets.hpp"
#include "model/runner/cpu_model_runner.hpp"
#include "model/tokenizer/tokenizer.hpp"

#include <filesystem>

namespace di::actors {

model_assets load_model_assets(const cluster_config& config) {
  model_assets a;
  std::string dir = config.tokenizer_dir();
  // The toy runner reads no checkpoint: without model.tokenizer, a model.path that holds no
  // tokenizer (the example files name one that need not exist) means the bundled tokenizer.
  const bool toy_without_tokenizer =
      config.model.runner == "toy" && config.model.tokenizer.empty() &&
      !std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json");
  if (dir.empty() || toy_without_tokenizer) dir = find_tokenizer_assets().string();
  std::error_code ec;  // a folder that is not there, or a file, says so (not "no tokenizer.json")
  const auto st = std::filesystem::status(dir, ec);
  DI_CHECK(std::filesystem::exists(st), "{}: '{}' does not exist (model.tokenizer / model.path)",
           config.origin, dir);
  DI_CHECK(std::filesystem::is_directory(st),
           "{}: '{}' is not a folder (model.tokenizer / model.path name the checkpoint's folder)",
           config.origin, dir);
  DI_CHECK(std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json", ec),
           "{}: no tokenizer.json in '{}' (model.tokenizer / model.path)", config.origin, dir);
  a.tokenizer = std::make_shared<const tok::tokenizer>(tok::tokenizer::from_dir(dir));
  std::int64_t eos = -1;
  if (config.model.runner == "toy") {
    // Prompts may use every id of the tokenizer; the toy model samples below toy.vocab_size,
    // which must lie within them (past them, requests failed partway: "the runner sampled
    // token 141761, which cannot be decoded").
    a.vocab_size = std::int64_t(a.tokenizer->vocab_size());
    DI_CHECK(config.model.toy.vocab_size <= a.vocab_size,
             "{}: model.toy.vocab_size {} is larger than the tokenizer's {} ids ({}): the toy "
             "model would sample ids no one can decode",
             config.origin, config.model.toy.vocab_size, a.vocab_size, dir);
  } else {
    const model_config m =
        load_model_config((std::filesystem::path(config.model.path) / "config.json").string());
    // The ids the runner samples: the checkpoint's head may pad past the tokenizer's ids.
    a.vocab_size = sampleable_ids(*a.tokenizer, m.vocab_size);
    eos = m.eos_token_id;
  }
  if (std::optional<std::int32_t> e = a.tokenizer->eos_id()) eos = *e;  // as generate does
  if (eos >= 0 && eos < a.vocab_size) a.eos_token_ids.push_back(std::int32_t(eos));
  return a;
}

}  // namespace di::actors
