// The checkpoint folder a command's --model names: checked to be a folder before anything is
// read from it. (Its tensors are verified against its config.json by deepseek_model::load:
// require_matching_checkpoint in model/model_summary.hpp.)
#pragma once

#include <string>

namespace di::cli {

/// Throws di::error "--model: 'PATH' is not a directory (...)" when `dir` is not a folder (a
/// config.json or a .safetensors file given in its place), or names a path that does not exist.
void require_model_folder(const std::string& dir);

}  // namespace di::cli
