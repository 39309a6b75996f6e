// The router actor: the cluster's front door. It validates requests (every size is bounded:
// prompt bytes and tokens, stop strings, logprobs, ids within the vocabulary), tokenizes text,
// picks a data-parallel group by the longest cached prefix and by load, and forwards the events
// of each step to the clients. It monitors its schedulers (a group that goes down stops
// receiving work, its live requests end with finish_reason "error", and those it had not
// admitted yet go to another group, as those it refuses for room do) and its clients (a
// client that goes away has its requests aborted). A client's abort goes to the request's
// group at once, admitted or not (the group ends it however far it got: the client sees the
// accepted reply, then one final event, or the group's refusal); one abort per request. A
// request its group does not answer in time is refused and aborted at the group. Refusals are
// immediate replies with a message; nothing a client sends can stop the router.
#pragma once

#include "actors/grammar_limit.hpp"
#include "actors/messages.hpp"
#include "config/cluster_config.hpp"

#include <caf/actor_system.hpp>

#include <chrono>
#include <memory>
#include <vector>

namespace di::tok {
class tokenizer;
}

namespace di::actors {

/// How long the router waits for a group to answer a request it sent before it refuses the
/// request and aborts it at the group (a late admission is cancelled at once). Above the
/// scheduler's limit for compiling a request's grammar: a compile within the limit is never cut
/// short.
inline constexpr std::chrono::milliseconds default_admission_timeout = std::chrono::seconds(120);
static_assert(default_admission_timeout > max_grammar_prepare_time);

struct router_params {
  std::vector<scheduler_actor> groups;
  /// Where each group runs, as the cluster file assigns it: what `client --status` shows of a
  /// group that never answered a status request (it showed scheduler_node 0, no executors).
  std::vector<group_config> layout;
  std::vector<node_event> nodes;
  router_section limits;
  double status_interval_s = 10;
  int startup_timeout_s = 600;
  /// Not a setting: tests shorten it (default_admission_timeout).
  std::chrono::milliseconds admission_timeout = default_admission_timeout;
  std::int64_t vocab_size = 0;  ///< ids must be below this
  std::int64_t max_message_bytes = default_max_message_bytes;  ///< cluster.max_message_bytes
  std::shared_ptr<const tok::tokenizer> tokenizer;  ///< null: text prompts are refused
};

/// The router once spawned also answers `info_atom` with the number of groups, once every
/// group is ready (or with the error that stopped one).
using router_handle = router_actor::extend<caf::replies_to<info_atom>::with<int>>;

router_handle spawn_router_actor(caf::actor_system& sys, router_params params);

}  // namespace di::actors
