// The client actor (see client_actor.hpp).
#include "actors/client_actor.hpp"

#include "actors/basp_frame_guard.hpp"
#include "runtime/sequence_status.hpp"

#include <caf/all.hpp>

#include <map>

namespace di::actors {

namespace {

struct client_state {
  static inline const char* name = "client";
  client_state() = default;

  client_params params;
  std::size_t next = 0;  // next request to submit
  std::map<std::uint64_t, request_outcome> live;
  std::map<std::uint64_t, std::int64_t> started_ns;
  std::size_t num_done = 0;
  std::string router_down;  ///< why, once the router is gone
};

using self_ptr = client_handle::stateful_pointer<client_state>;

void finish(self_ptr self, std::uint64_t index) {
  client_state& st = self->state;
  auto it = st.live.find(index);
  if (it == st.live.end()) return;
  request_outcome out = std::move(it->second);
  st.live.erase(it);
  out.seconds = double(now_ns() - st.started_ns[index]) * 1e-9;
  st.started_ns.erase(index);
  ++st.num_done;
  if (st.params.on_finished) st.params.on_finished(out);
}

void fail(self_ptr self, std::uint64_t index, const std::string& why) {
  auto it = self->state.live.find(index);
  if (it == self->state.live.end()) return;
  it->second.status = runtime::sequence_status::finished_error;
  it->second.error = why;
  finish(self, index);
}

void submit_more(self_ptr self);

void submit_one(self_ptr self, std::size_t index) {
  client_state& st = self->state;
  submit_request req = std::move(st.params.requests[index]);
  req.id = index;
  st.live[index] = request_outcome{.index = index};
  st.started_ns[index] = now_ns();
  if (!st.router_down.empty()) return fail(self, index, st.router_down);
  req.max_event_bytes = basp_message_limit();  // what this process's guard lets in
  if (std::string why = submit_size_error(req); !why.empty()) return fail(self, index, why);
  self->request(st.params.router, st.params.submit_timeout, std::move(req))
      .then(
          [=](submit_reply& reply) {
            auto it = self->state.live.find(index);
            if (it == self->state.live.end()) return;
            const bool accepted = reply.accepted;
            std::string why = refusal_text(reply);
            it->second.reply = std::move(reply);
            if (!accepted) {
              fail(self, index, why);
              submit_more(self);
            }
          },
          [=](caf::error& err) {
            if (!self->state.live.contains(index)) return;
            // empty: the router has just stopped; its down message fails this request
            const std::string why = submit_error_text(err, self->state.router_down);
            if (why.empty()) return;
            fail(self, index, why);
            submit_more(self);
          });
}

void submit_more(self_ptr self) {
  client_state& st = self->state;
  while (st.next < st.params.requests.size() && int(st.live.size()) < st.params.concurrency)
    submit_one(self, st.next++);
  if (st.num_done == st.params.requests.size()) self->quit();
}

void on_events(self_ptr self, client_events& msg) {
  client_state& st = self->state;
  for (runtime::token_event& e : msg.events) {
    auto it = st.live.find(e.request_id);
    if (it == st.live.end()) continue;
    request_outcome& out = it->second;
    add_event(out, e, double(now_ns() - st.started_ns[e.request_id]) * 1e-9);
    if (st.params.on_text && !e.text.empty()) st.params.on_text(out.index, e.text);
    if (e.is_finished()) finish(self, e.request_id);
  }
  submit_more(self);
}

client_handle::behavior_type client_impl(self_ptr self, client_params params) {
  self->state.params = std::move(params);
  self->monitor(self->state.params.router);
  self->set_down_handler([=](caf::down_msg& dm) {
    self->state.router_down = router_gone_message(dm.reason);
    const std::string why = self->state.router_down;
    std::vector<std::uint64_t> ids;
    for (const auto& [id, out] : self->state.live) ids.push_back(id);
    for (std::uint64_t id : ids) fail(self, id, why);
    submit_more(self);
  });
  self->set_default_handler([](caf::scheduled_actor*, caf::message_view&) -> caf::result<caf::message> {
    return caf::make_error(caf::sec::unexpected_message);
  });
  submit_more(self);
  return {
      [=](client_events& msg) { on_events(self, msg); },
      [=](abort_request& msg) {
        for (const auto& [id, out] : self->state.live)
          if (msg.id == std::uint64_t(-1) || msg.id == id) self->send(self->state.params.router, abort_request{id});
      },
  };
}

}  // namespace

void add_event(request_outcome& out, const runtime::token_event& e, double seconds) {
  if (out.first_token_seconds < 0 && !e.token_ids.empty()) out.first_token_seconds = seconds;
  out.output_ids.insert(out.output_ids.end(), e.token_ids.begin(), e.token_ids.end());
  out.text += e.text;
  out.logprobs.insert(out.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
  out.prompt_logprobs.insert(out.prompt_logprobs.end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
  out.status = e.status;
  if (!e.error.empty()) out.error = e.error;
  if (e.failure != runtime::failure_kind::none) out.failure = e.failure;
  if (e.stop_token) out.stop_token = e.stop_token;
  if (!e.stop_string.empty()) out.stop_string = e.stop_string;
}

std::string request_outcome::finish_reason() const {
  const std::string_view r = runtime::finish_reason_of(status);
  return r.empty() ? "error" : std::string(r);
}

client_handle spawn_client_actor(caf::actor_system& sys, client_params params) {
  return sys.spawn(client_impl, std::move(params));
}

std::vector<request_outcome> run_requests(caf::actor_system& sys, const router_actor& router,
                                          std::vector<submit_request> requests, int concurrency) {
  auto results = std::make_shared<std::vector<request_outcome>>(requests.size());
  client_params p{.router = router, .requests = std::move(requests), .concurrency = concurrency};
  p.on_finished = [results](const request_outcome& out) { (*results)[out.index] = out; };
  caf::scoped_actor waiter{sys};
  client_handle client = spawn_client_actor(sys, std::move(p));
  waiter->wait_for(client);
  return std::move(*results);
}

}  // namespace di::actors
