// The router actor (see router_actor.hpp): startup (attach to every group), group and client
// monitoring, node events, the status query, shutdown and the periodic status line. The
// request path is in router_requests.cpp, validation in router_validate.cpp.
#include "actors/detail/router_state.hpp"

#include "actors/logging.hpp"

#include <caf/all.hpp>

#include <algorithm>

namespace di::actors {

namespace {

using detail::router_self;
using detail::router_state;

void finish_startup(router_self self) {
  router_state& st = self->state;
  for (const detail::group_entry& g : st.groups)
    if (!g.is_ready && !st.startup_error) return;
  st.is_ready = true;
  for (auto& rp : st.ready_waiters) {
    if (st.startup_error)
      rp.deliver(caf::make_error(caf::sec::runtime_error, *st.startup_error));
    else
      rp.deliver(int(st.groups.size()));
  }
  st.ready_waiters.clear();
  if (!st.startup_error) st.log->info("router ready: {} data-parallel group(s)", st.groups.size());
}

/// Group `g` did not start, for `reason`: the router's start fails (the first group's reason
/// is the one reported).
void fail_start(router_self self, std::size_t g, std::string reason) {
  router_state& st = self->state;
  detail::group_entry& e = st.groups[g];
  e.is_start_failed = true;
  e.down_reason = std::move(reason);
  if (!st.startup_error)
    st.startup_error = fmt::format("group {} did not start: {}", g, e.down_reason);
  finish_startup(self);
}

void attach_groups(router_self self) {
  router_state& st = self->state;
  const auto timeout = std::chrono::seconds(st.params.startup_timeout_s);
  for (std::size_t g = 0; g < st.params.groups.size(); ++g) {
    st.groups.push_back({.handle = st.params.groups[g]});
    self->monitor(st.params.groups[g]);
    self->request(st.params.groups[g], timeout, attach_router{caf::actor_cast<router_actor>(self)})
        .then(
            [=](group_info& info) {
              detail::group_entry& e = self->state.groups[g];
              e.info = std::move(info);
              e.is_ready = e.is_up = true;
              finish_startup(self);
            },
            [=](caf::error& err) {
              if (self->state.groups[g].is_start_failed) return;  // its down message said why
              // A scheduler that failed at start and quit before the attach reached it (the
              // router spawned or its request travelled later) never reads it: CAF answers
              // request_receiver_down, which says nothing of why ("group 0 did not start:
              // request_receiver_down", 6 in 100 starts of a failing group under load). Its
              // down message, which follows (the group is monitored), carries the reason the
              // scheduler quit with: on_down fails the start with that.
              if (err == caf::sec::request_receiver_down) return;
              fail_start(self, g, describe(err));
            });
  }
}

void on_down(router_self self, const caf::down_msg& dm) {
  router_state& st = self->state;
  for (std::size_t g = 0; g < st.groups.size(); ++g) {
    detail::group_entry& e = st.groups[g];
    if (dm.source != e.handle.address()) continue;
    if (!e.is_ready) {  // down before it attached: it did not start, and its exit reason says why
      if (!e.is_start_failed) fail_start(self, g, describe_down(dm.reason));
    } else if (e.is_up) {
      e.is_up = false;
      e.down_reason = describe_down(dm.reason);
      if (st.is_shutting_down)
        st.log->info("group {} stopped", g);
      else
        st.log->error("group {} is down: {}; it receives no more work", g, e.down_reason);
    }
    detail::fail_requests(self, int(g), fmt::format("group {} is down: {}", g, e.down_reason));
    return;
  }
  auto c = st.clients.find(dm.source);
  if (c == st.clients.end()) return;
  for (const auto& [client_id, id] : c->second)  // the client is gone: abort its requests
    detail::abort_live(self, id);
}

void on_node_event(router_self self, node_event& ev) {
  router_state& st = self->state;
  for (node_event& n : st.nodes)
    if (n.rank == ev.rank) {
      if (!ev.is_up) st.log->error("node {} ({}) is down: {}", ev.rank, ev.address, ev.reason);
      n = std::move(ev);
      return;
    }
  st.nodes.push_back(std::move(ev));
}

/// Gathers every live group's status (a group that does not answer keeps what the router knows).
caf::result<cluster_status> on_status(router_self self) {
  router_state& st = self->state;
  auto rp = self->make_response_promise<cluster_status>();
  auto out = std::make_shared<cluster_status>();
  out->nodes = st.nodes;
  std::sort(out->nodes.begin(), out->nodes.end(),  // rank order (a rejoin appended it last)
            [](const node_event& a, const node_event& b) { return a.rank < b.rank; });
  out->router = st.counters;
  for (const detail::group_entry& g : st.groups)  // as the router checks requests against it
    if (g.is_ready && (out->max_model_len == 0 || g.info.max_model_len < out->max_model_len))
      out->max_model_len = g.info.max_model_len;
  auto pending = std::make_shared<std::size_t>(st.groups.size());
  for (std::size_t g = 0; g < st.groups.size(); ++g) {
    const detail::group_entry& e = st.groups[g];
    group_status s = e.last_status.value_or(group_status{});  // until the group answers now
    if (!e.last_status && g < st.params.layout.size()) {  // it never answered: the file's layout
      s.scheduler_node = st.params.layout[g].scheduler_node;
      s.executor_nodes = st.params.layout[g].executor_nodes;
    }
    s.group = int(g);
    s.is_up = e.is_up;
    s.down_reason = e.down_reason;
    s.num_requests = e.num_requests;
    s.num_affinity = e.num_affinity;
    s.num_live = e.num_live;
    s.answered = false;
    out->groups.push_back(std::move(s));
  }
  auto finish = [=]() mutable {
    if (--*pending == 0) rp.deliver(std::move(*out));
  };
  if (st.groups.empty()) rp.deliver(std::move(*out));
  for (std::size_t g = 0; g < st.groups.size(); ++g) {
    if (!st.groups[g].is_up) {
      finish();
      continue;
    }
    self->request(st.groups[g].handle, std::chrono::seconds(2), status_atom::value)
        .then(
            [=](group_status& s) mutable {
              group_status& dst = out->groups[g];
              s.num_requests = dst.num_requests;
              s.num_affinity = dst.num_affinity;
              s.num_live = dst.num_live;
              s.answered = true;
              if (g < self->state.groups.size()) self->state.groups[g].last_status = s;
              dst = std::move(s);
              finish();
            },
            [=](caf::error& err) mutable {
              group_status& dst = out->groups[g];  // up to the router, silent to us
              if (dst.down_reason.empty())
                dst.down_reason = "did not answer the status request: " + describe(err);
              finish();
            });
  }
  return rp;
}

void status_line(router_self self) {
  router_state& st = self->state;
  const router_counters& c = st.counters;
  if (c.num_submitted == st.last_counters.num_submitted && c.num_live == 0) return;
  int up = 0;
  std::string load;
  for (const detail::group_entry& g : st.groups) {
    up += g.is_up;
    load += fmt::format("{}{}", load.empty() ? "" : "/", g.num_live);
  }
  st.log->info("router: live {} (per group {}), submitted {}, refused {}, finished {} ({} errors, "
               "{} aborts), groups up {}/{}",
               c.num_live, load, c.num_submitted, c.num_refused, c.num_finished, c.num_errors,
               c.num_aborts, up, st.groups.size());
  st.last_counters = c;
}

router_handle::behavior_type router_impl(router_self self, router_params params) {
  self->state.params = std::move(params);
  self->state.nodes = self->state.params.nodes;
  self->state.log = component_logger("router");
  self->set_down_handler([=](caf::down_msg& dm) { on_down(self, dm); });
  self->set_default_handler([=](caf::scheduled_actor*, caf::message_view&) -> caf::result<caf::message> {
    if (self->state.counters.num_unexpected++ % 1000 == 0)
      self->state.log->warn("dropped an unexpected message ({} so far)", self->state.counters.num_unexpected);
    return caf::make_error(caf::sec::unexpected_message);
  });
  attach_groups(self);
  if (self->state.params.status_interval_s > 0)
    self->delayed_send(self, std::chrono::milliseconds(std::int64_t(self->state.params.status_interval_s * 1000)), tick_atom::value);
  return {
      [=](submit_request& req) { return detail::on_submit(self, req); },
      [=](abort_request& msg) { detail::on_client_abort(self, msg); },
      [=](group_events& msg) { detail::on_group_events(self, msg); },
      [=](node_event& ev) { on_node_event(self, ev); },
      [=](status_atom) { return on_status(self); },
      [=](limits_atom) { return self->state.params.max_message_bytes; },
      [=](shutdown_atom) {
        self->state.is_shutting_down = true;
        detail::fail_requests(self, -1, "the cluster is shutting down");
        // Stopping now, while this node's connections are still up, tells every front end
        // that monitors the router why (the exit reason travels to remote monitors); stopped
        // with its node, front ends heard only that the connection broke ("lost the router:
        // its node went away without a reason") or had requests bounce.
        self->quit(router_shutdown_reason());
        return true;
      },
      [=](tick_atom) {
        status_line(self);
        self->delayed_send(self, std::chrono::milliseconds(std::int64_t(self->state.params.status_interval_s * 1000)),
                           tick_atom::value);
      },
      [=](info_atom) -> caf::result<int> {
        router_state& st = self->state;
        if (st.is_ready && st.startup_error) return caf::make_error(caf::sec::runtime_error, *st.startup_error);
        if (st.is_ready) return int(st.groups.size());
        auto rp = self->make_response_promise<int>();
        st.ready_waiters.push_back(rp);
        return rp;
      },
  };
}

}  // namespace

router_handle spawn_router_actor(caf::actor_system& sys, router_params params) {
  return sys.spawn(router_impl, std::move(params));
}

}  // namespace di::actors
