// register_types (the names every node must agree on) and small helpers for messages.
#include "actors/messages.hpp"

#include <caf/error.hpp>
#include <caf/exit_reason.hpp>
#include <caf/make_message.hpp>
#include <caf/sec.hpp>

#include <chrono>

namespace di::actors {

void register_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<executor_info>("di::executor_info");
  cfg.add_message_type<run_step>("di::run_step");
  cfg.add_message_type<step_done>("di::step_done");
  cfg.add_message_type<start_request>("di::start_request");
  cfg.add_message_type<abort_request>("di::abort_request");
  cfg.add_message_type<prefix_probe>("di::prefix_probe");
  cfg.add_message_type<group_events>("di::group_events");
  cfg.add_message_type<group_info>("di::group_info");
  cfg.add_message_type<group_status>("di::group_status");
  cfg.add_message_type<runtime::admission_result>("di::admission_result");
  cfg.add_message_type<submit_request>("di::submit_request");
  cfg.add_message_type<submit_reply>("di::submit_reply");
  cfg.add_message_type<client_events>("di::client_events");
  cfg.add_message_type<node_event>("di::node_event");
  cfg.add_message_type<cluster_status>("di::cluster_status");
  cfg.add_message_type<attach_router>("di::attach_router");
  cfg.add_message_type<join_cluster>("di::join_cluster");
  cfg.add_message_type<spawn_executor>("di::spawn_executor");
  cfg.add_message_type<spawn_scheduler>("di::spawn_scheduler");
  cfg.add_message_type<spawn_router>("di::spawn_router");
  cfg.add_message_type<router_ready>("di::router_ready");
  cfg.add_message_type<coordinator_found>("di::coordinator_found");
  cfg.add_message_type<executor_actor>("di::executor_actor");
  cfg.add_message_type<scheduler_actor>("di::scheduler_actor");
  cfg.add_message_type<router_actor>("di::router_actor");
  cfg.add_message_type<client_actor>("di::client_actor");
  cfg.add_message_type<node_actor>("di::node_actor");
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string describe(const caf::error& err) {
  if (!err) return "no error";
  const caf::message& ctx = err.context();
  for (std::size_t i = 0; i < ctx.size(); ++i)
    if (ctx.match_element<std::string>(i)) return ctx.get_as<std::string>(i);
  if (err.category() == caf::atom("exit")) {
    const auto reason = static_cast<caf::exit_reason>(err.code());
    // CAF gives a remote actor whose node vanished without a word (killed, crashed, a
    // connection reset) this reason: "lost the router: unknown" said nothing to act on.
    if (reason == caf::exit_reason::unknown)
      return "its node went away without a reason (the process ended or the connection broke)";
    return caf::to_string(reason);
  }
  if (err.category() == caf::atom("system"))
    return caf::to_string(static_cast<caf::sec>(err.code()));
  return caf::to_string(err);
}

std::string describe_down(const caf::error& reason) {
  constexpr const char* node_stopped = "stopped: its node shut down";
  if (!reason) return node_stopped;
  const caf::message& ctx = reason.context();  // (a none error has none: CAF dereferences null)
  for (std::size_t i = 0; i < ctx.size(); ++i)
    if (ctx.match_element<std::string>(i)) return ctx.get_as<std::string>(i);
  if (reason == caf::exit_reason::normal || reason == caf::exit_reason::user_shutdown)
    return node_stopped;
  return describe(reason);
}

caf::error router_shutdown_reason() {
  return caf::error(static_cast<std::uint8_t>(caf::exit_reason::user_shutdown), caf::atom("exit"),
                    caf::make_message(std::string("the router shut down (the cluster stopped)")));
}

std::string router_gone_message(const caf::error& reason) {
  // user_shutdown: the router's own orderly stop (router_shutdown_reason), or its node's.
  if (reason == caf::exit_reason::user_shutdown) return describe(router_shutdown_reason());
  return "lost the router: " + describe(reason);
}

std::string refusal_text(const submit_reply& reply) {
  if (reply.status == runtime::admission_status::accepted) return reply.error;
  return std::string(runtime::to_string(reply.status)) + ": " + reply.error;
}

std::string submit_error_text(const caf::error& err, const std::string& router_down) {
  if (err == caf::sec::request_receiver_down) return router_down;
  return "the router did not answer: " + describe(err);
}

}  // namespace di::actors
