// The scheduler actor's state and the functions its two source files share
// (scheduler_actor.cpp: startup and handlers; scheduler_steps.cpp: the step pipeline).
#pragma once

#include "actors/scheduler_actor.hpp"
#include "runtime/scheduler.hpp"

#include <caf/typed_response_promise.hpp>
#include <spdlog/logger.h>

#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>

namespace di::actors::detail {

/// One plan sent to the executors and their answers.
struct pending_step {
  std::uint64_t step_id = 0;
  bool has_rows = false;
  std::int64_t sent_ns = 0;
  bool is_direct = false;  ///< no other plan with rows was in flight when it was sent
  std::vector<std::optional<step_done>> replies;  ///< one per executor
  int num_replies = 0;
  std::int64_t plan_bytes = 0;  ///< serialized run_step size, when this step is sampled
};

/// A request whose response_format the executors are compiling (scheduler_actor.cpp,
/// prepare_then_admit): not admitted yet, so the runtime scheduler does not know it.
struct preparing_request {
  runtime::request request;
  caf::typed_response_promise<runtime::admission_result> reply;
  std::size_t num_answers = 0;
  std::string error;
  bool is_too_slow = false;  ///< an executor did not answer within the limit
  bool is_ended = false;     ///< answered already (aborted, or refused at an executor's error):
                             ///< later compile answers are ignored
  std::int64_t start_ns = 0;
};

struct scheduler_state {
  static inline const char* name = "scheduler";
  scheduler_state() = default;

  scheduler_params params;
  std::shared_ptr<spdlog::logger> log;
  std::vector<std::optional<executor_info>> infos;
  std::unique_ptr<runtime::scheduler> sched;
  std::optional<router_actor> router;
  std::vector<caf::typed_response_promise<group_info>> attach_waiters;
  group_info info;
  bool is_up = false;
  bool is_failed = false;
  std::string down_reason;
  /// Requests being prepared, by id: an abort_request finds them here.
  std::unordered_map<std::uint64_t, std::shared_ptr<preparing_request>> preparing;
  /// Requests aborted while being prepared: the runtime scheduler never saw them, so its
  /// num_aborts lacks them (make_status adds them).
  std::int64_t num_prepare_aborts = 0;
  /// Requests refused at the end of their preparation (a response_format that did not compile,
  /// took too long, or a group no longer serving): the runtime scheduler never saw them either,
  /// so make_status adds them to its num_refused.
  std::int64_t num_prepare_refusals = 0;
  std::deque<pending_step> in_flight;
  int num_row_steps_in_flight = 0;
  executor_timing timing;
  runtime::scheduler_counters last_counters;  // at the last status line
  std::int64_t last_status_ns = 0;
};

using scheduler_self = scheduler_actor::stateful_pointer<scheduler_state>;

/// Plans and sends steps while the pipeline has room (scheduler_steps.cpp).
void pump(scheduler_self self);
/// Ends every live request with `reason` and stops the scheduler.
void fail_group(scheduler_self self, const std::string& reason);
/// Sends events to the router.
void emit(scheduler_self self, std::vector<runtime::token_event> events);
/// The step watchdog (scheduler_steps.cpp).
void check_deadline(scheduler_self self);

}  // namespace di::actors::detail
