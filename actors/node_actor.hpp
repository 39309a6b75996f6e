// The node actor: one per process. Every node spawns the actors the coordinator orders on it
// (executors, schedulers, the router, which it also publishes for clients) and stops them when
// told to. The node of rank 0 is the coordinator: it waits for every node of the cluster file
// to join (same resolved file, checked by fingerprint), spawns executors, then schedulers, then
// the router, reports `ready: HOST:PORT`, monitors every node (a node that goes down is
// reported to the router) and shuts the cluster down in order: router (live requests end with
// "shutting down"), schedulers, nodes and their executors. A node whose coordinator goes away
// stops too.
#pragma once

#include "actors/messages.hpp"
#include "config/cluster_config.hpp"

#include <caf/actor_system.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <string>

namespace di::actors {

struct node_params {
  cluster_config config;
  int rank = 0;
  /// Called once (coordinator) with the address clients connect to.
  std::function<void(const std::string&)> on_ready;
  /// Set to non-zero when the node stops because something failed.
  std::shared_ptr<std::atomic<int>> exit_code = std::make_shared<std::atomic<int>>(0);
};

local_node_actor spawn_node_actor(caf::actor_system& sys, node_params params);

}  // namespace di::actors
