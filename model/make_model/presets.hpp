// The model shapes `deepinfer make-model` can generate: tiny CPU models that cover every
// feature of V4.1 and V4, and real-width, reduced-depth models for GPU benchmarks. Each preset
// is the published DeepSeek-V4.1-Flash / V4-Flash config.json with a few keys changed.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace di {

/// One generatable model.
struct model_preset {
  std::string name;               ///< "tiny-v41"
  std::string summary;            ///< one line for listings
  std::string description;        ///< what it covers and what was changed from the real model
  nlohmann::ordered_json config;  ///< the config.json to write (official HF layout)
};

/// Every preset, in the order `make-model --list` shows them.
const std::vector<model_preset>& model_presets();

/// The preset called `name`; throws di::error listing the available names otherwise.
const model_preset& find_model_preset(std::string_view name);

/// Compressed Engram vocabulary of the bundled DeepSeek-V3 tokenizer (the reference's
/// build_compressed_token_map over assets/deepseek-v3-tokenizer; the released V4.1 tokenizer
/// gives 99092). Presets carry it; make_model recomputes it from the tokenizer it ships.
inline constexpr std::int64_t bundled_tokenizer_engram_vocab = 98627;

}  // namespace di
