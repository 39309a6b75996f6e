// The node actor (see node_actor.hpp): spawning the actors ordered on this node, publishing
// the router, monitoring, and stopping. The coordinator's part is in node_deploy.cpp.
#include "actors/detail/node_state.hpp"

#include "actors/executor_actor.hpp"
#include "actors/logging.hpp"
#include "actors/node_runtime.hpp"
#include "actors/router_actor.hpp"
#include "actors/scheduler_actor.hpp"

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/publish.hpp>

#include <unistd.h>

namespace di::actors::detail {

namespace {

caf::error ensure_assets(node_self self) {
  node_state& st = self->state;
  if (st.assets) return {};
  try {
    st.assets = load_model_assets(st.params.config);
    return {};
  } catch (const std::exception& e) {
    return caf::make_error(caf::sec::runtime_error,
                           fmt::format("node {}: {}", st.params.rank, e.what()));
  }
}

template <class Handle>
void adopt(node_self self, const Handle& h) {
  self->state.local_actors.push_back(caf::actor_cast<caf::actor>(h));
  self->monitor(h);
}

caf::expected<std::uint16_t> publish(node_self self, const router_handle& router) {
  const cluster_config& c = self->state.params.config;
  if (c.tls.enabled) return caf::openssl::publish(router, c.router.port, c.router.host.c_str(), true);
  return self->system().middleman().publish(router, c.router.port, c.router.host.c_str(), true);
}

}  // namespace

caf::expected<executor_actor> spawn_executor_here(node_self self, const spawn_executor& order) {
  node_state& st = self->state;
  const cluster_config& config = st.params.config;
  executor_params p{.make_runner = [config, device = order.device] { return make_step_runner(config, device); },
                    .node = st.params.rank,
                    .label = fmt::format("group {} executor {} (node {}, {})", order.group,
                                         order.index, st.params.rank, order.device)};
  executor_actor e = spawn_executor_actor(self->system(), std::move(p));
  adopt(self, e);
  return e;
}

caf::expected<scheduler_actor> spawn_scheduler_here(node_self self, const spawn_scheduler& order) {
  node_state& st = self->state;
  if (caf::error err = ensure_assets(self)) return err;
  const cluster_config& c = st.params.config;
  scheduler_actor s = spawn_scheduler_actor(
      self->system(),
      {.group = order.group, .node = st.params.rank, .executors = order.executors,
       .executor_nodes = order.executor_nodes, .limits = c.scheduler, .kv = c.kv,
       .status_interval_s = c.logging.status_interval_s, .startup_timeout_s = c.cluster.startup_timeout_s,
       .eos_token_ids = st.assets->eos_token_ids, .tokenizer = st.assets->tokenizer});
  adopt(self, s);
  return s;
}

void spawn_router_here(node_self self, spawn_router order,
                       std::function<void(caf::expected<router_ready>)> done) {
  node_state& st = self->state;
  if (caf::error err = ensure_assets(self)) return done(std::move(err));
  const cluster_config& c = st.params.config;
  router_handle router =
      spawn_router_actor(self->system(), {.groups = std::move(order.groups),
                                          .layout = c.groups,
                                          .nodes = std::move(order.nodes),
                                          .limits = c.router,
                                          .status_interval_s = c.logging.status_interval_s,
                                          .startup_timeout_s = c.cluster.startup_timeout_s,
                                          .vocab_size = st.assets->vocab_size,
                                          .max_message_bytes = c.cluster.max_message_bytes,
                                          .tokenizer = st.assets->tokenizer});
  adopt(self, router);
  self->request(router, std::chrono::seconds(c.cluster.startup_timeout_s), info_atom::value)
      .then(
          [=](int) {
            caf::expected<std::uint16_t> port = publish(self, router);
            if (!port) {
              // The router stops first: it watched the groups stop in the shutdown that follows
              // and logged "error: group 0 is down: ...; it receives no more work" after the
              // real error, as if a group had failed.
              self->send_exit(router, caf::exit_reason::user_shutdown);
              const std::string cause = listen_failure_cause(c.router.host, c.router.port);
              return done(caf::make_error(
                  caf::sec::runtime_error,
                  fmt::format(
                      "cannot listen for clients on {}:{} (router.host / router.port): {}{}",
                      c.router.host, c.router.port, describe(port.error()),
                      cause.empty() ? "" : " (" + cause + ")")));
            }
            done(router_ready{caf::actor_cast<router_actor>(router), fmt::format("{}:{}", c.router.host, *port)});
          },
          [=](caf::error& err) { done(std::move(err)); });
}

void stop_node(node_self self, int exit_code) {
  node_state& st = self->state;
  if (exit_code != 0) st.params.exit_code->store(exit_code);
  st.is_stopping = true;
  for (const caf::actor& a : st.local_actors) self->send_exit(a, caf::exit_reason::user_shutdown);
  st.local_actors.clear();
  self->quit();
}

namespace {

void on_down(node_self self, const caf::down_msg& dm) {
  node_state& st = self->state;
  if (st.coordinator && dm.source == st.coordinator->address()) {
    if (st.is_stopping) return;
    st.log->error("node {}: the coordinator is down ({}); stopping", st.params.rank, describe(dm.reason));
    return stop_node(self, 1);
  }
  for (std::size_t r = 1; r < st.nodes.size(); ++r)
    if (st.nodes[r] && dm.source == st.nodes[r]->address()) return on_node_down(self, int(r), dm.reason);
  if (st.router && dm.source == st.router->address() && !st.is_stopping) {
    st.log->error("the router is down ({}); the cluster cannot serve, shutting it down", describe(dm.reason));
    return shutdown_cluster(self, 1);
  }
  const bool normal = dm.reason == caf::exit_reason::user_shutdown || dm.reason == caf::exit_reason::normal || !dm.reason;
  if (!normal && !st.is_stopping) st.log->warn("node {}: an actor stopped: {}", st.params.rank, describe(dm.reason));
}

void on_coordinator_found(node_self self, const coordinator_found& msg) {
  node_state& st = self->state;
  st.coordinator = msg.coordinator;
  self->monitor(msg.coordinator);
  const cluster_config& c = st.params.config;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  join_cluster join{.rank = st.params.rank, .fingerprint = c.fingerprint, .hostname = host,
                    .pid = std::int64_t(getpid())};
  self->request(msg.coordinator, std::chrono::seconds(c.cluster.startup_timeout_s), std::move(join))
      .then([=](int n) { self->state.log->info("node {} joined a cluster of {} nodes", self->state.params.rank, n); },
            [=](caf::error& err) {
              self->state.log->error("node {} could not join: {}", self->state.params.rank, describe(err));
              stop_node(self, 1);
            });
}

local_node_actor::behavior_type node_impl(node_self self, node_params params) {
  self->state.params = std::move(params);
  self->state.log = component_logger("node");
  self->set_down_handler([=](caf::down_msg& dm) { on_down(self, dm); });
  self->set_default_handler([](caf::scheduled_actor*, caf::message_view&) -> caf::result<caf::message> {
    return caf::make_error(caf::sec::unexpected_message);
  });
  if (self->state.params.rank == 0) start_coordinator(self);
  return {
      [=](join_cluster& msg) { return on_join(self, msg); },
      [=](spawn_executor& o) { return spawn_executor_here(self, o); },
      [=](spawn_scheduler& o) { return spawn_scheduler_here(self, o); },
      [=](spawn_router& o) -> caf::result<router_ready> {
        auto rp = self->make_response_promise<router_ready>();
        spawn_router_here(self, std::move(o), [rp](caf::expected<router_ready> r) mutable {
          if (r) rp.deliver(std::move(*r));
          else rp.deliver(r.error());
        });
        return rp;
      },
      [=](shutdown_atom) {
        if (self->state.params.rank == 0) shutdown_cluster(self, 0);
        else stop_node(self, 0);
        return true;
      },
      [=](coordinator_found& msg) { on_coordinator_found(self, msg); },
      [=](tick_atom) {
        if (!self->state.is_ready && !self->state.is_stopping)
          fail_startup(self, startup_timeout_reason(self->state));
      },
  };
}

}  // namespace

}  // namespace di::actors::detail

namespace di::actors {

local_node_actor spawn_node_actor(caf::actor_system& sys, node_params params) {
  return sys.spawn(detail::node_impl, std::move(params));
}

}  // namespace di::actors
