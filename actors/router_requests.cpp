// The router's request path: admission (limits, validation), choice of a group (longest
// cached prefix within a load margin, else least loaded), dispatch to its scheduler, and the
// event stream back to clients with ids translated to the clients' own.
#include "actors/detail/router_state.hpp"

#include "actors/basp_frame_guard.hpp"
#include "runtime/sampling_rng.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <memory>

namespace di::actors::detail {

namespace {

using runtime::failure_kind;

submit_reply refusal(router_self self, failure_kind kind, std::string why, std::string param = {},
                     runtime::admission_status status = runtime::admission_status::accepted) {
  ++self->state.counters.num_refused;
  return submit_reply{.accepted = false,
                      .error = std::move(why),
                      .kind = kind,
                      .param = std::move(param),
                      .status = status};
}

std::vector<int> up_groups(const router_state& st) {
  std::vector<int> up;
  for (std::size_t g = 0; g < st.groups.size(); ++g)
    if (st.groups[g].is_up) up.push_back(int(g));
  return up;
}

std::string why_no_group(const router_state& st) {
  std::string why = "no data-parallel group can serve";
  for (std::size_t g = 0; g < st.groups.size(); ++g) {
    // Reasons often name their group already ("group 0: executor 0 on node 1 is down").
    const std::string& reason = st.groups[g].down_reason;
    const std::string prefix = fmt::format("group {}: ", g);
    why += "; " + (reason.starts_with(prefix) ? reason : prefix + reason);
  }
  return why;
}

/// The group for a request: the one with the longest cached prefix if it is long enough and
/// the group is not overloaded compared with the least loaded one; else the least loaded.
int choose_group(router_self self, const std::vector<int>& up, const std::vector<std::int64_t>& cached,
                 bool& by_affinity) {
  router_state& st = self->state;
  std::int64_t min_live = INT64_MAX;
  for (int g : up) min_live = std::min(min_live, st.groups[std::size_t(g)].num_live);
  int best = -1;
  for (std::size_t i = 0; i < up.size(); ++i) {
    const group_entry& e = st.groups[std::size_t(up[i])];
    if (cached[i] < st.params.limits.affinity_min_tokens ||
        e.num_live > min_live + st.params.limits.affinity_max_imbalance)
      continue;
    if (best < 0 || cached[i] > cached[std::size_t(best)]) best = int(i);
  }
  by_affinity = best >= 0;
  if (best >= 0) return up[std::size_t(best)];
  int pick = up[0];
  for (int g : up) {
    const group_entry& e = st.groups[std::size_t(g)];
    const group_entry& p = st.groups[std::size_t(pick)];
    if (e.num_live < p.num_live || (e.num_live == p.num_live && e.num_requests < p.num_requests))
      pick = g;
  }
  return pick;
}

/// `status`: the group scheduler's refusal, when it refused the request.
void end_pending(router_self self, std::uint64_t id, failure_kind kind, const std::string& why,
                 std::string param = {},
                 runtime::admission_status status = runtime::admission_status::accepted) {
  router_state& st = self->state;
  auto it = st.requests.find(id);
  if (it == st.requests.end()) return;
  live_request& r = it->second;
  if (r.reply) r.reply->deliver(refusal(self, kind, why, std::move(param), status));
  if (r.group >= 0) --st.groups[std::size_t(r.group)].num_live;
  st.clients[r.client].erase(r.client_id);
  st.requests.erase(it);
  --st.counters.num_live;
}

/// Sends the request's group an abort_request, once per request: a client that aborts twice,
/// then an admission timeout, send it one. A group reads it after the start_request it
/// follows (one sender, one receiver: CAF keeps their order in process and over the one
/// connection between two nodes), so it ends the request however far it got: refused already
/// (the abort finds nothing), preparing it (scheduler_actor's abort_preparing), or admitted.
void abort_at_group(router_self self, live_request& r, std::uint64_t id) {
  if (r.is_abort_sent || r.group < 0) return;
  r.is_abort_sent = true;
  self->send(self->state.groups[std::size_t(r.group)].handle, abort_request{id});
}

/// The up groups that may still take the request: not its group, none that passed it on.
std::vector<int> untried_groups(const router_state& st, const live_request& r) {
  std::vector<int> out;
  for (int g : up_groups(st))
    if (g != r.group && std::find(r.passed_by.begin(), r.passed_by.end(), g) == r.passed_by.end())
      out.push_back(g);
  return out;
}

void dispatch(router_self self, std::uint64_t id, runtime::request req, int group,
              bool by_affinity);

/// Offers a request its group did not admit (it refused it for room or went down) to the least
/// loaded up group that has not had it yet, so that a cached prefix (or a load figure that
/// lags) never costs a refusal while another group may serve it. False when there is none, or
/// its client aborted it (it would start only to be aborted).
bool pass_on(router_self self, std::uint64_t id) {
  router_state& st = self->state;
  live_request& r = st.requests.at(id);
  if (!r.spare || r.abort_pending) return false;
  r.passed_by.push_back(r.group);
  const std::vector<int> others = untried_groups(st, r);
  if (others.empty()) return false;
  group_entry& from = st.groups[std::size_t(r.group)];  // it did not take the request
  --from.num_live;
  --from.num_requests;
  from.num_affinity -= r.is_by_affinity;
  bool unused = false;
  const int next = choose_group(self, others, std::vector<std::int64_t>(others.size(), 0), unused);
  runtime::request req = *r.spare;
  req.prompt_ids = r.accepted.prompt_ids;
  dispatch(self, id, std::move(req), next, false);
  return true;
}

/// Sends the request to `group`. A group whose waiting line is full (queue_full,
/// queued_tokens_full) or that goes down before answering (fail_requests) has the request
/// passed on (pass_on); the answer of a group that passed it on is stale and ignored. One
/// that does not answer within params.admission_timeout has the request refused here and
/// aborted there.
void dispatch(router_self self, std::uint64_t id, runtime::request req, int group,
              bool by_affinity) {
  router_state& st = self->state;
  live_request& r = st.requests.at(id);
  group_entry& g = st.groups[std::size_t(group)];
  r.group = group;
  r.accepted.group = group;
  r.is_by_affinity = by_affinity;
  ++g.num_live;
  ++g.num_requests;
  g.num_affinity += by_affinity;
  // What another group needs, when there is one to offer it to: all but the prompt, which the
  // reply keeps until admission.
  if (!r.spare && !untried_groups(st, r).empty())
    r.spare = runtime::request{.id = req.id, .params = req.params, .seed = req.seed};
  self->request(g.handle, st.params.admission_timeout, start_request{std::move(req)})
      .then(
          [=](runtime::admission_result& res) {
            auto it = self->state.requests.find(id);
            if (it == self->state.requests.end() || it->second.group != group) return;
            const bool is_full = res.status == runtime::admission_status::queue_full ||
                                 res.status == runtime::admission_status::queued_tokens_full;
            if (is_full && pass_on(self, id)) return;
            if (!res.is_accepted())
              return end_pending(self, id, runtime::failure_of(res.status), res.message, res.param,
                                 res.status);
            live_request& lr = it->second;
            lr.is_admitted = true;
            lr.spare.reset();
            ++self->state.counters.num_accepted;
            lr.reply->deliver(std::move(lr.accepted));
            lr.reply.reset();
          },
          [=](caf::error& err) {
            auto it = self->state.requests.find(id);
            if (it == self->state.requests.end() || it->second.group != group) return;
            const group_entry& ge = self->state.groups[std::size_t(group)];
            // The group's scheduler stopped while the request was on its way: the down message
            // that follows passes it on or fails it with the group's reason (fail_requests).
            if (err == caf::sec::request_receiver_down && ge.is_up) return;
            // No answer in time: the group may still admit it (a full mailbox, a slow link) and
            // run it with nobody listening. The abort follows the request on the same path, so it
            // cancels a late admission at once; the late reply and the abort's final event find
            // no live request and are ignored.
            if (err == caf::sec::request_timeout && ge.is_up) abort_at_group(self, it->second, id);
            end_pending(
                self, id, failure_kind::unavailable,
                fmt::format("group {} did not take the request: {}{}{}", group, describe(err),
                            ge.down_reason.empty() ? "" : "; ", ge.down_reason));
          });
}

/// Ends a request its client aborted before it was sent to a group (while the groups were
/// probed): no group starts it only to abort it. The client sees what an abort just before
/// admission gives it: the accepted reply (no group), then a final event finished_abort.
void end_unsent(router_self self, std::uint64_t id) {
  router_state& st = self->state;
  auto it = st.requests.find(id);
  if (it == st.requests.end()) return;
  live_request& r = it->second;
  ++st.counters.num_accepted;
  r.reply->deliver(std::move(r.accepted));
  client_events out;
  out.events.push_back(
      {.request_id = r.client_id, .status = runtime::sequence_status::finished_abort});
  ++st.counters.num_finished;
  ++st.counters.num_aborts;
  --st.counters.num_live;
  const client_actor client = r.client_handle;
  st.clients[r.client].erase(r.client_id);
  st.requests.erase(it);
  self->send(client, std::move(out));
}

/// Asks every candidate group how much of the prompt it has cached, then dispatches (unless
/// its client aborted it meanwhile).
void probe_and_dispatch(router_self self, std::uint64_t id, runtime::request req, std::vector<int> up) {
  struct probe_state {
    std::vector<std::int64_t> cached;
    std::size_t num_answers = 0;
    runtime::request req;
  };
  auto ps = std::make_shared<probe_state>();
  ps->cached.assign(up.size(), 0);
  ps->req = std::move(req);
  // in its cache_salt's chain: another salt's blocks are no reason to send it there
  prefix_probe probe{ps->req.prompt_ids, runtime::prefix_root(ps->req.params.cache_salt)};
  const auto timeout = std::chrono::milliseconds(self->state.params.limits.probe_timeout_ms);
  auto done = [=] {
    if (++ps->num_answers < up.size() || !self->state.requests.contains(id)) return;
    if (self->state.requests.at(id).abort_pending) return end_unsent(self, id);
    std::vector<int> still_up;
    std::vector<std::int64_t> cached;
    for (std::size_t i = 0; i < up.size(); ++i)
      if (self->state.groups[std::size_t(up[i])].is_up) {
        still_up.push_back(up[i]);
        cached.push_back(ps->cached[i]);
      }
    if (still_up.empty())
      return end_pending(self, id, failure_kind::unavailable, why_no_group(self->state));
    bool by_affinity = false;
    const int g = choose_group(self, still_up, cached, by_affinity);
    dispatch(self, id, std::move(ps->req), g, by_affinity);
  };
  // One message per group (typed sends take their own copy); the last one takes the probe.
  for (std::size_t i = 0; i < up.size(); ++i) {
    const scheduler_actor& handle = self->state.groups[std::size_t(up[i])].handle;
    auto answer = i + 1 < up.size() ? self->request(handle, timeout, probe)
                                    : self->request(handle, timeout, std::move(probe));
    answer.then(
        [=](std::int64_t n) {
          ps->cached[i] = n;
          done();
        },
        [=](caf::error&) { done(); });
  }
}

/// Whether an admission of `req` may take cached blocks: one that asks for prompt logprobs
/// computes every prompt row (runtime::scheduler::admit_one), so a cached prefix saves it
/// nothing and is no reason to prefer a group.
bool may_reuse_cache(const runtime::request& req) {
  return !req.params.prompt_logprobs;
}

}  // namespace

caf::result<submit_reply> on_submit(router_self self, submit_request& req) {
  router_state& st = self->state;
  ++st.counters.num_submitted;
  auto client = caf::actor_cast<client_actor>(self->current_sender());
  if (!client)
    return refusal(self, failure_kind::invalid,
                   "requests must come from an actor that can receive events");
  if (st.is_shutting_down)
    return refusal(self, failure_kind::unavailable, "the cluster is shutting down");
  if (st.counters.num_live >= st.params.limits.max_live_requests)
    return refusal(self, failure_kind::overloaded,
                   fmt::format("{} requests are in flight, the limit (router.max_live_requests)",
                               st.counters.num_live));
  if (st.clients[client.address()].contains(req.id))
    return refusal(self, failure_kind::invalid,
                   fmt::format("request id {} is already live for this client", req.id));
  if (auto why = validate_request(st, req))
    return refusal(self, failure_kind::invalid, why->message, why->param);
  const std::vector<int> up = up_groups(st);
  if (up.empty()) return refusal(self, failure_kind::unavailable, why_no_group(st));

  // A client on another node accepts messages up to its bound (its process's guard): the
  // reply, with the tokenized prompt, must fit as well as each step's events.
  const bool is_remote = client.node() != self->node();
  const std::int64_t max_event_bytes = !is_remote                ? 0
                                       : req.max_event_bytes > 0 ? req.max_event_bytes
                                                                 : st.params.max_message_bytes;
  if (const std::int64_t reply_bytes = 4 * std::int64_t(req.prompt_ids.size()) + 4096;
      max_event_bytes > 0 && reply_bytes > max_event_bytes)
    return refusal(self, failure_kind::invalid,
                   fmt::format("the reply to this request, with its {} prompt tokens, has about {} "
                               "bytes: more than cluster.max_message_bytes = {} (the largest "
                               "message the client accepts)",
                               req.prompt_ids.size(), reply_bytes, max_event_bytes),
                   "prompt");
  const std::uint64_t id = st.next_id++;
  const std::uint64_t seed = req.params.seed.value_or(runtime::draw_request_seed());
  if (!st.clients.contains(client.address()) || st.clients[client.address()].empty()) self->monitor(client);
  st.clients[client.address()][req.id] = id;
  auto rp = self->make_response_promise<submit_reply>();
  st.requests[id] =  // the reply's copy of the prompt; the group's request takes the original
      live_request{.client = client.address(),
                   .client_handle = client,
                   .client_id = req.id,
                   .reply = rp,
                   .accepted = {.accepted = true, .seed = seed, .prompt_ids = req.prompt_ids},
                   .max_event_bytes = max_event_bytes};
  ++st.counters.num_live;
  runtime::request r{.id = id,
                     .prompt_ids = std::move(req.prompt_ids),
                     .params = std::move(req.params),
                     .seed = seed};
  if (up.size() == 1) {
    dispatch(self, id, std::move(r), up[0], false);
  } else if (!may_reuse_cache(r)) {  // no cached prefix counts: by load alone, no probe
    bool by_affinity = false;
    const int g = choose_group(self, up, std::vector<std::int64_t>(up.size(), 0), by_affinity);
    dispatch(self, id, std::move(r), g, by_affinity);
  } else {
    probe_and_dispatch(self, id, std::move(r), up);
  }
  return rp;
}

void on_client_abort(router_self self, const abort_request& msg) {
  router_state& st = self->state;
  auto c = st.clients.find(self->current_sender() ? self->current_sender()->address() : caf::actor_addr{});
  if (c == st.clients.end()) return;
  if (auto it = c->second.find(msg.id); it != c->second.end()) abort_live(self, it->second);
}

void abort_live(router_self self, std::uint64_t id) {
  live_request& r = self->state.requests.at(id);
  r.abort_pending = true;  // not passed on, nor sent to a group once the probe ends (end_unsent)
  // Sent but not admitted yet, the request ends at its group too (accepted, then finished_abort,
  // or the group's refusal): held here until the group's answer, it kept the group working for
  // nobody, for as long as a grammar compiles.
  abort_at_group(self, r, id);
}

namespace {

/// Hands one event to its client's batch in the client's ids; a final one ends the request
/// here (counters, load). Returns false for an event of a request that is no longer live.
bool take_event(router_self self, runtime::token_event& e) {
  router_state& st = self->state;
  auto it = st.requests.find(e.request_id);
  if (it == st.requests.end()) return false;
  live_request& r = it->second;
  e.request_id = r.client_id;
  if (!e.is_finished()) return true;
  ++st.counters.num_finished;
  st.counters.num_errors += e.status == runtime::sequence_status::finished_error;
  st.counters.num_aborts += e.status == runtime::sequence_status::finished_abort;
  --st.groups[std::size_t(r.group)].num_live;
  --st.counters.num_live;
  st.clients[r.client].erase(r.client_id);
  st.requests.erase(it);
  return true;
}

/// Splits one step's events of a client into messages of at most `bound` bytes, one request's
/// events never apart. A request whose events alone are larger ends with an error instead (and
/// is aborted at its group): sent, they would close the client's connection, and every other
/// request of that client would fail with "lost the router".
std::vector<std::vector<runtime::token_event>> fit_events(router_self self,
                                                          std::vector<runtime::token_event> events,
                                                          std::int64_t bound) {
  std::vector<std::uint64_t> order;  // request ids in order of their first event
  std::map<std::uint64_t, std::vector<runtime::token_event>> by_request;
  for (runtime::token_event& e : events) {
    if (!by_request.contains(e.request_id)) order.push_back(e.request_id);
    by_request[e.request_id].push_back(std::move(e));
  }
  std::vector<std::vector<runtime::token_event>> out(1);
  std::int64_t used = basp_envelope_bytes;
  for (std::uint64_t id : order) {
    std::vector<runtime::token_event>& mine = by_request[id];
    std::int64_t bytes = events_message_bytes(mine);
    if (bytes > bound) {
      const bool finished = mine.back().is_finished();
      mine = {{.request_id = id,
               .status = runtime::sequence_status::finished_error,
               .error = fmt::format(
                   "response of {} bytes (this request's events of one step) exceeds "
                   "cluster.max_message_bytes = {}, the largest message its client accepts (for "
                   "`client`: --max-message-bytes); fewer logprobs or prompt_logprobs fit",
                   bytes, bound),
               .failure = failure_kind::invalid}};
      if (!finished) abort_at_group(self, self->state.requests.at(id), id);
      bytes = events_message_bytes(mine);
    }
    if (used + bytes - basp_envelope_bytes > bound && !out.back().empty()) {
      out.emplace_back();
      used = basp_envelope_bytes;
    }
    used += bytes - basp_envelope_bytes;
    for (runtime::token_event& e : mine) out.back().push_back(std::move(e));
  }
  return out;
}

}  // namespace

void on_group_events(router_self self, group_events& msg) {
  router_state& st = self->state;
  // The step's events by client, in order (request ids still the router's).
  std::map<caf::actor_addr, std::vector<runtime::token_event>> by_client;
  // Requests the group runs that are not live here (refused when it did not answer in time,
  // ended for their size) and go on past this step: the group works for nobody. Their abort
  // went to the group when they ended here and the group reads it in order, so these are
  // mostly steps it sent before it read the abort; a backstop for an abort lost all the same,
  // each is told again once (st.reaborted), not once per step.
  std::set<std::uint64_t> orphans;
  std::set<std::uint64_t> finished;
  for (runtime::token_event& e : msg.events) {
    auto it = st.requests.find(e.request_id);
    if (it == st.requests.end() || it->second.group != msg.group) {
      (e.is_finished() ? finished : orphans).insert(e.request_id);
      continue;
    }
    by_client[it->second.client].push_back(std::move(e));
  }
  // Told once: the steps it sent before it read this abort are orphans too.
  for (std::uint64_t id : finished) st.reaborted.erase(id);
  if (msg.group >= 0 && std::size_t(msg.group) < st.groups.size() &&
      st.groups[std::size_t(msg.group)].is_up)
    for (std::uint64_t id : orphans)
      if (!finished.contains(id) && st.reaborted.emplace(id, msg.group).second)
        self->send(st.groups[std::size_t(msg.group)].handle, abort_request{id});
  for (auto& [addr, events] : by_client) {
    const live_request& first = st.requests.at(events.front().request_id);
    const client_actor client = first.client_handle;
    const std::int64_t bound = first.max_event_bytes;
    std::vector<std::vector<runtime::token_event>> batches;
    if (bound > 0 && events_bytes_bound(events) > bound)
      batches = fit_events(self, std::move(events), bound);
    else
      batches.push_back(std::move(events));
    for (std::vector<runtime::token_event>& batch : batches) {
      client_events out;
      for (runtime::token_event& e : batch)
        if (take_event(self, e)) out.events.push_back(std::move(e));
      if (!out.events.empty()) self->send(client, std::move(out));
    }
  }
}

void fail_requests(router_self self, int group, const std::string& reason) {
  router_state& st = self->state;
  std::vector<std::uint64_t> ids;
  for (const auto& [id, r] : st.requests)
    if (group < 0 || r.group == group) ids.push_back(id);
  std::map<int, group_events> by_group;
  for (std::uint64_t id : ids) {
    live_request& r = st.requests.at(id);
    if (!r.is_admitted) {  // its client has seen nothing of it yet: another group may take it
      if (group < 0 || !pass_on(self, id)) end_pending(self, id, failure_kind::unavailable, reason);
      continue;
    }
    group_events& ge = by_group[r.group];
    ge.group = r.group;
    ge.events.push_back({.request_id = id,
                         .status = runtime::sequence_status::finished_error,
                         .error = reason,
                         .failure = failure_kind::unavailable});
  }
  for (auto& [g, ge] : by_group) on_group_events(self, ge);
  // A group that is down ends nothing more: what it was told again is forgotten.
  std::erase_if(st.reaborted,
                [&](const auto& entry) { return group < 0 || entry.second == group; });
}

}  // namespace di::actors::detail
