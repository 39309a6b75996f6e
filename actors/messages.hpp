// Every message the actors exchange, their inspect() functions, and the typed interface of
// each actor (one comment per message), in one place. Messages carry control data only: ids,
// token ids, block ids, step plans, counters. Tensors never travel here (design.md §1).
//
// Who talks to whom:
//   client ──submit/abort──▶ router ──start/abort/probe──▶ scheduler ──run_step──▶ executor(s)
//   client ◀─client_events── router ◀────group_events──── scheduler ◀──step_done── executor(s)
//   node(rank N) ──join──▶ coordinator (node rank 0) ──spawn_*──▶ node(rank N)
// Monitoring: the coordinator monitors every node; each scheduler its executors; the router
// its schedulers and its clients; each client its router; every node its coordinator.
//
// Every type here must be registered with register_types() on every node under the same
// name: CAF 0.17 checks remote typed handles by comparing signature strings of names.
#pragma once

#include "actors/detail/runtime_inspect.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace di::actors {

// ---- atoms -----------------------------------------------------------------------------------

using info_atom = caf::atom_constant<caf::atom("di_info")>;
using status_atom = caf::atom_constant<caf::atom("di_status")>;
using shutdown_atom = caf::atom_constant<caf::atom("di_shutdn")>;
using tick_atom = caf::atom_constant<caf::atom("di_tick")>;
using step_ran_atom = caf::atom_constant<caf::atom("di_stepran")>;
using prepare_grammar_atom = caf::atom_constant<caf::atom("di_prepgr")>;
using grammar_done_atom = caf::atom_constant<caf::atom("di_gramok")>;
using abandon_grammar_atom = caf::atom_constant<caf::atom("di_grabndn")>;
using limits_atom = caf::atom_constant<caf::atom("di_limits")>;

// ---- executor --------------------------------------------------------------------------------

/// What an executor reports once its runner is loaded.
struct executor_info {
  runtime::runner_info runner;
  runtime::kv_geometry geometry;  ///< the cache shape the scheduler's block manager must use
  int node = 0;                   ///< rank of the executor's node
};

/// One step plan for an executor.
struct run_step {
  runtime::step_plan plan;
  std::int64_t sent_ns = 0;  ///< scheduler's steady clock at sending (same-host latency)
};

/// An executor's answer to run_step.
struct step_done {
  runtime::step_result result;
  std::int64_t run_ns = 0;       ///< time inside step_runner::run
  std::int64_t gap_ns = -1;      ///< idle time since the previous step it continues; -1 = none
  std::int64_t received_ns = 0;  ///< executor's steady clock when the plan was taken up
  bool was_ready = false;  ///< (gap_ns >= 0) the plan was sent before the previous step ended
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, executor_info& x) {
  return f(caf::meta::type_name("executor_info"), x.runner, x.geometry, x.node);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_step& x) {
  return f(caf::meta::type_name("run_step"), x.plan, x.sent_ns);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_done& x) {
  return f(caf::meta::type_name("step_done"), x.result, x.run_ns, x.gap_ns, x.received_ns,
           x.was_ready);
}

using executor_actor = caf::typed_actor<
    /// scheduler → executor: the runner's device, pools and cache geometry (answered once the
    /// runner has loaded).
    caf::replies_to<info_atom>::with<executor_info>,
    /// scheduler → executor: run one plan; plans arrive strictly in step order, and a failed
    /// device answers with an error and the executor stops.
    caf::replies_to<run_step>::with<step_done>,
    /// the executor's own device thread → executor (local only, never sent by others): job
    /// `id` has finished and its outcome waits in the executor; it answers the job's request.
    caf::reacts_to<step_ran_atom, std::uint64_t>,
    /// scheduler → executor: compile the response_format (the inline spec) of request `id`
    /// (the router's) into the runner's grammar cache, on a worker thread (the device thread
    /// runs steps meanwhile); the answer is "" when it compiled (or the runner has no
    /// structured output, which it reports for the request itself), else why not. Requests
    /// for a spec that is compiling share its compile. The executor monitors the sender: its
    /// requests stop waiting when it goes down (a compile nobody waits for is cancelled).
    caf::replies_to<prepare_grammar_atom, std::uint64_t, std::string>::with<std::string>,
    /// scheduler → executor: request `id` of the sender (aborted) no longer waits for its
    /// response_format; its prepare is answered now, and a compile that no request waits for
    /// any more is cancelled. An id that waits for nothing is ignored.
    caf::reacts_to<abandon_grammar_atom, std::uint64_t>,
    /// the executor's own grammar thread → executor (local only): compile `id` ended ("" or
    /// the error).
    caf::reacts_to<grammar_done_atom, std::uint64_t, std::string>>;

// ---- scheduler -------------------------------------------------------------------------------

/// A tokenized, validated request for a group (id: the router's, unique in the cluster).
struct start_request {
  runtime::request request;
};

/// Ends a request in any phase (router → scheduler: router id; client → router: client id).
struct abort_request {
  std::uint64_t id = 0;
};

/// "How many leading tokens of this prompt do you have cached?" (cache-aware routing).
struct prefix_probe {
  std::vector<std::int32_t> tokens;
  std::uint64_t root = runtime::unsalted_prefix_root;  ///< prefix_root of its cache_salt
};

/// The token events of one step of a group (request ids are the router's).
struct group_events {
  int group = 0;
  std::vector<runtime::token_event> events;
};

/// What a group's scheduler tells the router once its executors are ready.
struct group_info {
  int group = 0;
  std::int64_t max_model_len = 0;
  std::int64_t token_block_size = 0;  ///< the prefix-cache unit in tokens
  std::int64_t num_blocks = 0;        ///< all streams
  int num_executors = 0;
  std::string device;  ///< of executor 0
};

/// Executor-side timing a scheduler accumulates over its steps.
struct executor_timing {
  std::int64_t num_steps = 0;
  std::int64_t run_ns = 0;        ///< time inside the runner
  std::int64_t num_gaps = 0;      ///< steps that continued the previous one
  std::int64_t gap_ns = 0;        ///< executor idle time before those steps
  std::int64_t max_gap_ns = 0;
  std::int64_t num_ready = 0;     ///< ... whose plan was sent before the previous step ended
  std::int64_t num_direct = 0;    ///< steps sent to an executor with nothing queued
  std::int64_t direct_overhead_ns = 0;  ///< their round trip minus run time
  std::int64_t num_sized = 0;     ///< steps whose messages were measured
  std::int64_t plan_bytes = 0;    ///< serialized run_step bytes of those steps
  std::int64_t result_bytes = 0;  ///< serialized step_done bytes of those steps
};

/// A group's state and statistics.
struct group_status {
  int group = 0;
  bool is_up = false;
  std::string down_reason;
  int scheduler_node = 0;
  std::vector<int> executor_nodes;
  runtime::scheduler_stats stats;
  executor_timing timing;
  std::int64_t num_requests = 0;  ///< requests the router sent this group (router fills it)
  std::int64_t num_affinity = 0;  ///< ... of which chosen for a cached prefix
  std::int64_t num_live = 0;      ///< ... still live
  /// false: the group did not answer this status request (it is down, or did not answer in
  /// time); its layout and counters are the last ones it answered with, if any.
  bool answered = true;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, start_request& x) {
  return f(caf::meta::type_name("start_request"), x.request);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, abort_request& x) {
  return f(caf::meta::type_name("abort_request"), x.id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, prefix_probe& x) {
  return f(caf::meta::type_name("prefix_probe"), x.tokens, x.root);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, group_events& x) {
  return f(caf::meta::type_name("group_events"), x.group, x.events);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, group_info& x) {
  return f(caf::meta::type_name("group_info"), x.group, x.max_model_len, x.token_block_size,
           x.num_blocks, x.num_executors, x.device);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, executor_timing& x) {
  return f(caf::meta::type_name("executor_timing"), x.num_steps, x.run_ns, x.num_gaps, x.gap_ns,
           x.max_gap_ns, x.num_ready, x.num_direct, x.direct_overhead_ns, x.num_sized, x.plan_bytes,
           x.result_bytes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, group_status& x) {
  return f(caf::meta::type_name("group_status"), x.group, x.is_up, x.down_reason, x.scheduler_node,
           x.executor_nodes, x.stats, x.timing, x.num_requests, x.num_affinity, x.num_live,
           x.answered);
}

// ---- router and client -----------------------------------------------------------------------

/// A client's request: text (tokenized by the router) or token ids, and sampling parameters.
struct submit_request {
  std::uint64_t id = 0;  ///< the client's id, unique among its live requests
  /// Text the router tokenizes (adding BOS); "" is a prompt too: BOS alone. Unset: prompt_ids
  /// (an empty string used to mean "no text", so an empty text prompt was refused).
  std::optional<std::string> prompt;
  std::vector<std::int32_t> prompt_ids;  ///< used when `prompt` is unset
  runtime::sampling_params params;
  /// The largest message the client's process accepts (its bound on incoming BASP messages:
  /// cluster.max_message_bytes, `client --max-message-bytes`); 0 = the router's own bound. The
  /// router fails a request whose events of one step would not fit, rather than the link.
  std::int64_t max_event_bytes = 0;
};

/// submit_reply::group of a request no group took.
inline constexpr int no_group = -1;

/// The router's answer to submit_request.
struct submit_reply {
  bool accepted = false;
  std::string error;  ///< why it was refused
  /// What kind of refusal (none when accepted): a client maps it onto its own statuses.
  runtime::failure_kind kind = runtime::failure_kind::none;
  std::string param;  ///< the request field it blames (invalid requests), or ""
  /// The group scheduler's admission status when a group refused it (queue_full, too_long,
  /// ...); accepted for every other reply. Apart from `error`, so that a front end chooses
  /// whether to show it (refusal_text) instead of cutting it off a message.
  runtime::admission_status status = runtime::admission_status::accepted;
  std::uint64_t seed = 0;
  std::vector<std::int32_t> prompt_ids;  ///< the tokenized prompt
  /// The data-parallel group that took it (accepted replies). no_group (-1) in every refusal,
  /// and in the accepted reply of a request its client aborted before the router sent it to a
  /// group (while the groups were probed): no group ever saw it. Not an index to look up
  /// without checking: no front end reads it (HTTP, metrics and `client` ignore it).
  int group = no_group;
};

/// Events of a client's requests (request ids are the client's).
struct client_events {
  std::vector<runtime::token_event> events;
};

/// A node came up or went down (coordinator → router).
struct node_event {
  int rank = 0;
  bool is_up = false;
  std::string address;  ///< host:port
  std::string reason;   ///< why it went down
};

/// The router's counters.
struct router_counters {
  std::int64_t num_submitted = 0;
  std::int64_t num_accepted = 0;
  std::int64_t num_refused = 0;   ///< invalid, over a limit, or no group to serve
  std::int64_t num_finished = 0;  ///< final events delivered
  std::int64_t num_errors = 0;    ///< ... with finish_reason error
  std::int64_t num_aborts = 0;    ///< ... with finish_reason abort
  std::int64_t num_live = 0;
  std::int64_t num_unexpected = 0;  ///< malformed or unknown messages dropped
};

/// Everything `deepinfer client --status` shows.
struct cluster_status {
  std::vector<node_event> nodes;
  std::vector<group_status> groups;
  router_counters router;
  /// The context in tokens (prompt and output) a request may use: the least of the groups that
  /// are ready; 0 while none is.
  std::int64_t max_model_len = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, submit_request& x) {
  runtime::optional_field<std::string> prompt{x.prompt};
  return f(caf::meta::type_name("submit_request"), x.id, prompt, x.prompt_ids, x.params,
           x.max_event_bytes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, submit_reply& x) {
  return f(caf::meta::type_name("submit_reply"), x.accepted, x.error, x.kind, x.param, x.status,
           x.seed, x.prompt_ids, x.group);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, client_events& x) {
  return f(caf::meta::type_name("client_events"), x.events);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_event& x) {
  return f(caf::meta::type_name("node_event"), x.rank, x.is_up, x.address, x.reason);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, router_counters& x) {
  return f(caf::meta::type_name("router_counters"), x.num_submitted, x.num_accepted,
           x.num_refused, x.num_finished, x.num_errors, x.num_aborts, x.num_live,
           x.num_unexpected);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cluster_status& x) {
  return f(caf::meta::type_name("cluster_status"), x.nodes, x.groups, x.router, x.max_model_len);
}

using client_actor = caf::typed_actor<
    /// router → client: events of the client's requests; the last one of a request has a
    /// finished status (stop, length, abort or error with a message).
    caf::reacts_to<client_events>>;

using router_actor = caf::typed_actor<
    /// client → router: a new request; the reply says accepted (events follow to the sender)
    /// or why it was refused. Refusals are immediate.
    caf::replies_to<submit_request>::with<submit_reply>,
    /// client → router: abort one of the sender's requests (its final event says abort).
    caf::reacts_to<abort_request>,
    /// scheduler → router: the events of one step of a group.
    caf::reacts_to<group_events>,
    /// coordinator → router: a node joined or went down.
    caf::reacts_to<node_event>,
    /// anyone → router: nodes, groups and counters.
    caf::replies_to<status_atom>::with<cluster_status>,
    /// front end → router: the largest message the router's node accepts
    /// (cluster.max_message_bytes); a front end refuses a larger request instead of sending it.
    caf::replies_to<limits_atom>::with<std::int64_t>,
    /// coordinator → router: refuse new work and end live requests ("shutting down").
    caf::replies_to<shutdown_atom>::with<bool>,
    /// router → itself: the periodic status line.
    caf::reacts_to<tick_atom>>;

/// The router introduces itself to a group (router → scheduler).
struct attach_router {
  router_actor router;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, attach_router& x) {
  return f(caf::meta::type_name("attach_router"), x.router);
}

using scheduler_actor = caf::typed_actor<
    /// router → scheduler: send this group's events to `router`; answered once every executor
    /// has loaded its runner (or with the error that stopped one).
    caf::replies_to<attach_router>::with<group_info>,
    /// router → scheduler: queue a request; the answer says accepted or why not (limits).
    caf::replies_to<start_request>::with<runtime::admission_result>,
    /// router → scheduler: end a request in any phase, preparing included (answered accepted
    /// then); its final event has status abort. Sent after the start_request it refers to, it
    /// arrives after it (CAF keeps one sender's order); an id the group does not have (refused,
    /// ended) is ignored.
    caf::reacts_to<abort_request>,
    /// router → scheduler: how many leading tokens of a prompt this group has cached.
    caf::replies_to<prefix_probe>::with<std::int64_t>,
    /// anyone → scheduler: state, counters, gauges and executor timing.
    caf::replies_to<status_atom>::with<group_status>,
    /// scheduler → itself: the step watchdog and the status line.
    caf::reacts_to<tick_atom>>;

// ---- nodes -----------------------------------------------------------------------------------

/// A node announces itself to the coordinator.
struct join_cluster {
  int rank = 0;
  std::string fingerprint;  ///< of its resolved cluster file: must equal the coordinator's
  std::string hostname;
  std::int64_t pid = 0;
};

/// Spawn one executor for a group on the receiving node.
struct spawn_executor {
  int group = 0;
  int index = 0;  ///< within the group
  std::string device;
};

/// Spawn a group's scheduler on the receiving node.
struct spawn_scheduler {
  int group = 0;
  std::vector<executor_actor> executors;
  std::vector<int> executor_nodes;
};

/// Spawn the router on the receiving node and publish it for clients.
struct spawn_router {
  std::vector<scheduler_actor> groups;
  std::vector<node_event> nodes;  ///< the nodes as the coordinator sees them
};

/// The router is serving.
struct router_ready {
  router_actor router;
  std::string address;  ///< host:port clients connect to
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, join_cluster& x) {
  return f(caf::meta::type_name("join_cluster"), x.rank, x.fingerprint, x.hostname, x.pid);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, spawn_executor& x) {
  return f(caf::meta::type_name("spawn_executor"), x.group, x.index, x.device);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, spawn_scheduler& x) {
  return f(caf::meta::type_name("spawn_scheduler"), x.group, x.executors, x.executor_nodes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, spawn_router& x) {
  return f(caf::meta::type_name("spawn_router"), x.groups, x.nodes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, router_ready& x) {
  return f(caf::meta::type_name("router_ready"), x.router, x.address);
}

using node_actor = caf::typed_actor<
    /// node → coordinator: this node is up with the same cluster file (answer: node count).
    caf::replies_to<join_cluster>::with<int>,
    /// coordinator → node: spawn an executor (answered at once; it loads in the background).
    caf::replies_to<spawn_executor>::with<executor_actor>,
    /// coordinator → node: spawn a group's scheduler over its executors.
    caf::replies_to<spawn_scheduler>::with<scheduler_actor>,
    /// coordinator → node: spawn the router, wait for the groups, publish it for clients.
    caf::replies_to<spawn_router>::with<router_ready>,
    /// coordinator or signal → node: shut down, answering once its actors are stopped (the
    /// coordinator shuts the cluster down in order: router, schedulers, executors, nodes).
    caf::replies_to<shutdown_atom>::with<bool>>;

/// The coordinator was reached (a node's main thread → its own node actor).
struct coordinator_found {
  node_actor coordinator;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, coordinator_found& x) {
  return f(caf::meta::type_name("coordinator_found"), x.coordinator);
}

/// A node actor as its own process sees it.
using local_node_actor = node_actor::extend<
    /// main thread → node: join this coordinator (nodes of rank > 0).
    caf::reacts_to<coordinator_found>,
    /// node → itself: the startup deadline.
    caf::reacts_to<tick_atom>>;

/// Registers every message and handle type above (call in every process's config).
void register_types(caf::actor_system_config& cfg);

/// The steady clock in nanoseconds (one clock for all processes of a host).
std::int64_t now_ns();

/// The text of an error: its message when it carries one, else CAF's rendering.
std::string describe(const caf::error& err);

/// The text of a monitored actor's down reason: describe(), except that an actor that ended
/// without an error of its own -- no reason, `normal` or `user_shutdown` and no message, as
/// when its node is stopped in order (a SIGTERM to that node) -- "stopped: its node shut
/// down" (a client read "executor 0 on node 1 is down (no error)").
std::string describe_down(const caf::error& reason);

/// The exit reason of a router that shut down in order (its cluster stopped, or its node was
/// told to stop): front ends monitoring it get it as their down reason.
caf::error router_shutdown_reason();

/// What a front end says when its router is gone (`reason`: its monitor's down reason): "the
/// router shut down (the cluster stopped)" after an orderly stop, else "lost the router: WHY".
std::string router_gone_message(const caf::error& reason);

/// What a front end fails a request with when an error came in place of its submit reply
/// (`router_down`: the router's down reason once its monitor fired, else empty). A router that
/// has just stopped answers `request_receiver_down`, ahead of the down message that carries
/// the reason: then this returns `router_down`, and while that is still empty, an empty text,
/// which means "leave the request live: the down handler fails it with the real reason".
std::string submit_error_text(const caf::error& err, const std::string& router_down);

/// A refusal as the command-line front ends show it: "STATUS: ERROR" when a group's scheduler
/// refused it (`queue_full: 4 requests are waiting`), else its error alone.
std::string refusal_text(const submit_reply& reply);

}  // namespace di::actors
