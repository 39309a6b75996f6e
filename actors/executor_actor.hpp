// The executor actor: one per device, owning one step_runner. The runner runs on the
// executor's own device thread (a runner blocks on its device; the thread also holds the device
// context), while the actor itself is an ordinary scheduled actor that queues the requests for
// that thread and answers each when the thread reports it done. (It is not a caf::detached
// actor: CAF 0.17's private threads could keep a finished detached actor alive, and
// ~actor_system then waited for it forever, 1 in 4 executor-node shutdowns; CAF issue 1196,
// fixed only by 0.18's rewrite.) It loads the runner on the first message (so spawning is
// instant and the load time counts against the scheduler's startup timeout), runs plans
// strictly in step order, and measures the idle gap between consecutive steps: the quantity
// overlapped scheduling exists to remove. A runner that throws is a failed device: the
// executor answers the step with the error and stops (its scheduler fails the group).
#pragma once

#include "actors/grammar_limit.hpp"
#include "actors/messages.hpp"
#include "actors/runner_factory.hpp"

#include <caf/actor_system.hpp>

#include <chrono>
#include <functional>
#include <string>

namespace di::actors {

struct executor_params {
  std::function<runner_bundle()> make_runner;  ///< called once, on the device thread
  int node = 0;                                ///< rank of this node
  std::string label;                           ///< for logs: "group 0 executor 0 (cpu)"
  /// How long a request waits for its response_format to compile (the scheduler's limit).
  /// When every request waiting for a compile has waited this long, or has been aborted
  /// (abandon_grammar_atom) or its scheduler has gone down, the compile is cancelled
  /// (grammar::compile_cancel): it stops at its next check and keeps nothing.
  std::chrono::nanoseconds grammar_limit = grammar_prepare_limit();
};

/// Spawns an executor and its device thread (joined when the executor exits).
executor_actor spawn_executor_actor(caf::actor_system& sys, executor_params params);

}  // namespace di::actors
