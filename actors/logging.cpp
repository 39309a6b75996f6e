// Component loggers over shared sinks (see logging.hpp).
#include "actors/logging.hpp"

#include "common/error.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <mutex>
#include <vector>

namespace di::actors {

namespace {

struct logging_setup {
  std::mutex mutex;
  std::vector<spdlog::sink_ptr> sinks;
  spdlog::level::level_enum level = spdlog::level::info;
  std::string tag;
};

logging_setup& setup() {
  static logging_setup s;
  return s;
}

}  // namespace

void configure_logging(const std::string& level, const std::string& file, const std::string& tag) {
  logging_setup& s = setup();
  std::lock_guard lock(s.mutex);
  s.level = spdlog::level::from_str(level);
  s.tag = tag;
  s.sinks.clear();
  s.sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  if (!file.empty()) {
    // spdlog creates missing parent folders (a typo made /nonexist/dir as root) and says
    // only "Failed opening file": the folder must exist, and the message names the key.
    const std::filesystem::path parent = std::filesystem::path(file).parent_path();
    std::error_code ec;
    DI_CHECK(parent.empty() || std::filesystem::is_directory(parent, ec),
             "logging.file {}: the folder {} does not exist", file, parent.string());
    try {
      s.sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(file));
    } catch (const spdlog::spdlog_ex& e) {
      DI_FAIL("logging.file {}: cannot open it: {}", file, e.what());
    }
  }
  spdlog::drop_all();
}

std::shared_ptr<spdlog::logger> component_logger(const std::string& component) {
  logging_setup& s = setup();
  std::lock_guard lock(s.mutex);
  const std::string name = s.tag.empty() ? component : s.tag + "/" + component;
  if (auto existing = spdlog::get(name)) return existing;
  if (s.sinks.empty()) s.sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  auto logger = std::make_shared<spdlog::logger>(name, s.sinks.begin(), s.sinks.end());
  logger->set_level(s.level);
  logger->set_pattern("[%H:%M:%S.%e] [%n] %^%l%$: %v");
  logger->flush_on(spdlog::level::info);
  spdlog::register_logger(logger);
  return logger;
}

}  // namespace di::actors
