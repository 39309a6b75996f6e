// The coordinator (the node of rank 0): nodes join, then the cluster is deployed in three
// phases — executors on their nodes, schedulers with their executors, the router with the
// schedulers — and `ready` is reported; nodes that go down are reported to the router; the
// cluster is shut down in order.
#include "actors/detail/node_state.hpp"

#include <fmt/ranges.h>
#include <caf/all.hpp>

namespace di::actors::detail {

namespace {

std::string address_of(const cluster_config& c, int rank) {
  const node_config& n = c.nodes[std::size_t(rank)];
  return fmt::format("{}:{}", n.host, n.port);
}

/// Runs `order` on node `rank` (this node: directly) and hands the answer to `next`.
template <class Result, class Order, class Local, class Next>
void order_on(node_self self, int rank, Order order, Local local, Next next) {
  node_state& st = self->state;
  if (rank == st.params.rank) {
    caf::expected<Result> r = local(self, order);
    if (!r) return fail_startup(self, describe(r.error()));
    return next(std::move(*r));
  }
  self->request(*st.nodes[std::size_t(rank)], std::chrono::seconds(st.params.config.cluster.startup_timeout_s),
                std::move(order))
      .then([=](Result& r) { next(std::move(r)); },
            [=](caf::error& err) { fail_startup(self, fmt::format("node {}: {}", rank, describe(err))); });
}

void deploy_router(node_self self) {
  node_state& st = self->state;
  const cluster_config& c = st.params.config;
  spawn_router order{.groups = st.schedulers, .nodes = st.node_events};
  auto ready = [=](router_ready r) {
    node_state& s = self->state;
    s.router = r.router;
    self->monitor(r.router);
    s.is_ready = true;
    s.log->info("cluster ready: {} node(s), {} group(s); clients connect to {}", c.nodes.size(),
                c.groups.size(), r.address);
    if (s.params.on_ready) s.params.on_ready(r.address);
  };
  if (c.router.node == st.params.rank) {
    spawn_router_here(self, std::move(order), [=](caf::expected<router_ready> r) {
      if (!r) return fail_startup(self, describe(r.error()));
      ready(std::move(*r));
    });
    return;
  }
  self->request(*st.nodes[std::size_t(c.router.node)], std::chrono::seconds(c.cluster.startup_timeout_s),
                std::move(order))
      .then([=](router_ready& r) { ready(std::move(r)); },
            [=](caf::error& err) { fail_startup(self, fmt::format("node {}: {}", c.router.node, describe(err))); });
}

void deploy_schedulers(node_self self) {
  node_state& st = self->state;
  const cluster_config& c = st.params.config;
  st.schedulers.assign(c.groups.size(), scheduler_actor{});
  st.num_pending = int(c.groups.size());
  for (std::size_t g = 0; g < c.groups.size(); ++g) {
    spawn_scheduler order{.group = int(g), .executors = st.executors[g],
                          .executor_nodes = c.groups[g].executor_nodes};
    order_on<scheduler_actor>(self, c.groups[g].scheduler_node, std::move(order), spawn_scheduler_here,
                              [=](scheduler_actor s) {
                                self->state.schedulers[g] = std::move(s);
                                if (--self->state.num_pending == 0) deploy_router(self);
                              });
  }
}

}  // namespace

void start_coordinator(node_self self) {
  node_state& st = self->state;
  const cluster_config& c = st.params.config;
  st.nodes.resize(c.nodes.size());
  st.node_events.push_back({.rank = 0, .is_up = true, .address = address_of(c, 0)});
  self->delayed_send(self, std::chrono::seconds(c.cluster.startup_timeout_s), tick_atom::value);
  if (c.nodes.size() == 1) return deploy(self);
  st.log->info("coordinator: waiting for {} more node(s)", c.nodes.size() - 1);
}

caf::result<int> on_join(node_self self, join_cluster& msg) {
  node_state& st = self->state;
  const cluster_config& c = st.params.config;
  // Said here too: the joining node prints it and exits, but the coordinator's operator (on
  // another host, perhaps) saw only "waiting for 1 more node(s)" until the startup timeout.
  auto refuse = [&st](std::string why) {
    st.log->error("coordinator: refused a node: {}", why);
    return caf::make_error(caf::sec::runtime_error, std::move(why));
  };
  if (st.params.rank != 0) return refuse("this node is not the coordinator (rank 0)");
  if (msg.rank <= 0 || msg.rank >= int(c.nodes.size()))
    return refuse(fmt::format("no node of rank {} in the cluster file ({} nodes)", msg.rank, c.nodes.size()));
  if (msg.fingerprint != c.fingerprint)
    return refuse(fmt::format("node {} resolved a different cluster file (fingerprint {} vs {}): start every "
                              "node with the same file and --set options", msg.rank, msg.fingerprint, c.fingerprint));
  if (st.nodes[std::size_t(msg.rank)])
    return refuse(fmt::format("node {} has already joined (is another process running --rank {}?)",
                              msg.rank, msg.rank));
  if (st.is_deploying)  // a node that went down: its actors are gone with it
    return refuse(
        fmt::format("node {} left the running cluster and cannot rejoin it; restart the "
                    "whole cluster to bring it back",
                    msg.rank));
  node_actor node = caf::actor_cast<node_actor>(self->current_sender());
  if (!node) return refuse("join must come from a node actor");
  st.nodes[std::size_t(msg.rank)] = node;
  self->monitor(node);
  st.node_events.push_back({.rank = msg.rank, .is_up = true, .address = address_of(c, msg.rank)});
  st.log->info("node {} joined ({}, pid {})", msg.rank, msg.hostname, msg.pid);
  if (++st.num_joined == int(c.nodes.size())) deploy(self);
  return int(c.nodes.size());
}

void deploy(node_self self) {
  node_state& st = self->state;
  const cluster_config& c = st.params.config;
  st.is_deploying = true;
  st.executors.resize(c.groups.size());
  st.num_pending = 0;
  for (const group_config& g : c.groups) st.num_pending += int(g.executor_nodes.size());
  for (std::size_t g = 0; g < c.groups.size(); ++g) {
    st.executors[g].resize(c.groups[g].executor_nodes.size());
    for (std::size_t i = 0; i < c.groups[g].executor_nodes.size(); ++i) {
      spawn_executor order{.group = int(g), .index = int(i), .device = c.groups[g].executor_devices[i]};
      order_on<executor_actor>(self, c.groups[g].executor_nodes[i], std::move(order), spawn_executor_here,
                               [=](executor_actor e) {
                                 self->state.executors[g][i] = std::move(e);
                                 if (--self->state.num_pending == 0) deploy_schedulers(self);
                               });
    }
  }
}

void on_node_down(node_self self, int rank, const caf::error& reason) {
  node_state& st = self->state;
  if (st.is_stopping) return;
  // No reason: the node ended in order (SIGTERM to it alone) -- it said "no error".
  const std::string why = reason ? describe(reason) : "it stopped (shut down in order)";
  st.nodes[std::size_t(rank)].reset();
  st.log->error("node {} ({}) is down: {}", rank, address_of(st.params.config, rank), why);
  for (node_event& e : st.node_events)
    if (e.rank == rank) {
      e.is_up = false;
      e.reason = why;
    }
  if (!st.is_ready) return fail_startup(self, fmt::format("node {} went down during startup: {}", rank, why));
  // Each scheduler monitors its executors, but one on another node than this may reach the
  // lost node only through this one and then hears nothing of it: its requests hung until
  // scheduler.step_timeout_s (600 s) while the group still looked up. It gets the down message
  // from here (a scheduler that had its own fails its group once).
  const cluster_config& c = st.params.config;
  for (std::size_t g = 0; g < c.groups.size() && g < st.schedulers.size(); ++g) {
    if (!st.schedulers[g] || c.groups[g].scheduler_node == rank || g >= st.executors.size())
      continue;
    for (std::size_t i = 0; i < c.groups[g].executor_nodes.size() && i < st.executors[g].size();
         ++i)
      if (c.groups[g].executor_nodes[i] == rank && st.executors[g][i])
        // (a system message, taken by its down handler: not part of its typed interface)
        caf::anon_send(caf::actor_cast<caf::actor>(st.schedulers[g]),
                       caf::down_msg{st.executors[g][i].address(), reason});
  }
  if (st.router)
    self->send(*st.router, node_event{.rank = rank, .is_up = false,
                                      .address = address_of(st.params.config, rank), .reason = why});
}

std::string startup_timeout_reason(const node_state& st) {
  const cluster_config& c = st.params.config;
  std::string why = fmt::format("the cluster was not ready within {} s (cluster.startup_timeout_s)",
                                c.cluster.startup_timeout_s);
  // Which node kept it waiting: the message named none ("waiting for 1 more node(s)" was the
  // only other word), so a node never started on its host, or one that cannot reach this one,
  // had to be guessed.
  std::vector<std::string> missing;
  for (std::size_t r = 1; r < c.nodes.size(); ++r)
    if (r >= st.nodes.size() || !st.nodes[r])
      missing.push_back(fmt::format("{} ({})", r, address_of(c, int(r))));
  if (!missing.empty())
    return fmt::format(
        "{}: {} {} never joined (is `deepinfer node --rank N` running there with the same file, "
        "and can it reach the coordinator at {}?)",
        why, missing.size() == 1 ? "node" : "nodes", fmt::join(missing, ", "), address_of(c, 0));
  return why +
         ": every node joined; the groups were still starting (executors load the model "
         "first: a larger checkpoint may need a larger cluster.startup_timeout_s)";
}

void fail_startup(node_self self, const std::string& reason) {
  node_state& st = self->state;
  if (st.is_stopping) return;
  st.log->error("the cluster could not start: {}", reason);
  shutdown_cluster(self, 1);
}

void shutdown_cluster(node_self self, int exit_code) {
  node_state& st = self->state;
  if (st.is_stopping) return;
  st.is_stopping = true;
  st.log->info("shutting the cluster down");
  auto stop_rest = [=] {
    node_state& s = self->state;
    for (const scheduler_actor& sch : s.schedulers) self->send_exit(sch, caf::exit_reason::user_shutdown);
    auto pending = std::make_shared<int>(0);
    for (std::size_t r = 1; r < s.nodes.size(); ++r)
      if (s.nodes[r]) ++*pending;
    auto finish = [=] {
      if (--*pending <= 0) stop_node(self, exit_code);
    };
    if (*pending == 0) return stop_node(self, exit_code);
    for (std::size_t r = 1; r < s.nodes.size(); ++r)
      if (s.nodes[r])
        self->request(*s.nodes[r], std::chrono::seconds(s.params.config.cluster.shutdown_timeout_s),
                      shutdown_atom::value)
            .then([=](bool) { finish(); }, [=](caf::error&) { finish(); });
  };
  if (!st.router) return stop_rest();
  self->request(*st.router, std::chrono::seconds(st.params.config.cluster.shutdown_timeout_s), shutdown_atom::value)
      .then([=](bool) { stop_rest(); }, [=](caf::error&) { stop_rest(); });
}

}  // namespace di::actors::detail
