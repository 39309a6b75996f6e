// The client session (see client_session.hpp): a thread-safe facade over a session actor.
// The facade parks each request's callbacks in the shared core; the actor takes them when
// the submit message reaches it, so the callbacks only ever run on the actor's thread.
#include "actors/client_session.hpp"

#include "actors/basp_frame_guard.hpp"
#include "runtime/sequence_status.hpp"

#include <caf/all.hpp>

#include <map>
#include <mutex>

namespace di::actors {

namespace detail {

struct session_core {
  std::mutex mutex;
  std::map<std::uint64_t, request_callbacks> parked;  ///< submitted, not yet taken by the actor
  std::atomic<std::size_t> num_live{0};

  request_callbacks take(std::uint64_t id) {
    std::lock_guard lock(mutex);
    auto it = parked.find(id);
    if (it == parked.end()) return {};
    request_callbacks cb = std::move(it->second);
    parked.erase(it);
    return cb;
  }
};

}  // namespace detail

namespace {

struct live_request {
  request_outcome out;
  request_callbacks cb;
  std::int64_t started_ns = 0;
  bool replied = false;  // out.reply is final and on_reply has heard it
};

/// Makes `r`'s reply final and tells the callback (once).
void deliver_reply(live_request& r) {
  r.replied = true;
  if (r.cb.on_reply) r.cb.on_reply(r.out.reply);
}

struct session_state {
  static inline const char* name = "client_session";
  session_state() = default;

  router_actor router;
  std::chrono::milliseconds submit_timeout{30000};
  std::shared_ptr<detail::session_core> core;
  std::map<std::uint64_t, live_request> live;
  std::string router_down;  ///< why, once the router is gone
};

using self_ptr = caf::stateful_actor<session_state>*;

void finish(self_ptr self, std::uint64_t id) {
  session_state& st = self->state;
  auto it = st.live.find(id);
  if (it == st.live.end()) return;
  live_request r = std::move(it->second);
  st.live.erase(it);
  r.out.seconds = double(now_ns() - r.started_ns) * 1e-9;
  --st.core->num_live;
  if (r.cb.on_finished) r.cb.on_finished(r.out);
}

/// Ends `id` with an error that no event carried (refusal, lost router): the callbacks hear
/// a final event with the message, as if the router had sent it.
void fail(self_ptr self, std::uint64_t id, const std::string& why, runtime::failure_kind kind) {
  auto it = self->state.live.find(id);
  if (it == self->state.live.end()) return;
  runtime::token_event e{.request_id = id,
                         .status = runtime::sequence_status::finished_error,
                         .error = why,
                         .failure = kind};
  add_event(it->second.out, e, 0);
  if (it->second.cb.on_event) it->second.cb.on_event(e);
  finish(self, id);
}

void on_submit(self_ptr self, submit_request& req) {
  session_state& st = self->state;
  const std::uint64_t id = req.id;
  live_request& r = st.live[id];
  r.out.index = id;
  r.cb = st.core->take(id);
  r.started_ns = now_ns();
  // Refused before it is sent (the router is down, or the request does not fit in one message):
  // the reply carries the reason, then the final event.
  req.max_event_bytes = basp_message_limit();  // what this process's guard lets in
  std::string why = !st.router_down.empty() ? st.router_down : submit_size_error(req);
  if (!why.empty()) {
    r.out.reply.error = why;
    r.out.reply.kind = st.router_down.empty() ? runtime::failure_kind::invalid
                                              : runtime::failure_kind::unavailable;
    deliver_reply(r);
    return fail(self, id, why, r.out.reply.kind);
  }
  self->request(st.router, st.submit_timeout, std::move(req))
      .then(
          [=](submit_reply& reply) {
            auto it = self->state.live.find(id);
            if (it == self->state.live.end()) return;
            it->second.out.reply = std::move(reply);
            deliver_reply(it->second);
            const submit_reply& got = it->second.out.reply;
            if (!got.accepted) fail(self, id, refusal_text(got), got.kind);
          },
          [=](caf::error& err) {
            auto it = self->state.live.find(id);
            if (it == self->state.live.end()) return;
            // empty: the router has just stopped; its down message fails this request
            std::string why = submit_error_text(err, self->state.router_down);
            if (why.empty()) return;
            it->second.out.reply.error = std::move(why);
            it->second.out.reply.kind = runtime::failure_kind::unavailable;
            deliver_reply(it->second);
            fail(self, id, it->second.out.reply.error, runtime::failure_kind::unavailable);
          });
}

void on_events(self_ptr self, client_events& msg) {
  session_state& st = self->state;
  for (const runtime::token_event& e : msg.events) {
    auto it = st.live.find(e.request_id);
    if (it == st.live.end()) continue;
    live_request& r = it->second;
    add_event(r.out, e, double(now_ns() - r.started_ns) * 1e-9);
    if (r.cb.on_event) r.cb.on_event(e);
    if (e.is_finished()) finish(self, e.request_id);
  }
}

caf::behavior session_impl(self_ptr self, router_actor router, std::chrono::milliseconds submit_timeout,
                           std::shared_ptr<detail::session_core> core) {
  session_state& st = self->state;
  st.router = std::move(router);
  st.submit_timeout = submit_timeout;
  st.core = std::move(core);
  self->monitor(st.router);
  self->set_down_handler([=](caf::down_msg& dm) {
    if (dm.source != self->state.router.address()) return;
    self->state.router_down = router_gone_message(dm.reason);
    std::vector<std::uint64_t> ids;
    for (auto& [id, r] : self->state.live) {
      ids.push_back(id);
      // Sent before the router stopped, never answered (or its request_receiver_down came
      // first and waited for this message): the reply says why, as a refusal would.
      if (!r.replied) {
        r.out.reply.error = self->state.router_down;
        r.out.reply.kind = runtime::failure_kind::unavailable;
        deliver_reply(r);
      }
    }
    for (std::uint64_t id : ids)
      fail(self, id, self->state.router_down, runtime::failure_kind::unavailable);
  });
  self->set_default_handler(caf::drop);
  return {
      [=](submit_request& req) { on_submit(self, req); },
      [=](client_events& msg) { on_events(self, msg); },
      [=](abort_request& msg) {
        if (self->state.live.contains(msg.id) && self->state.router_down.empty())
          self->send(self->state.router, abort_request{msg.id});
      },
  };
}

}  // namespace

client_session::client_session(caf::actor_system& sys, router_actor router,
                               std::chrono::milliseconds submit_timeout)
    : sys_(sys), core_(std::make_shared<detail::session_core>()) {
  actor_ = sys.spawn(session_impl, std::move(router), submit_timeout, core_);
}

client_session::~client_session() {
  // The router monitors its clients: the session's exit aborts whatever is still live.
  caf::scoped_actor self{sys_};
  self->send_exit(actor_, caf::exit_reason::user_shutdown);
  self->wait_for(actor_);
}

std::uint64_t client_session::submit(submit_request req, request_callbacks callbacks) {
  const std::uint64_t id = next_id_++;
  {
    std::lock_guard lock(core_->mutex);
    core_->parked[id] = std::move(callbacks);
  }
  ++core_->num_live;
  req.id = id;
  caf::anon_send(actor_, std::move(req));
  return id;
}

std::future<request_outcome> client_session::submit(submit_request req,
                                                    std::function<void(const runtime::token_event&)> on_event) {
  auto promise = std::make_shared<std::promise<request_outcome>>();
  std::future<request_outcome> result = promise->get_future();
  request_callbacks cb{.on_event = std::move(on_event),
                       .on_finished = [promise](const request_outcome& out) { promise->set_value(out); }};
  submit(std::move(req), std::move(cb));
  return result;
}

void client_session::abort(std::uint64_t id) { caf::anon_send(actor_, abort_request{id}); }

std::size_t client_session::num_live() const { return core_->num_live.load(); }

}  // namespace di::actors
