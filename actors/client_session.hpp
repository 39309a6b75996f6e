// The client session: a long-lived client actor for front ends that submit requests one at a
// time from their own threads (the HTTP server, an in-process caller). `submit` returns at
// once with the request's id; the request's events stream to its callbacks as they arrive
// (tokens, text, logprobs, then one final event), and its outcome is handed over once at the
// end. `abort` ends a request in any phase (its outcome says abort). If the router goes away,
// every live request ends with an error saying so, and later submits are refused at once.
//
// Threads: submit, abort and the destructor may be called from any thread except a callback;
// callbacks run on the session actor's thread, one at a time, in event order per request, and
// must not block. No callback runs after the destructor returns (it aborts what is live and
// waits for the session actor to stop).
#pragma once

#include "actors/client_actor.hpp"

#include <caf/actor_system.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>

namespace di::actors {

/// What a front end hears about one request (all optional).
struct request_callbacks {
  /// Accepted (reply.accepted, the tokenized prompt, seed, group) or refused (then on_finished
  /// follows with the refusal as the error).
  std::function<void(const submit_reply&)> on_reply;
  /// Every event of the request in order; the last one is final (event.is_finished()).
  std::function<void(const runtime::token_event&)> on_event;
  /// Once, when the request has ended: everything it produced (as `client` prints it).
  std::function<void(const request_outcome&)> on_finished;
};

namespace detail {
struct session_core;
}

class client_session {
 public:
  client_session(caf::actor_system& sys, router_actor router,
                 std::chrono::milliseconds submit_timeout = std::chrono::seconds(30));
  ~client_session();
  client_session(const client_session&) = delete;
  client_session& operator=(const client_session&) = delete;

  /// Submits `req` (its id is replaced) and returns the id for abort(); never blocks.
  std::uint64_t submit(submit_request req, request_callbacks callbacks);
  /// Submits `req` and returns its outcome when it ends (the future is ready after
  /// on_finished would run); `on_event` streams as with submit.
  std::future<request_outcome> submit(submit_request req,
                                      std::function<void(const runtime::token_event&)> on_event = {});
  /// Aborts request `id` if it is live (no effect otherwise).
  void abort(std::uint64_t id);
  /// Requests submitted and not yet finished.
  std::size_t num_live() const;

 private:
  caf::actor_system& sys_;
  std::shared_ptr<detail::session_core> core_;
  caf::actor actor_;
  std::atomic<std::uint64_t> next_id_{0};
};

}  // namespace di::actors
