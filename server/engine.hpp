// The HTTP front end's door into the cluster: a thread-safe submit of one HTTP request's
// generations (n choices x prompts) whose token events arrive through a callback, an abort
// that works from any thread, and the router's status. Each submitted job is one small CAF
// actor (server/job_actor.cpp) that is the router's client for that job: the router monitors
// it, so a job actor that dies also ends its requests. Bulk data never goes through here.
#pragma once

#include "actors/client_actor.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace di::server {

/// Receives a job's answers. Called on CAF threads, one call at a time per job, in order.
class job_sink {
 public:
  virtual ~job_sink() = default;
  /// The router's answer to generation `index` (accepted, or refused with a message).
  virtual void on_reply(std::size_t index, actors::submit_reply reply) = 0;
  /// Token events of generation `index`; the last one is finished.
  virtual void on_events(std::size_t index, std::vector<runtime::token_event> events) = 0;
};

/// A running job: abort() ends every generation that has not ended (thread-safe).
class job_handle {
 public:
  explicit job_handle(actors::client_handle actor) : actor_(std::move(actor)) {}
  void abort();

 private:
  actors::client_handle actor_;
};

class engine {
 public:
  /// `reconnect` (optional: serve in front of a running cluster) connects to the router again
  /// and throws di::error when it cannot; given it, a router that goes down (its cluster
  /// stopped or relaunched) is looked for again every second on a thread of the engine's, and
  /// requests and status go to the new one once it answers (serve stayed cut off for good).
  engine(caf::actor_system& sys, actors::router_actor router,
         std::function<actors::router_actor()> reconnect = {});
  ~engine();
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  /// Starts `requests` (their ids are replaced by their index). Thread-safe.
  std::shared_ptr<job_handle> submit(std::vector<actors::submit_request> requests,
                                     std::shared_ptr<job_sink> sink);
  /// The router's status, or the error; the callback runs on a CAF thread.
  void fetch_status(std::function<void(std::optional<actors::cluster_status>, std::string)> done);
  /// Aborts every request of every job still running; each ends as an abort (finish_reason
  /// "abort"), so its HTTP response still ends properly.
  void abort_all();
  /// Stops every job actor still running (the router aborts their requests) and the
  /// reconnecting thread.
  void shutdown();

 private:
  actors::router_actor router() const;
  void watch(const actors::router_actor& router);  // a down router wakes the reconnect loop
  void reconnect_loop();

  caf::actor_system& sys_;
  actors::router_actor router_;  // guarded by mutex_
  std::function<actors::router_actor()> reconnect_;
  mutable std::mutex mutex_;
  std::vector<caf::actor_addr> jobs_;  // pruned of ended jobs as it grows
  std::size_t prune_at_ = 64;
  /// What the router's watcher actors and the reconnecting thread share: it outlives the
  /// engine while a watcher still holds it.
  struct link_state {
    std::mutex mutex;
    std::condition_variable wake;
    bool router_lost = false;
    bool stopping = false;
    std::string why;  ///< router_gone_message of the last loss
  };
  std::shared_ptr<link_state> link_ = std::make_shared<link_state>();
  caf::actor watcher_;  // guarded by mutex_: monitors the current router
  std::chrono::steady_clock::time_point next_attempt_{};  // the reconnecting thread's own
  std::thread reconnector_;
};

}  // namespace di::server
