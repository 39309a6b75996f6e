// engine and the job actor (see engine.hpp). A job actor submits every generation of its job
// at once, forwards replies and events to the job's sink, turns an abort into one abort per
// live generation at the router, ends its generations with an error if the router goes down,
// and quits when all of them have ended.
#include "server/engine.hpp"

#include "actors/basp_frame_guard.hpp"
#include "actors/logging.hpp"

#include <caf/all.hpp>

#include <set>

namespace di::server {

namespace {

using actors::client_handle;

constexpr auto submit_timeout = std::chrono::seconds(60);
constexpr std::uint64_t all_requests = std::uint64_t(-1);

struct job_state {
  static inline const char* name = "http_job";
  job_state() = default;
  actors::router_actor router;
  std::shared_ptr<job_sink> sink;
  std::set<std::uint64_t> live;  // submitted, not ended
  bool is_aborted = false;
};

using job_self = client_handle::stateful_pointer<job_state>;

void end(job_self self, std::uint64_t index) {
  self->state.live.erase(index);
  if (self->state.live.empty()) self->quit();
}

/// Ends `index` with a final event: the cluster can no longer serve it (the router is lost).
void fail(job_self self, std::uint64_t index, const std::string& why) {
  runtime::token_event e{.request_id = index,
                         .status = runtime::sequence_status::finished_error,
                         .error = why,
                         .failure = runtime::failure_kind::unavailable};
  self->state.sink->on_events(index, {std::move(e)});
  end(self, index);
}

void submit(job_self self, actors::submit_request req) {
  const std::uint64_t index = req.id;
  // Past the router node's bound the request would close the connection, failing every
  // request on it: it alone is refused.
  req.max_event_bytes = actors::basp_message_limit();
  if (std::string why = actors::submit_size_error(req); !why.empty()) {
    self->state.sink->on_reply(
        index,
        {.accepted = false, .error = std::move(why), .kind = runtime::failure_kind::invalid});
    return end(self, index);
  }
  self->request(self->state.router, submit_timeout, std::move(req))
      .then(
          [=](actors::submit_reply& reply) {
            if (!self->state.live.contains(index)) return;
            const bool accepted = reply.accepted;
            self->state.sink->on_reply(index, std::move(reply));
            if (!accepted) return end(self, index);
            if (self->state.is_aborted)
              self->send(self->state.router, actors::abort_request{index});
          },
          [=](caf::error& err) {
            if (!self->state.live.contains(index)) return;
            // The job monitors the router from its start, so a router that has just stopped
            // (request_receiver_down) is followed by the down message, which fails this
            // request with the reason.
            std::string why = actors::submit_error_text(err, "");
            if (why.empty()) return;
            self->state.sink->on_reply(index, {.accepted = false,
                                               .error = std::move(why),
                                               .kind = runtime::failure_kind::unavailable});
            end(self, index);
          });
}

client_handle::behavior_type job_impl(job_self self, actors::router_actor router,
                                      std::vector<actors::submit_request> requests,
                                      std::shared_ptr<job_sink> sink) {
  self->state.router = std::move(router);
  self->state.sink = std::move(sink);
  self->monitor(self->state.router);
  self->set_down_handler([=](caf::down_msg& dm) {
    const std::string why = actors::router_gone_message(dm.reason);
    for (std::uint64_t index : std::set<std::uint64_t>(self->state.live)) fail(self, index, why);
  });
  for (std::size_t i = 0; i < requests.size(); ++i) {
    requests[i].id = i;
    self->state.live.insert(i);
  }
  for (actors::submit_request& r : requests) submit(self, std::move(r));
  return {
      [=](actors::client_events& msg) {
        std::map<std::uint64_t, std::vector<runtime::token_event>> by_index;
        for (runtime::token_event& e : msg.events)
          if (self->state.live.contains(e.request_id))
            by_index[e.request_id].push_back(std::move(e));
        for (auto& [index, events] : by_index) {
          const bool finished = events.back().is_finished();
          self->state.sink->on_events(index, std::move(events));
          if (finished) end(self, index);
        }
      },
      [=](actors::abort_request& msg) {
        self->state.is_aborted = true;
        for (std::uint64_t index : self->state.live)
          if (msg.id == all_requests || msg.id == index)
            self->send(self->state.router, actors::abort_request{index});
      },
  };
}

}  // namespace

void job_handle::abort() {
  caf::anon_send(actor_, actors::abort_request{all_requests});
}

engine::engine(caf::actor_system& sys, actors::router_actor router,
               std::function<actors::router_actor()> reconnect)
    : sys_(sys), router_(std::move(router)), reconnect_(std::move(reconnect)) {
  if (!reconnect_) return;
  watch(router_);
  reconnector_ = std::thread([this] { reconnect_loop(); });
}

engine::~engine() {
  shutdown();
}

actors::router_actor engine::router() const {
  std::lock_guard lock(mutex_);
  return router_;
}

void engine::watch(const actors::router_actor& router) {
  // Held in watcher_: an actor nobody references and with nothing pending is collected at
  // once (exit reason "unreachable"), and its monitor with it.
  caf::actor w = sys_.spawn([link = link_, router](caf::event_based_actor* self) -> caf::behavior {
    self->monitor(router);
    self->set_down_handler([link, self](caf::down_msg& dm) {
      {
        std::lock_guard lock(link->mutex);
        link->router_lost = true;
        link->why = actors::router_gone_message(dm.reason);
      }
      link->wake.notify_all();
      self->quit();
    });
    return {[](int) {}};  // lives until the router is down (the engine holds its handle)
  });
  std::lock_guard lock(mutex_);
  if (watcher_) caf::anon_send_exit(watcher_, caf::exit_reason::user_shutdown);
  watcher_ = std::move(w);
}

void engine::reconnect_loop() {
  auto log = actors::component_logger("serve");
  link_state& link = *link_;
  while (true) {
    {
      std::unique_lock lock(link.mutex);
      link.wake.wait(lock, [&] { return link.router_lost || link.stopping; });
      if (link.stopping) return;
    }
    std::string why;
    {
      std::lock_guard lock(link.mutex);
      why = link.why;
    }
    log->warn("{}; connecting to it again every second", why);
    std::optional<actors::router_actor> found;
    std::string last_reason;
    while (!found) {
      // At most one attempt a second, also after a success whose router was already gone (a
      // node still shutting down answered with a dead router: the loop spun, flooding the log).
      {
        std::unique_lock lock(link.mutex);
        if (link.wake.wait_until(lock, next_attempt_, [&] { return link.stopping; })) return;
      }
      next_attempt_ = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      try {
        found = reconnect_();
      } catch (const std::exception& e) {
        if (e.what() != last_reason) log->warn("the router: {}", e.what());  // once a reason
        last_reason = e.what();
      }
    }
    {
      std::lock_guard lock(mutex_);
      router_ = *found;
    }
    {
      std::lock_guard lock(link.mutex);
      if (link.stopping) return;
      link.router_lost = false;
    }
    watch(*found);
    log->info("connected to the router again");
  }
}

std::shared_ptr<job_handle> engine::submit(std::vector<actors::submit_request> requests,
                                           std::shared_ptr<job_sink> sink) {
  auto actor = sys_.spawn(job_impl, router(), std::move(requests), std::move(sink));
  std::lock_guard lock(mutex_);
  if (jobs_.size() >= prune_at_) {
    std::erase_if(jobs_, [](const caf::actor_addr& a) { return !caf::actor_cast<caf::actor>(a); });
    prune_at_ = std::max<std::size_t>(64, 2 * jobs_.size());
  }
  jobs_.push_back(actor.address());
  return std::make_shared<job_handle>(std::move(actor));
}

void engine::abort_all() {
  std::lock_guard lock(mutex_);
  for (const caf::actor_addr& a : jobs_)
    if (auto actor = caf::actor_cast<caf::actor>(a))
      caf::anon_send(actor, actors::abort_request{all_requests});
}

void engine::shutdown() {
  {
    std::lock_guard lock(mutex_);
    for (const caf::actor_addr& a : jobs_)
      if (auto actor = caf::actor_cast<caf::actor>(a))
        caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
    jobs_.clear();
    if (watcher_) caf::anon_send_exit(watcher_, caf::exit_reason::user_shutdown);
    watcher_ = nullptr;
  }
  {
    std::lock_guard lock(link_->mutex);
    link_->stopping = true;
  }
  link_->wake.notify_all();
  if (reconnector_.joinable()) reconnector_.join();
}

void engine::fetch_status(
    std::function<void(std::optional<actors::cluster_status>, std::string)> done) {
  {  // lost: say so at once (a request to the old router waited out its 5 s timeout)
    std::lock_guard lock(link_->mutex);
    if (link_->router_lost) return done(std::nullopt, "lost the router; looking for it again");
  }
  sys_.spawn([router = router(), done = std::move(done)](caf::event_based_actor* self) {
    self->request(router, std::chrono::seconds(5), actors::status_atom::value)
        .then([=](actors::cluster_status& s) { done(std::move(s), {}); },
              [=](caf::error& err) { done(std::nullopt, actors::describe(err)); });
  });
}

}  // namespace di::server
