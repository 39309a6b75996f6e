// `deepinfer make-model`: writes a random-weight checkpoint of a preset in the official
// DeepSeek format (config.json, sharded safetensors with FP8/FP4 block-quantized weights,
// index, tokenizer files) that the loader reads back like a released model. Weights are a
// pure function of the seed; generation is parallel (OpenMP) and streams to disk.
#pragma once

#include "model/make_model/assets.hpp"
#include "model/make_model/model_plan.hpp"
#include "model/make_model/presets.hpp"
#include "model/make_model/weight_init.hpp"

#include <csignal>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace di {

struct make_model_options {
  std::string preset;             ///< a name from model_presets()
  std::filesystem::path out_dir;  ///< created if missing
  std::uint64_t seed = 0;         ///< same seed, same bytes
  bool force = false;             ///< replace the checkpoint files of a non-empty out_dir
  std::uint64_t max_shard_bytes = default_max_shard_bytes;
  std::filesystem::path tokenizer_dir;  ///< empty: find_tokenizer_assets()
  bool show_progress = true;            ///< progress bar on stderr (large presets only)
  init_scales scales;                   ///< initialisation constants
  /// Set (e.g. by a signal handler) to stop: make_model throws and removes what it wrote.
  const volatile std::sig_atomic_t* cancel = nullptr;
};

struct make_model_result {
  model_plan plan;
  std::vector<std::filesystem::path> files;  ///< every file written, in writing order
  double seconds = 0.0;                      ///< wall time of the whole generation
};

/// Generates the checkpoint. Every input is checked before the output folder is touched; on
/// failure the files written so far are removed. Throws di::error with an actionable message.
make_model_result make_model(const make_model_options& options);

/// The parsed, validated config of a preset (what its config.json says).
model_config preset_model_config(const model_preset& preset);

/// The config.json text of a preset.
std::string preset_config_json(const model_preset& preset);

/// The initialisation context make_model uses for `config`: the seed, the constants, and the
/// head rows to damp (ids of `tokenizer` that are added tokens or past its end).
init_context make_init_context(const model_config& config, std::uint64_t seed,
                               const init_scales& scales, const tokenizer_facts& tokenizer);

/// The logical fp32 values of rows [row0, row0 + num_rows) of `tensor` (what make_model
/// quantizes and stores), for tests and tools that check a checkpoint against its generator.
std::vector<float> generated_values(const planned_tensor& tensor, const init_context& context,
                                    std::int64_t row0, std::int64_t num_rows);

}  // namespace di
