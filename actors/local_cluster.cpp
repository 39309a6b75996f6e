// local_cluster (see local_cluster.hpp).
#include "actors/local_cluster.hpp"

#include "actors/executor_actor.hpp"
#include "actors/scheduler_actor.hpp"
#include "common/error.hpp"

#include <caf/all.hpp>

namespace di::actors {

local_cluster::local_cluster(caf::actor_system& sys, local_cluster_params params) : sys_(sys) {
  const cluster_config& c = params.config;
  if (!params.make_runner)
    params.make_runner = [c](int g, int) { return make_step_runner(c, c.groups[std::size_t(g)].executor_devices.at(0)); };
  std::vector<group_config> layout;  // everything on this process: node 0
  for (std::size_t g = 0; g < c.groups.size(); ++g) {
    layout.push_back({.executor_nodes = std::vector<int>(c.groups[g].executor_nodes.size(), 0)});
    std::vector<executor_actor> execs;
    for (std::size_t i = 0; i < c.groups[g].executor_nodes.size(); ++i)
      execs.push_back(spawn_executor_actor(
          sys, {.make_runner = [f = params.make_runner, g, i] { return f(int(g), int(i)); },
                .node = 0,
                .label = fmt::format("group {} executor {}", g, i)}));
    schedulers_.push_back(spawn_scheduler_actor(
        sys, {.group = int(g), .node = 0, .executors = execs,
              .executor_nodes = std::vector<int>(execs.size(), 0), .limits = c.scheduler,
              .kv = c.kv, .status_interval_s = c.logging.status_interval_s,
              .startup_timeout_s = c.cluster.startup_timeout_s,
              .eos_token_ids = params.assets.eos_token_ids, .tokenizer = params.assets.tokenizer}));
    executors_.push_back(std::move(execs));
  }
  router_ = spawn_router_actor(sys, {.groups = schedulers_,
                                     .layout = layout,
                                     .limits = c.router,
                                     .status_interval_s = c.logging.status_interval_s,
                                     .startup_timeout_s = c.cluster.startup_timeout_s,
                                     .vocab_size = params.assets.vocab_size,
                                     .tokenizer = params.assets.tokenizer});
  caf::scoped_actor self{sys};
  std::string failure;
  self->request(router_, std::chrono::seconds(c.cluster.startup_timeout_s), info_atom::value)
      .receive([](int) {}, [&](caf::error& err) { failure = describe(err); });
  if (!failure.empty()) {
    shutdown();
    DI_FAIL("the cluster did not start: {}", failure);
  }
}

local_cluster::~local_cluster() { shutdown(); }

cluster_status local_cluster::status() {
  caf::scoped_actor self{sys_};
  cluster_status out;
  std::string failure;
  self->request(router_, std::chrono::seconds(10), status_atom::value)
      .receive([&](cluster_status& s) { out = std::move(s); }, [&](caf::error& err) { failure = describe(err); });
  DI_CHECK(failure.empty(), "router status: {}", failure);
  return out;
}

void local_cluster::shutdown() {
  if (is_stopped_) return;
  is_stopped_ = true;
  caf::scoped_actor self{sys_};
  self->send_exit(router_, caf::exit_reason::user_shutdown);
  self->wait_for(router_);
  for (const scheduler_actor& s : schedulers_) self->send_exit(s, caf::exit_reason::user_shutdown);
  for (const scheduler_actor& s : schedulers_) self->wait_for(s);
  for (const auto& group : executors_)
    for (const executor_actor& e : group) self->send_exit(e, caf::exit_reason::user_shutdown);
  for (const auto& group : executors_)
    for (const executor_actor& e : group) self->wait_for(e);
}

}  // namespace di::actors
