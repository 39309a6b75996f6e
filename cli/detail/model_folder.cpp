// require_model_folder, require_matching_checkpoint (see model_folder.hpp).
#include "cli/detail/model_folder.hpp"

#include "common/error.hpp"

#include <fmt/format.h>

#include <filesystem>

namespace di::cli {

void require_model_folder(const std::string& dir) {
  std::error_code ec;
  const auto st = std::filesystem::status(dir, ec);
  DI_CHECK(std::filesystem::exists(st), "--model: '{}': no such directory", dir);
  DI_CHECK(std::filesystem::is_directory(st),
           "--model: '{}' is not a directory (the checkpoint folder holding config.json, "
           "*.safetensors and tokenizer.json)",
           dir);
}

}  // namespace di::cli
