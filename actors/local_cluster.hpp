// A whole cluster inside one actor system: the executors, schedulers and router of the
// cluster file's groups, without nodes or networking. Tests use it with toy runners; an
// in-process front end (e.g. `generate`) can use it to run requests through the same actors
// as a cluster.
#pragma once

#include "actors/client_actor.hpp"
#include "actors/model_assets.hpp"
#include "actors/router_actor.hpp"
#include "actors/runner_factory.hpp"

#include <caf/actor_system.hpp>

#include <functional>
#include <vector>

namespace di::actors {

struct local_cluster_params {
  cluster_config config;  ///< limits, kv, logging, groups (node ranks are ignored)
  model_assets assets;
  /// Makes the runner of executor `index` of `group` (default: make_step_runner(config)).
  std::function<runner_bundle(int group, int index)> make_runner;
};

class local_cluster {
 public:
  /// Spawns every actor and waits until the router is ready; throws di::error otherwise.
  local_cluster(caf::actor_system& sys, local_cluster_params params);
  ~local_cluster();
  local_cluster(const local_cluster&) = delete;
  local_cluster& operator=(const local_cluster&) = delete;

  const router_handle& router() const { return router_; }
  const std::vector<scheduler_actor>& schedulers() const { return schedulers_; }
  const std::vector<std::vector<executor_actor>>& executors() const { return executors_; }
  /// The router's view of the cluster (blocks).
  cluster_status status();
  /// Stops every actor (router first, then schedulers, then executors).
  void shutdown();

 private:
  caf::actor_system& sys_;
  std::vector<std::vector<executor_actor>> executors_;
  std::vector<scheduler_actor> schedulers_;
  router_handle router_;
  bool is_stopped_ = false;
};

}  // namespace di::actors
