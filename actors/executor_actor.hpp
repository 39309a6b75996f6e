// The executor actor: one per device, detached (its own thread, because a runner blocks on its
// device), owning one step_runner. It loads the runner on the first message (so spawning is
// instant and the load time counts against the scheduler's startup timeout), runs plans
// strictly in step order, and measures the idle gap between consecutive steps: the quantity
// overlapped scheduling exists to remove. A runner that throws is a failed device: the
// executor answers the step with the error and stops (its scheduler fails the group).
#pragma once

#include "actors/messages.hpp"
#include "actors/runner_factory.hpp"

#include <caf/actor_system.hpp>

#include <functional>
#include <string>

namespace di::actors {

struct executor_params {
  std::function<runner_bundle()> make_runner;  ///< called once, on the executor's thread
  int node = 0;                                ///< rank of this node
  std::string label;                           ///< for logs: "group 0 executor 0 (cpu)"
};

/// Spawns a detached executor.
executor_actor spawn_executor_actor(caf::actor_system& sys, executor_params params);

}  // namespace di::actors
