// Failure and misuse, in process: aborts in every phase give the blocks back; a device that
// fails, an executor that stops answering or executors that disagree fail their group's
// requests with a clear message while another group keeps serving; refusals are immediate;
// unexpected messages and vanished clients do not hurt the router.
#include "tests/actors/actor_test_util.hpp"

#include "actors/executor_actor.hpp"
#include "actors/scheduler_actor.hpp"
#include "actors/toy_runner.hpp"
#include "common/error.hpp"

#include <condition_variable>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <thread>

namespace di::test {

namespace {

/// A toy runner that throws, stalls or lies at a given step.
class faulty_runner : public runtime::step_runner {
 public:
  enum class fault { none, throw_at, stall_at, other_tokens };
  faulty_runner(actors::toy_runner_config c, fault f, std::uint64_t at) : inner_(c), fault_(f), at_(at) {}
  runtime::runner_info info() const override { return inner_.info(); }
  runtime::step_result run(const runtime::step_plan& plan) override {
    if (plan.step_id >= at_ && fault_ == fault::throw_at) DI_FAIL("device lost (injected)");
    if (plan.step_id == at_ && fault_ == fault::stall_at) std::this_thread::sleep_for(std::chrono::seconds(3));
    runtime::step_result r = inner_.run(plan);
    if (plan.step_id >= at_ && fault_ == fault::other_tokens)
      for (auto& o : r.outputs)
        for (auto& t : o.token_ids) t = (t + 1) % 1000;
    return r;
  }

 private:
  actors::toy_runner inner_;
  fault fault_;
  std::uint64_t at_;
};

actors::toy_runner_config toy_of(const cluster_config& c) {
  return {.vocab_size = c.model.toy.vocab_size, .entries_per_block = c.model.toy.entries_per_block,
          .num_blocks = std::int32_t(c.kv.pool_tokens / c.model.toy.entries_per_block),
          .max_model_len = c.model.toy.max_model_len, .step_ms = c.model.toy.step_ms};
}

/// The toy runner of `c` and its geometry, as an executor's make_runner returns them.
actors::runner_bundle toy_bundle(const cluster_config& c) {
  const actors::toy_runner_config t = toy_of(c);
  return {std::make_unique<actors::toy_runner>(t), actors::toy_runner::geometry(t)};
}

/// Runs `stop` when the scope ends, whatever fails in it.
struct scope_stop {
  std::function<void()> stop;
  ~scope_stop() { stop(); }
};

/// Tells each of `all` to stop in order (user_shutdown); the actor system waits for them.
void stop_actors(caf::scoped_actor& self, std::initializer_list<caf::actor> all) {
  for (const caf::actor& a : all) self->send_exit(a, caf::exit_reason::user_shutdown);
}

/// Runners of group `g` executor `i`: `faulty(g, i)` decides which one is faulty.
actors::local_cluster_params params_with(const cluster_config& c, faulty_runner::fault f, int bad_group,
                                         int bad_index, std::uint64_t at) {
  actors::local_cluster_params p{.config = c, .assets = toy_assets(c)};
  p.make_runner = [c, f, bad_group, bad_index, at](int g, int i) {
    const bool bad = g == bad_group && i == bad_index;
    actors::toy_runner_config t = toy_of(c);
    return actors::runner_bundle{std::make_unique<faulty_runner>(t, bad ? f : faulty_runner::fault::none, at),
                                 actors::toy_runner::geometry(t)};
  };
  return p;
}

/// A scoped actor acting as a client: submit, then collect events until the request ends.
struct raw_client {
  explicit raw_client(caf::actor_system& sys) : self(sys) {}
  actors::submit_reply submit(const actors::router_actor& r, actors::submit_request req) {
    actors::submit_reply out;
    self->request(r, std::chrono::seconds(10), std::move(req))
        .receive([&](actors::submit_reply& rep) { out = std::move(rep); },
                 [&](caf::error& err) { out.error = actors::describe(err); });
    return out;
  }
  /// Events for `id` until a final one or until `timeout` has passed.
  std::vector<runtime::token_event> until_final(std::uint64_t id, std::chrono::milliseconds timeout) {
    std::vector<runtime::token_event> got;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    bool done = false;
    while (!done) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      bool timed_out = false;
      self->receive([&](actors::client_events& ev) {
                      for (auto& e : ev.events)
                        if (e.request_id == id) {
                          done |= e.is_finished();
                          got.push_back(std::move(e));
                        }
                    },
                    caf::after(left) >> [&] { timed_out = true; });
      if (timed_out) break;
    }
    return got;
  }
  /// Events for `id` until one carries tokens or is final, or until `timeout` has passed.
  std::vector<runtime::token_event> until_tokens(std::uint64_t id,
                                                 std::chrono::milliseconds timeout) {
    std::vector<runtime::token_event> got;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (got.empty() || (got.back().token_ids.empty() && !got.back().is_finished())) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      bool timed_out = false;
      self->receive(
          [&](actors::client_events& ev) {
            for (auto& e : ev.events)
              if (e.request_id == id) got.push_back(std::move(e));
          },
          caf::after(left) >> [&] { timed_out = true; });
      if (timed_out) break;
    }
    return got;
  }
  caf::scoped_actor self;
};

}  // namespace

TEST_CASE("abort while queued, mid-prefill and mid-decode: status abort, blocks back") {
  test_system ts;
  const cluster_config c = toy_config({"kv.enable_prefix_caching=false", "scheduler.max_num_batched_tokens=16",
                                       "scheduler.max_num_running=1", "model.toy.step_ms=5"});
  actors::local_cluster cluster(ts.sys, {.config = c, .assets = toy_assets(c)});
  const std::int64_t free_at_start = cluster.status().groups[0].stats.num_free_blocks;
  raw_client client(ts.sys);
  auto long_prompt = ids_request(random_prompt(1, 1200), 1000);
  long_prompt.id = 1;
  // 75 prefill steps (375 ms at least; 25 left a loaded machine little room): still in prefill
  // when its abort comes
  REQUIRE(client.submit(cluster.router(), long_prompt).accepted);
  auto queued = ids_request(random_prompt(2, 10), 1000);
  queued.id = 2;
  REQUIRE(client.submit(cluster.router(), queued).accepted);  // waits: one running at most
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  client.self->send(cluster.router(), actors::abort_request{2});
  auto q = client.until_final(2, std::chrono::seconds(5));
  REQUIRE(!q.empty());
  CHECK(q.back().status == runtime::sequence_status::finished_abort);
  client.self->send(cluster.router(), actors::abort_request{1});
  auto p = client.until_final(1, std::chrono::seconds(5));
  REQUIRE(!p.empty());
  CHECK(p.back().status == runtime::sequence_status::finished_abort);
  for (const auto& e : p) CHECK(e.token_ids.empty());  // it never reached decode
  auto decode = ids_request(random_prompt(3, 10), 1000);
  decode.id = 3;
  REQUIRE(client.submit(cluster.router(), decode).accepted);
  // Its first tokens, not final (1000 tokens take 5 s of steps). This waited 100 ms and then
  // required an event: a loaded machine can take longer to deliver the first one.
  auto first = client.until_tokens(3, std::chrono::seconds(5));
  REQUIRE(!first.empty());
  CHECK(!first.back().token_ids.empty());
  CHECK_FALSE(first.back().is_finished());
  client.self->send(cluster.router(), actors::abort_request{3});
  auto d = client.until_final(3, std::chrono::seconds(5));
  REQUIRE(!d.empty());
  CHECK(d.back().status == runtime::sequence_status::finished_abort);
  const actors::cluster_status s = cluster.status();
  CHECK(s.groups[0].stats.counters.num_aborts == 3);
  CHECK(s.groups[0].stats.num_free_blocks == free_at_start);
  CHECK(s.groups[0].stats.num_used_blocks == 0);
}

TEST_CASE("a failing device fails its group's requests; the other group keeps serving") {
  test_system ts;
  const cluster_config c = toy_config({"model.toy.step_ms=2"}, 2);
  actors::local_cluster cluster(ts.sys, params_with(c, faulty_runner::fault::throw_at, 1, 0, 3));
  std::vector<actors::submit_request> reqs;
  for (int i = 0; i < 8; ++i) reqs.push_back(ids_request(random_prompt(10 + std::uint64_t(i), 20), 20));
  const auto out = actors::run_requests(ts.sys, cluster.router(), reqs, 8);
  int failed = 0;
  for (const auto& r : out) {
    if (r.reply.group == 1) {
      ++failed;
      CHECK(r.finish_reason() == "error");
      CHECK(r.error.find("device lost (injected)") != std::string::npos);
      CHECK(r.error.find("group 1") != std::string::npos);
      if (r.reply.accepted)  // failed while running: the group is down (a 503 for serve)
        CHECK(r.failure == runtime::failure_kind::unavailable);
      else
        CHECK(r.reply.kind == runtime::failure_kind::unavailable);
    } else {
      CHECK(r.finish_reason() == "length");
    }
  }
  CHECK(failed > 0);
  const auto status = cluster.status();
  CHECK_FALSE(status.groups[1].is_up);
  CHECK(status.groups[0].is_up);
  const auto after = actors::run_requests(ts.sys, cluster.router(), reqs, 8);
  for (const auto& r : after) {
    CHECK(r.finish_reason() == "length");
    CHECK(r.reply.group == 0);
  }
}

TEST_CASE("an executor that stops answering fails the group at the step deadline") {
  test_system ts;
  const cluster_config c = toy_config({"scheduler.step_timeout_s=1"});
  actors::local_cluster cluster(ts.sys, params_with(c, faulty_runner::fault::stall_at, 0, 0, 2));
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = actors::run_requests(ts.sys, cluster.router(), {ids_request(random_prompt(5, 8), 50)}, 1);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(out[0].finish_reason() == "error");
  CHECK(out[0].error.find("within 1 s") != std::string::npos);
  CHECK(secs < 2.9);  // before the stalled step would have finished
}

TEST_CASE("an executor stopped while its runner loads fails the start naming why") {
  // The scheduler's info request to an executor that quits while its runner loads is answered
  // request_receiver_down (the executor's goodbye to the requests it holds) before the down
  // message that carries the reason: the start failed with "executor 0 (node 0) did not start:
  // request_receiver_down". The load waits here until the executor has been told to stop.
  test_system ts;
  const cluster_config c = toy_config();
  struct load_gate {
    std::mutex mutex;
    std::condition_variable cv;
    bool is_loading = false;
    bool is_released = false;
  };
  auto gate = std::make_shared<load_gate>();
  actors::executor_params ep;
  ep.make_runner = [c, gate] {
    std::unique_lock lock(gate->mutex);
    gate->is_loading = true;
    gate->cv.notify_all();
    gate->cv.wait(lock, [&] { return gate->is_released; });
    return toy_bundle(c);
  };
  ep.label = "group 0 executor 0";
  caf::scoped_actor self{ts.sys};
  const actors::executor_actor exec = actors::spawn_executor_actor(ts.sys, std::move(ep));
  const actors::scheduler_actor sched = test::spawn_one_executor_group(ts.sys, exec, c);
  const actors::router_handle router = actors::spawn_router_actor(
      ts.sys, {.groups = {sched}, .status_interval_s = 0, .startup_timeout_s = 30});
  auto release = [&] {
    std::lock_guard lock(gate->mutex);
    gate->is_released = true;
    gate->cv.notify_all();
  };
  const scope_stop guard{[&] {  // whatever fails: the load ends and every actor stops
    release();
    stop_actors(self, {caf::actor_cast<caf::actor>(router), caf::actor_cast<caf::actor>(sched),
                       caf::actor_cast<caf::actor>(exec)});
  }};
  {
    std::unique_lock lock(gate->mutex);  // the scheduler's info request is being served
    REQUIRE(gate->cv.wait_for(lock, std::chrono::seconds(10), [&] { return gate->is_loading; }));
  }
  self->send_exit(exec,
                  caf::make_error(caf::sec::runtime_error, "the device went away (injected)"));
  release();  // the load ends after the exit is queued: its answer is never read
  std::string error;
  self->request(router, std::chrono::seconds(30), actors::info_atom::value)
      .receive([&](int) { error = "it started"; },
               [&](caf::error& err) { error = actors::describe(err); });
  CHECK(error ==
        "group 0 did not start: group 0: executor 0 (node 0) did not start: the device went away "
        "(injected)");
}

TEST_CASE("an executor that stops in order (its node shut down) is named as such") {
  // SIGTERM to an executor's node stops its actors in order: the scheduler's down message
  // carries no error of the executor's own, and the client read "group 0: executor 0 on node 1
  // is down (no error)" (user_shutdown in process).
  CHECK(actors::describe_down(caf::error{}) == "stopped: its node shut down");
  CHECK(actors::describe_down(caf::exit_reason::normal) == "stopped: its node shut down");
  CHECK(actors::describe_down(actors::router_shutdown_reason()) ==
        "the router shut down (the cluster stopped)");  // a message of its own is kept
  CHECK(actors::describe_down(caf::exit_reason::kill) == "kill");
  test_system ts;
  const cluster_config c = toy_config({"model.toy.step_ms=5"});
  actors::executor_params ep;
  ep.make_runner = [c] { return toy_bundle(c); };
  ep.label = "group 0 executor 0";
  caf::scoped_actor self{ts.sys};
  const actors::executor_actor exec = actors::spawn_executor_actor(ts.sys, std::move(ep));
  const actors::scheduler_actor sched = test::spawn_one_executor_group(ts.sys, exec, c);
  const actors::router_handle router =
      actors::spawn_router_actor(ts.sys, {.groups = {sched},
                                          .status_interval_s = 0,
                                          .startup_timeout_s = 30,
                                          .vocab_size = c.model.toy.vocab_size});
  const scope_stop guard{[&] {  // whatever fails: every actor stops
    stop_actors(self, {caf::actor_cast<caf::actor>(router), caf::actor_cast<caf::actor>(sched),
                       caf::actor_cast<caf::actor>(exec)});
  }};
  std::string started;
  self->request(router, std::chrono::seconds(30), actors::info_atom::value)
      .receive([&](int) { started = "yes"; },
               [&](caf::error& err) { started = actors::describe(err); });
  REQUIRE(started == "yes");
  raw_client client(ts.sys);
  auto req = ids_request(random_prompt(8, 10), 1000);  // 5 s of steps
  req.id = 1;
  REQUIRE(client.submit(caf::actor_cast<actors::router_actor>(router), req).accepted);
  REQUIRE(!client.until_tokens(1, std::chrono::seconds(5)).empty());
  self->send_exit(exec, caf::exit_reason::user_shutdown);  // what its node does on SIGTERM
  const auto events = client.until_final(1, std::chrono::seconds(5));
  REQUIRE(!events.empty());
  REQUIRE(events.back().is_finished());
  CHECK_MESSAGE(
      events.back().error.find("executor 0 on node 0 is down (stopped: its node shut down)") !=
          std::string::npos,
      events.back().error);
}

TEST_CASE("executors of a group run in lockstep and must agree") {
  const auto reqs = std::vector<actors::submit_request>{ids_request(random_prompt(6, 30), 12),
                                                        ids_request(random_prompt(7, 50), 9)};
  std::vector<actors::request_outcome> one, two;
  {
    test_system ts;
    const cluster_config c = toy_config();
    actors::local_cluster cluster(ts.sys, {.config = c, .assets = toy_assets(c)});
    one = actors::run_requests(ts.sys, cluster.router(), reqs, 2);
  }
  {
    test_system ts;
    const cluster_config c = toy_config({}, 1, 2);
    actors::local_cluster cluster(ts.sys, {.config = c, .assets = toy_assets(c)});
    two = actors::run_requests(ts.sys, cluster.router(), reqs, 2);
  }
  for (std::size_t i = 0; i < reqs.size(); ++i) CHECK(one[i].output_ids == two[i].output_ids);
  test_system ts;
  const cluster_config c = toy_config({}, 1, 2);
  actors::local_cluster cluster(ts.sys, params_with(c, faulty_runner::fault::other_tokens, 0, 1, 2));
  const auto out = actors::run_requests(ts.sys, cluster.router(), reqs, 2);
  for (const auto& r : out) {
    INFO(r.error);
    CHECK(r.finish_reason() == "error");
    CHECK(r.error.find("disagree") != std::string::npos);  // however the request met the failure
  }
}

TEST_CASE("limits refuse at once with a clear message") {
  test_system ts;
  const cluster_config c = toy_config({"model.toy.step_ms=20", "scheduler.max_num_running=1",
                                       "scheduler.max_num_queued=1", "router.max_live_requests=3"});
  actors::local_cluster cluster(ts.sys, {.config = c, .assets = toy_assets(c)});
  raw_client client(ts.sys);
  std::vector<actors::submit_reply> replies;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::uint64_t i = 0; i < 5; ++i) {
    auto r = ids_request(random_prompt(20 + i, 8), 200);
    r.id = i;
    replies.push_back(client.submit(cluster.router(), r));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // let the first one start
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(replies[0].accepted);
  CHECK(replies[1].accepted);
  CHECK_FALSE(replies[2].accepted);
  // the scheduler's status apart from its message; the command-line client shows both
  CHECK(replies[2].status == runtime::admission_status::queue_full);
  CHECK(replies[2].error.find("queue_full") == std::string::npos);
  CHECK(actors::refusal_text(replies[2]) == "queue_full: " + replies[2].error);
  CHECK(replies[0].status == runtime::admission_status::accepted);
  CHECK(replies[2].kind == runtime::failure_kind::overloaded);  // a 429 for serve
  CHECK(replies[0].kind == runtime::failure_kind::none);
  CHECK(secs < 1.0);
  auto dup = ids_request(random_prompt(30, 8), 200);
  dup.id = 0;  // still live
  const actors::submit_reply d = client.submit(cluster.router(), dup);
  CHECK(d.error.find("already live") != std::string::npos);
  CHECK(d.kind == runtime::failure_kind::invalid);
  auto cold = ids_request(random_prompt(31, 8), 200);
  cold.id = 9;
  cold.params.temperature = -1;
  const actors::submit_reply t = client.submit(cluster.router(), cold);
  CHECK(t.kind == runtime::failure_kind::invalid);
  CHECK(t.param == "temperature");
  client.self->send(cluster.router(), actors::abort_request{0});
  client.self->send(cluster.router(), actors::abort_request{1});
}

TEST_CASE("unexpected messages and vanished clients do not hurt the router") {
  test_system ts;
  const cluster_config c = toy_config({"model.toy.step_ms=5"});
  actors::local_cluster cluster(ts.sys, {.config = c, .assets = toy_assets(c)});
  caf::scoped_actor self{ts.sys};
  auto untyped = caf::actor_cast<caf::actor>(cluster.router());
  self->send(untyped, std::string("hello"));
  bool refused = false;
  self->request(untyped, std::chrono::seconds(5), 42).receive([](int) {}, [&](caf::error&) { refused = true; });
  CHECK(refused);
  // A client that disappears with a live request: the router aborts it.
  actors::client_params p{.router = cluster.router(), .requests = {ids_request(random_prompt(8, 8), 2000)}};  // 10 s of steps
  auto gone = actors::spawn_client_actor(ts.sys, std::move(p));
  REQUIRE(wait_for([&] { return cluster.status().groups[0].stats.num_running == 1; }));
  self->send_exit(gone, caf::exit_reason::kill);
  CHECK(wait_for([&] { return cluster.status().groups[0].stats.num_running == 0; }));
  const auto s = cluster.status();
  CHECK(s.router.num_unexpected >= 2);
  CHECK(s.groups[0].stats.counters.num_aborts == 1);
  const auto out = actors::run_requests(ts.sys, cluster.router(), {ids_request(random_prompt(9, 8), 4)}, 1);
  CHECK(out[0].finish_reason() == "length");
}

}  // namespace di::test
