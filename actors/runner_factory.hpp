// make_step_runner: the one place that turns the cluster file's [model] section into the
// step_runner an executor owns, with the cache geometry its scheduler must use. The toy runner
// serves cluster tests without weights; the CPU model runner serves checkpoints.
#pragma once

#include "config/cluster_config.hpp"
#include "runtime/kv_geometry.hpp"
#include "runtime/step_runner.hpp"

#include <memory>
#include <string>

namespace di::actors {

struct runner_bundle {
  std::unique_ptr<runtime::step_runner> runner;
  runtime::kv_geometry geometry;
};

/// Builds the runner of `config.model.runner` for `device` (loads the model: may take long).
/// Throws di::error with a message naming what is wrong.
runner_bundle make_step_runner(const cluster_config& config, const std::string& device);

}  // namespace di::actors
