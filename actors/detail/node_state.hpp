// The node actor's state and the functions its source files share (node_actor.cpp: local
// spawning, monitoring, shutdown of a node; node_deploy.cpp: the coordinator's join, deploy
// and cluster shutdown).
#pragma once

#include "actors/model_assets.hpp"
#include "actors/node_actor.hpp"

#include <caf/expected.hpp>
#include <spdlog/logger.h>

#include <optional>
#include <vector>

namespace di::actors::detail {

struct node_state {
  static inline const char* name = "node";
  node_state() = default;

  node_params params;
  std::shared_ptr<spdlog::logger> log;
  std::optional<model_assets> assets;  // loaded when a router or scheduler is spawned here
  std::vector<caf::actor> local_actors;  // spawned on this node
  std::optional<node_actor> coordinator;  // nodes of rank > 0
  bool is_stopping = false;
  // Coordinator only.
  std::vector<std::optional<node_actor>> nodes;  // by rank; [0] unused
  std::vector<node_event> node_events;
  int num_joined = 1;
  bool is_deploying = false;
  bool is_ready = false;
  int num_pending = 0;  // answers outstanding in the current deploy phase
  std::vector<std::vector<executor_actor>> executors;
  std::vector<scheduler_actor> schedulers;
  std::optional<router_actor> router;
};

using node_self = local_node_actor::stateful_pointer<node_state>;

// node_actor.cpp: what every node does.
caf::expected<executor_actor> spawn_executor_here(node_self self, const spawn_executor& order);
caf::expected<scheduler_actor> spawn_scheduler_here(node_self self, const spawn_scheduler& order);
void spawn_router_here(node_self self, spawn_router order,
                       std::function<void(caf::expected<router_ready>)> done);
/// Stops this node's actors and the node itself.
void stop_node(node_self self, int exit_code);

// node_deploy.cpp: the coordinator.
caf::result<int> on_join(node_self self, join_cluster& msg);
void start_coordinator(node_self self);
void deploy(node_self self);
void on_node_down(node_self self, int rank, const caf::error& reason);
void fail_startup(node_self self, const std::string& reason);
/// Why the cluster is not ready at cluster.startup_timeout_s: the nodes that never joined, by
/// rank and address, or that every node joined and the groups were still starting.
std::string startup_timeout_reason(const node_state& st);
/// Orderly shutdown of the whole cluster (the coordinator).
void shutdown_cluster(node_self self, int exit_code);

}  // namespace di::actors::detail
