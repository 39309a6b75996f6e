// One spdlog logger per component ("node1/router", "node0/scheduler.g0", ...) over shared
// sinks (stderr, and a file when the cluster file asks), so that the output of several node
// processes interleaved on one terminal still says who wrote each line.
#pragma once

#include <spdlog/logger.h>

#include <memory>
#include <string>

namespace di::actors {

/// Sets the level ("trace" ... "off"), an optional log file, and the process tag that prefixes
/// every logger name (e.g. "node1"). Loggers made before keep their sinks; call it first.
void configure_logging(const std::string& level, const std::string& file, const std::string& tag);

/// The logger of `component` in this process (created on first use).
std::shared_ptr<spdlog::logger> component_logger(const std::string& component);

}  // namespace di::actors
