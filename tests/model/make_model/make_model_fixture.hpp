// Shared by the make-model tests: options for a quiet generation, and one generated tiny
// checkpoint per (preset, seed) per test process, so the slowest step runs once.
#pragma once

#include "model/make_model/make_model.hpp"
#include "tests/test_support.hpp"

#include <filesystem>
#include <map>
#include <memory>
#include <string>

namespace di::test {

namespace fs = std::filesystem;

inline make_model_options quiet_options(const std::string& preset, const fs::path& out,
                                        std::uint64_t seed = 0) {
  make_model_options o;
  o.preset = preset;
  o.out_dir = out;
  o.seed = seed;
  o.show_progress = false;
  return o;
}

/// The folder of a checkpoint generated once for this process (removed at exit).
inline fs::path generated(const std::string& preset, std::uint64_t seed = 0) {
  static std::map<std::pair<std::string, std::uint64_t>, std::unique_ptr<temp_dir>> dirs;
  auto& dir = dirs[{preset, seed}];
  if (!dir) {
    dir = std::make_unique<temp_dir>("make-model");
    make_model(quiet_options(preset, dir->path() / "ckpt", seed));
  }
  return dir->path() / "ckpt";
}

}  // namespace di::test
