// The router actor's state and the functions its source files share (router_actor.cpp:
// startup, groups, status; router_requests.cpp: submit, dispatch, events; router_validate.cpp:
// request validation).
#pragma once

#include "actors/router_actor.hpp"

#include <caf/typed_response_promise.hpp>
#include <spdlog/logger.h>

#include <map>
#include <optional>
#include <set>
#include <unordered_map>

namespace di::actors::detail {

struct group_entry {
  scheduler_actor handle;
  group_info info;
  bool is_ready = false;
  bool is_up = false;
  /// It failed before it attached (its attach failed, or it went down first): the router's
  /// startup_error says why; what comes of it later changes nothing.
  bool is_start_failed = false;
  std::string down_reason;
  std::int64_t num_live = 0;
  std::int64_t num_requests = 0;
  std::int64_t num_affinity = 0;
  /// The group's last answer to a status request: what `client --status` shows of a group that
  /// is down or does not answer (it showed zero counters and no layout).
  std::optional<group_status> last_status;
};

/// A request between acceptance by the router and its final event.
struct live_request {
  caf::actor_addr client;
  client_actor client_handle;
  std::uint64_t client_id = 0;
  int group = -1;
  bool is_admitted = false;    ///< the scheduler accepted it
  bool abort_pending = false;  ///< its client aborted it or went away
  bool is_abort_sent = false;  ///< its group was sent an abort_request (once per request)
  std::optional<caf::typed_response_promise<submit_reply>> reply;  ///< until admitted
  submit_reply accepted;  ///< the reply to deliver on admission (it holds the prompt)
  /// Until admitted, what another group needs to take the request besides the prompt, when its
  /// group refuses it for room or goes down; unset when no other group was up.
  std::optional<runtime::request> spare;
  std::vector<int> passed_by;   ///< groups that refused it for room or went down with it
  bool is_by_affinity = false;  ///< its group was chosen for a cached prefix
  /// The largest client_events message its client accepts (0: an in-process client, no bound).
  std::int64_t max_event_bytes = 0;
};

struct router_state {
  static inline const char* name = "router";
  router_state() = default;

  router_params params;
  std::shared_ptr<spdlog::logger> log;
  std::vector<group_entry> groups;
  std::vector<node_event> nodes;
  std::unordered_map<std::uint64_t, live_request> requests;  // by router id
  std::map<caf::actor_addr, std::map<std::uint64_t, std::uint64_t>> clients;  // client id → router id
  /// Requests ended here that their group went on with and was told again to abort (router id
  /// → group; on_group_events): until the group's final event or its end, so that however many
  /// steps it sends first, it is told once.
  std::unordered_map<std::uint64_t, int> reaborted;
  std::uint64_t next_id = 1;
  router_counters counters;
  router_counters last_counters;
  std::int64_t last_status_ns = 0;
  bool is_ready = false;
  bool is_shutting_down = false;
  std::vector<caf::typed_response_promise<int>> ready_waiters;
  std::optional<std::string> startup_error;
};

using router_self = router_handle::stateful_pointer<router_state>;

/// Why a request cannot be served as sent: the message and the field it blames ("" if none).
struct invalid_request {
  std::string message;
  std::string param;
};
/// Why `req` cannot be served as sent, or nothing; fills `prompt_ids` (router_validate.cpp).
std::optional<invalid_request> validate_request(const router_state& st, submit_request& req);

caf::result<submit_reply> on_submit(router_self self, submit_request& req);
void on_client_abort(router_self self, const abort_request& msg);
/// Aborts live request `id` for its client (its abort, or the client went away): at its group
/// at once when it was sent to one, admitted or not; else when the probe of the groups ends.
void abort_live(router_self self, std::uint64_t id);
void on_group_events(router_self self, group_events& msg);
/// Ends the live requests of `group` (or all when -1) with an error event carrying `reason`.
void fail_requests(router_self self, int group, const std::string& reason);

}  // namespace di::actors::detail
