// The seam between a scheduler and the device that runs its plans: an executor owns one
// step_runner (the CPU model runner now; a CUDA runner and expert-parallel runners later) and
// feeds it the scheduler's step plans strictly in step order (see step_plan.hpp for the
// per-step protocol every runner follows). Runners are single-threaded and may block.
#pragma once

#include "runtime/step_plan.hpp"

#include <cstdint>
#include <functional>
#include <string>

namespace di::runtime {

/// What an executor reports about its runner at startup (the scheduler sizes its pools and
/// limits from it).
struct runner_info {
  std::string device;                    ///< e.g. "cpu", "cuda:0 (CUDA graphs)"
  std::vector<std::int32_t> num_blocks;  ///< blocks available per cache stream
  std::int32_t num_snapshots = 0;        ///< slot snapshots available (prefix reuse)
  std::int64_t max_model_len = 0;        ///< longest sequence a slot can hold
};

class step_runner {
 public:
  virtual ~step_runner() = default;
  virtual runner_info info() const = 0;
  /// Runs one plan and returns its result (one output per scheduled sequence, in plan order).
  /// A failure that concerns one sequence goes into that output's `error`; a failure of the
  /// whole device throws di::error (the executor then reports itself failed).
  virtual step_result run(const step_plan& plan) = 0;
  /// A thread-safe function that compiles a response_format spec into the grammar cache
  /// run() uses (throws di::error when it does not compile) and classifies its states' tokens
  /// for a while (grammar_cache::prepare), so that a step does not stall on either; callable
  /// on any thread, concurrently with run(). Empty: nothing to prepare.
  virtual std::function<void(const std::string& spec)> grammar_preparer() const { return {}; }
  /// A thread-safe function saying whether a spec's grammar is compiled in that cache already
  /// (never compiles), so that its request need not queue behind other compiles. Empty: none.
  virtual std::function<bool(const std::string& spec)> grammar_lookup() const { return {}; }
};

}  // namespace di::runtime
