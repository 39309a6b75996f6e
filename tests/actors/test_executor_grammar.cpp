// The executor's response_format preparation: a spec the runner has compiled already is
// answered at once, not queued on the grammar thread behind a compile still running. And the
// scheduler's: a request aborted while its grammar compiles ends there, never admitted (a
// client's abort reaches it through the router before the compile ends), and the executors'
// compile for it stops unless another request still waits for it.
#include "actors/executor_actor.hpp"
#include "actors/router_actor.hpp"
#include "actors/scheduler_actor.hpp"
#include "actors/toy_runner.hpp"
#include "runtime/grammar/compile_interrupt.hpp"
#include "runtime/grammar/response_format.hpp"
#include "tests/actors/actor_test_util.hpp"
#include "tests/test_support.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

using namespace di;

namespace {

/// What the fake runner's grammar functions share with the test.
struct grammar_state {
  std::mutex mutex;
  std::condition_variable released_cv;
  bool released = false;
  std::set<std::string> compiled;
  int num_prepared = 0;  ///< calls of the preparer
};

/// A runner with no model: a preparer that blocks on "slow" until released, and a lookup of
/// the specs it has compiled.
class grammar_runner : public runtime::step_runner {
 public:
  explicit grammar_runner(std::shared_ptr<grammar_state> s) : s_(std::move(s)) {}
  runtime::runner_info info() const override { return {"fake", {}, 0, 64}; }
  runtime::step_result run(const runtime::step_plan&) override {
    DI_FAIL("the grammar test runs no steps");
  }
  std::function<void(const std::string&)> grammar_preparer() const override {
    return [s = s_](const std::string& spec) {
      std::unique_lock lock(s->mutex);
      ++s->num_prepared;
      if (spec == "slow") s->released_cv.wait(lock, [&] { return s->released; });
      s->compiled.insert(spec);
    };
  }
  std::function<bool(const std::string&)> grammar_lookup() const override {
    return [s = s_](const std::string& spec) {
      std::lock_guard lock(s->mutex);
      return s->compiled.count(spec) > 0;
    };
  }

 private:
  std::shared_ptr<grammar_state> s_;
};

}  // namespace

TEST_CASE("executor: a compiled response_format is answered at once, not behind a compile") {
  test::test_system ts;
  auto state = std::make_shared<grammar_state>();
  actors::executor_params p;
  p.make_runner = [state] {
    return actors::runner_bundle{std::make_unique<grammar_runner>(state), {}};
  };
  p.label = "grammar test executor";
  auto exec = actors::spawn_executor_actor(ts.sys, std::move(p));
  caf::scoped_actor self{ts.sys};
  const auto wait = std::chrono::seconds(30);
  // The runner loads on the first job; its grammar functions exist from then on.
  self->request(exec, wait, actors::info_atom::value)
      .receive([](actors::executor_info&) {}, [](caf::error& e) { FAIL(caf::to_string(e)); });
  auto prepare = [&](const std::string& spec) {
    std::string answer = "(none)";
    self->request(exec, wait, actors::prepare_grammar_atom::value, std::uint64_t(0), spec)
        .receive([&](std::string& error) { answer = error; },
                 [&](caf::error& e) { answer = caf::to_string(e); });
    return answer;
  };
  CHECK(prepare("cached") == "");  // compiled on the grammar thread
  // A slow compile now holds the grammar thread ...
  self->send(exec, actors::prepare_grammar_atom::value, std::uint64_t(1), std::string("slow"));
  for (int i = 0; i < 3000; ++i) {  // until the thread has taken it
    {
      std::lock_guard lock(state->mutex);
      if (state->num_prepared == 2) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  {
    std::lock_guard lock(state->mutex);
    REQUIRE(state->num_prepared == 2);
  }
  // ... and the compiled spec is answered without it (it queued behind "slow" before).
  CHECK(prepare("cached") == "");
  {
    std::lock_guard lock(state->mutex);
    CHECK(state->num_prepared == 2);  // not prepared again
    state->released = true;
  }
  state->released_cv.notify_all();
  CHECK(prepare("other") == "");  // a new spec still goes to the thread, after "slow"
  std::lock_guard lock(state->mutex);
  CHECK(state->num_prepared == 3);
  CHECK(state->compiled.count("slow") == 1);
}

namespace {

/// The toy runner with a grammar preparer of the test's choosing.
class preparing_toy_runner : public actors::toy_runner {
 public:
  preparing_toy_runner(actors::toy_runner_config c,
                       std::function<void(const std::string&)> preparer)
      : toy_runner(c), preparer_(std::move(preparer)) {}
  std::function<void(const std::string&)> grammar_preparer() const override { return preparer_; }

 private:
  std::function<void(const std::string&)> preparer_;
};

/// A loaded executor of the toy runner with `preparer`, whose requests wait `limit` for a
/// compile.
actors::executor_actor spawn_toy_executor(
    caf::actor_system& sys, std::function<void(const std::string&)> preparer,
    std::chrono::nanoseconds limit = std::chrono::seconds(60)) {
  actors::executor_params ep;
  ep.make_runner = [preparer = std::move(preparer)] {
    const actors::toy_runner_config tc;
    return actors::runner_bundle{std::make_unique<preparing_toy_runner>(tc, preparer),
                                 actors::toy_runner::geometry(tc)};
  };
  ep.label = "toy test executor";
  ep.grammar_limit = limit;
  return actors::spawn_executor_actor(sys, std::move(ep));
}

/// A preparer that blocks on the specs "slow" and "slow-bad" until released; "slow-bad" then
/// fails to compile.
std::function<void(const std::string&)> gated_preparer(std::shared_ptr<grammar_state> s) {
  return [s](const std::string& spec) {
    std::unique_lock lock(s->mutex);
    ++s->num_prepared;
    if (spec.starts_with("slow")) s->released_cv.wait(lock, [&] { return s->released; });
    if (spec == "slow-bad") DI_FAIL("does not compile (fake)");
    s->compiled.insert(spec);
  };
}

}  // namespace

/// A scheduler over one executor of the gated toy runner (its compile of "slow" or "slow-bad"
/// waits until release()). Whatever fails in a test, the gate opens and both actors stop when
/// the group goes, so that the actor system can end.
struct gated_group {
  test::test_system ts;
  std::shared_ptr<grammar_state> state = std::make_shared<grammar_state>();
  actors::executor_actor exec;
  actors::scheduler_actor sched;
  caf::scoped_actor self{ts.sys};
  const std::chrono::seconds wait{30};

  gated_group() {
    exec = spawn_toy_executor(ts.sys, gated_preparer(state), actors::grammar_prepare_limit());
    const cluster_config c = test::toy_config();
    sched = test::spawn_one_executor_group(ts.sys, exec, c);
  }
  ~gated_group() {
    release();
    self->send_exit(sched, caf::exit_reason::user_shutdown);
    self->send_exit(exec, caf::exit_reason::user_shutdown);
  }
  gated_group(const gated_group&) = delete;
  gated_group& operator=(const gated_group&) = delete;

  /// `router` attached as the group's router (it gets the group's events).
  bool attach(caf::scoped_actor& router) {
    bool is_attached = false;
    router
        ->request(sched, wait, actors::attach_router{caf::actor_cast<actors::router_actor>(router)})
        .receive([&](actors::group_info&) { is_attached = true; },
                 [](caf::error& e) { FAIL(caf::to_string(e)); });
    return is_attached;
  }
  /// A greedy 8-token request with response_format `spec`.
  static runtime::request request(std::uint64_t id, const std::string& spec) {
    runtime::request r{.id = id, .prompt_ids = test::random_prompt(3, 20), .seed = 7};
    r.params.max_tokens = 8;
    r.params.temperature = 0;
    r.params.ignore_eos = true;
    r.params.response_format = spec;
    return r;
  }
  /// Whether the executor's grammar thread has taken `n` specs (within wait_for's patience).
  bool compiling(int n) {
    return test::wait_for([&] {
      std::lock_guard lock(state->mutex);
      return state->num_prepared == n;
    });
  }
  void release() {
    {
      std::lock_guard lock(state->mutex);
      state->released = true;
    }
    state->released_cv.notify_all();
  }
  /// Waits until every compile answer sent so far has reached the scheduler (the grammar
  /// thread, first in first out, answers one more spec), then returns its status.
  actors::group_status status_after_compiles() {
    self->request(exec, wait, actors::prepare_grammar_atom::value, std::uint64_t(0),
                  std::string("after"))
        .receive([](std::string& error) { CHECK(error == ""); },
                 [](caf::error& e) { FAIL(caf::to_string(e)); });
    actors::group_status g;
    self->request(sched, wait, actors::status_atom::value)
        .receive([&](actors::group_status& s) { g = std::move(s); },
                 [](caf::error& e) { FAIL(caf::to_string(e)); });
    return g;
  }
};

namespace {

/// The events of the `Events` messages (group_events, client_events) in `self`'s mailbox until
/// none comes for `quiet`.
template <class Events>
std::vector<runtime::token_event> drain_events(caf::scoped_actor& self,
                                               std::chrono::milliseconds quiet) {
  std::vector<runtime::token_event> events;
  bool is_quiet = false;
  while (!is_quiet)
    self->receive(
        [&](Events& msg) {
          for (runtime::token_event& e : msg.events) events.push_back(std::move(e));
        },
        caf::after(quiet) >> [&] { is_quiet = true; });
  return events;
}

/// `events` is one event of request `id`: the final abort, no tokens.
void check_one_abort(const std::vector<runtime::token_event>& events, std::uint64_t id) {
  REQUIRE(events.size() == 1);
  CHECK(events[0].request_id == id);
  CHECK(events[0].status == runtime::sequence_status::finished_abort);
  CHECK(events[0].token_ids.empty());
}

}  // namespace

TEST_CASE("scheduler: a request aborted while its grammar compiles ends at once, never admitted") {
  for (const std::string spec : {"slow", "slow-bad"}) {  // the compile then succeeds / fails
    CAPTURE(spec);
    gated_group grp;
    caf::scoped_actor& self = grp.self;
    REQUIRE(grp.attach(self));
    auto admission =
        self->request(grp.sched, grp.wait, actors::start_request{grp.request(41, spec)});
    REQUIRE(grp.compiling(1));  // the executor's grammar thread is now compiling it
    self->send(grp.sched, actors::abort_request{41});
    self->send(grp.sched, actors::abort_request{41});  // a second abort changes nothing
    grp.release();
    std::optional<runtime::admission_result> reply;
    admission.receive([&](runtime::admission_result& a) { reply = a; },
                      [](caf::error& e) { FAIL(caf::to_string(e)); });
    REQUIRE(reply);
    CHECK(reply->is_accepted());  // as an abort of a queued request: accepted, then ended
    // Its steps and queues show whether the scheduler admitted the request.
    const actors::group_status g = grp.status_after_compiles();
    CHECK(g.is_up);
    CHECK(g.stats.counters.num_steps == 0);
    CHECK(g.stats.num_running == 0);
    CHECK(g.stats.num_waiting == 0);
    CHECK(g.stats.counters.num_aborts == 1);  // the runtime scheduler never saw it
    // Exactly one event reached the router: the final abort, no tokens.
    check_one_abort(drain_events<actors::group_events>(self, std::chrono::milliseconds(300)), 41);
    {
      std::lock_guard lock(grp.state->mutex);
      CHECK(grp.state->num_prepared == 2);  // "after"
      CHECK(grp.state->compiled.count("slow") == (spec == "slow" ? 1 : 0));
    }
  }
}

TEST_CASE("scheduler: a request whose grammar does not compile is refused and counted once") {
  // Refused at the end of its preparation, the request never reached the runtime scheduler,
  // whose num_refused counted only its own refusals: the group's status showed none.
  gated_group grp;
  caf::scoped_actor& self = grp.self;
  REQUIRE(grp.attach(self));
  auto admission =
      self->request(grp.sched, grp.wait, actors::start_request{grp.request(43, "slow-bad")});
  REQUIRE(grp.compiling(1));
  grp.release();
  std::optional<runtime::admission_result> reply;
  admission.receive([&](runtime::admission_result& a) { reply = a; },
                    [](caf::error& e) { FAIL(caf::to_string(e)); });
  REQUIRE(reply);
  CHECK_FALSE(reply->is_accepted());
  CHECK(reply->status == runtime::admission_status::invalid_request);
  CHECK(reply->message.find("invalid response_format") != std::string::npos);
  const actors::group_status g = grp.status_after_compiles();
  CHECK(g.stats.counters.num_refused == 1);
  CHECK(g.stats.counters.num_aborts == 0);
  CHECK(g.stats.counters.num_steps == 0);
}

TEST_CASE(
    "scheduler: a request whose grammar compiles when the router goes down is never admitted") {
  // The router's down message failed the requests the runtime scheduler held, but one whose
  // grammar was still compiling was admitted afterwards and ran with nobody to hear it.
  gated_group grp;
  {
    caf::scoped_actor router{grp.ts.sys};  // stands in for the router, then goes down
    REQUIRE(grp.attach(router));
    router->send(grp.sched, actors::start_request{grp.request(42, "slow")});
    REQUIRE(grp.compiling(1));
  }  // the router is down (the scheduler monitors it)
  // Its down message has reached the scheduler once a status request sent after it is answered.
  grp.self->request(grp.sched, grp.wait, actors::status_atom::value)
      .receive([](actors::group_status&) {}, [](caf::error& e) { FAIL(caf::to_string(e)); });
  grp.release();
  const actors::group_status g = grp.status_after_compiles();
  CHECK(g.is_up);
  CHECK(g.stats.num_running == 0);
  CHECK(g.stats.num_waiting == 0);
  CHECK(g.stats.counters.num_steps == 0);
}

TEST_CASE(
    "router: a client's abort while the grammar compiles ends the request before the compile") {
  // The router held a client's abort until the group admitted the request, so the request lived
  // (and its group worked for it) until the compile ended. The abort now goes to the group at
  // once: the client has its reply and one final event while the compile is still held.
  gated_group grp;
  actors::router_params p;
  p.groups = {grp.sched};
  p.status_interval_s = 0;
  p.vocab_size = 1000;
  struct router_guard {  // stops the router before the group goes, whatever fails
    caf::scoped_actor& self;
    actors::router_handle router;
    ~router_guard() { self->send_exit(router, caf::exit_reason::user_shutdown); }
  } guard{grp.self, actors::spawn_router_actor(grp.ts.sys, std::move(p))};
  caf::scoped_actor client{grp.ts.sys};
  client->request(guard.router, grp.wait, actors::info_atom::value)
      .receive([](int n) { CHECK(n == 1); }, [](caf::error& e) { FAIL(caf::to_string(e)); });
  auto pending =
      client->request(guard.router, std::chrono::seconds(5),
                      actors::submit_request{.id = 8,
                                             .prompt_ids = test::random_prompt(3, 20),
                                             .params = gated_group::request(0, "slow").params});
  REQUIRE(grp.compiling(1));
  client->send(guard.router, actors::abort_request{8});
  // The router's status request to the group follows the abort it passed on, so the group ended
  // the request before it answered; the router passed the reply and the final event on before
  // it answered the client.
  actors::cluster_status s;
  client->request(guard.router, grp.wait, actors::status_atom::value)
      .receive([&](actors::cluster_status& x) { s = std::move(x); },
               [](caf::error& e) { FAIL(caf::to_string(e)); });
  actors::submit_reply reply;
  pending.receive([&](actors::submit_reply& r) { reply = std::move(r); },
                  [&](caf::error& e) { reply.error = caf::to_string(e); });
  CHECK_MESSAGE(reply.accepted, reply.error);
  CHECK(reply.group == 0);
  // what the router sent before its status answer: one final event
  check_one_abort(drain_events<actors::client_events>(client, std::chrono::milliseconds(0)), 8);
  // the router's counters as it answers a status request (the last one's are as it was asked)
  client->request(guard.router, grp.wait, actors::status_atom::value)
      .receive([&](actors::cluster_status& x) { s = std::move(x); },
               [](caf::error& e) { FAIL(caf::to_string(e)); });
  CHECK(s.router.num_aborts == 1);
  CHECK(s.router.num_finished == 1);
  CHECK(s.router.num_live == 0);
  REQUIRE(s.groups.size() == 1);
  CHECK(s.groups[0].answered);
  CHECK(s.groups[0].stats.counters.num_aborts == 1);
  CHECK(s.groups[0].stats.counters.num_steps == 0);
  grp.release();  // the compile ends: nothing is admitted
  const actors::group_status g = grp.status_after_compiles();
  CHECK(g.stats.counters.num_steps == 0);
  CHECK(g.stats.num_running + g.stats.num_waiting == 0);
  CHECK(g.stats.counters.num_aborts == 1);
}

namespace {

/// What the compiling runner's preparer counts.
struct compile_counts {
  std::atomic<int> num_started{0};
  std::atomic<int> num_running{0};
  std::atomic<int> num_interrupted{0};
};

/// A preparer that compiles the spec for real, counted in `c`; "spin" runs until it is
/// cancelled, like an endless compile.
std::function<void(const std::string&)> compiling_preparer(std::shared_ptr<compile_counts> c) {
  return [c](const std::string& spec) {
    ++c->num_started;
    ++c->num_running;
    struct running_guard {
      compile_counts& c;
      ~running_guard() { --c.num_running; }
    } guard{*c};
    try {
      if (spec == "spin")
        for (;;) {
          grammar::check_interrupt();
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      grammar::compile_response_format(grammar::parse_inline_response_format(spec));
    } catch (const grammar::compile_interrupted&) {
      ++c->num_interrupted;
      throw;
    }
  };
}

/// A runner with no model whose preparer compiles the spec for real (compiling_preparer;
/// nothing is cached: its lookup knows none).
class compiling_runner : public runtime::step_runner {
 public:
  explicit compiling_runner(std::shared_ptr<compile_counts> c) : c_(std::move(c)) {}
  runtime::runner_info info() const override { return {"fake", {}, 0, 64}; }
  runtime::step_result run(const runtime::step_plan&) override {
    DI_FAIL("the grammar test runs no steps");
  }
  std::function<void(const std::string&)> grammar_preparer() const override {
    return compiling_preparer(c_);
  }
  std::function<bool(const std::string&)> grammar_lookup() const override {
    return [](const std::string&) { return false; };
  }

 private:
  std::shared_ptr<compile_counts> c_;
};

/// An executor of the compiling runner whose requests wait `limit` for a compile, loaded.
actors::executor_actor spawn_compiling_executor(caf::actor_system& sys,
                                                std::shared_ptr<compile_counts> counts,
                                                std::chrono::nanoseconds limit) {
  actors::executor_params p;
  p.make_runner = [counts] {
    return actors::runner_bundle{std::make_unique<compiling_runner>(counts), {}};
  };
  p.label = "compiling test executor";
  p.grammar_limit = limit;
  auto exec = actors::spawn_executor_actor(sys, std::move(p));
  caf::scoped_actor self{sys};
  self->request(exec, std::chrono::seconds(30), actors::info_atom::value)
      .receive([](actors::executor_info&) {}, [](caf::error& e) { FAIL(caf::to_string(e)); });
  return exec;
}

/// The executor's answer to preparing `spec` ("" or the error).
std::string prepare_on(caf::actor_system& sys, const actors::executor_actor& exec,
                       const std::string& spec) {
  caf::scoped_actor self{sys};
  std::string answer = "(none)";
  self->request(exec, std::chrono::seconds(60), actors::prepare_grammar_atom::value,
                std::uint64_t(0), spec)
      .receive([&](std::string& error) { answer = error; },
               [&](caf::error& e) { answer = caf::to_string(e); });
  return answer;
}

using di::test::eventually;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("executor: a compile past the limit stops there and frees the grammar thread") {
  // 20 rules of [aA]* and 3,600 [aA]: 13-18 s of compile when nothing stops it. Under a 1 s
  // limit it ran on to its end on the grammar thread after its request was refused, and the
  // cheap regex after it waited those seconds.
  const std::string grammar = test::slow_ebnf_grammar();
  test::test_system ts;
  auto counts = std::make_shared<compile_counts>();
  auto exec = spawn_compiling_executor(ts.sys, counts, std::chrono::seconds(1));
  const auto t0 = std::chrono::steady_clock::now();
  const std::string answer = prepare_on(ts.sys, exec, "ebnf:" + grammar);
  const double refused_after = seconds_since(t0);
  CHECK(answer.find("the grammar compile was cancelled after") != std::string::npos);
  CHECK(answer.find("the limit is 1 s") != std::string::npos);
  CHECK(prepare_on(ts.sys, exec, "regex:[0-9]+") == "");
  const double total = seconds_since(t0);
  MESSAGE("answered after ", refused_after, " s (", answer, "); the regex after it compiled by ",
          total, " s");
  CHECK(total < 4.0);  // 13 s and more while the hostile compile ran on
  CHECK(eventually([&] { return counts->num_running == 0; }));
  CHECK(counts->num_interrupted == 1);
  caf::anon_send_exit(exec, caf::exit_reason::user_shutdown);
}

TEST_CASE("executor: a compile runs on while a request that shares it still waits") {
  test::test_system ts;
  auto counts = std::make_shared<compile_counts>();
  auto exec = spawn_compiling_executor(ts.sys, counts, std::chrono::seconds(1));
  const auto t0 = std::chrono::steady_clock::now();
  double first_done = 0;
  std::thread first([&] {
    CHECK(prepare_on(ts.sys, exec, "spin").find("cancelled") != std::string::npos);
    first_done = seconds_since(t0);
  });
  REQUIRE(eventually([&] { return counts->num_started == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  // The second request joins the compile; its limit ends 0.5 s after the first's.
  CHECK(prepare_on(ts.sys, exec, "spin").find("cancelled") != std::string::npos);
  const double second_done = seconds_since(t0);
  first.join();
  MESSAGE("the shared compile stopped after ", second_done,
          " s (limit 1 s, second request 0.5 s in)");
  CHECK(counts->num_started == 1);  // one compile for both
  CHECK(first_done >= 1.4);         // not cancelled at the first request's limit
  CHECK(second_done >= 1.4);
  CHECK(second_done < 5.0);
  CHECK(eventually([&] { return counts->num_running == 0; }));
  CHECK(counts->num_interrupted == 1);
  // Cancelled, not remembered: a later request compiles it again.
  CHECK(prepare_on(ts.sys, exec, "regex:a+") == "");
  CHECK(counts->num_started == 2);
  caf::anon_send_exit(exec, caf::exit_reason::user_shutdown);
}

TEST_CASE("executor: a compile stops once every request waiting for it is aborted") {
  // The slow EBNF grammar (13-18 s of compile) under a 60 s limit. Its request aborted, the
  // compile ran on to its end with nobody waiting (up to the limit, 100 s in a server): the
  // executors never heard of the abort. Now the scheduler tells them (abandon_grammar_atom)
  // and the compile stops at its next check.
  const std::string grammar = test::slow_ebnf_grammar();
  test::test_system ts;
  auto counts = std::make_shared<compile_counts>();
  auto exec = spawn_compiling_executor(ts.sys, counts, std::chrono::seconds(60));
  caf::scoped_actor sched{ts.sys};  // stands in for the scheduler
  auto pending = sched->request(exec, std::chrono::seconds(30), actors::prepare_grammar_atom::value,
                                std::uint64_t(7), "ebnf:" + grammar);
  REQUIRE(eventually([&] { return counts->num_running == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // well into the compile
  const auto t0 = std::chrono::steady_clock::now();
  sched->send(exec, actors::abandon_grammar_atom::value, std::uint64_t(7));
  const bool is_stopped = eventually([&] { return counts->num_running == 0; }, 10);
  const double stopped_after = seconds_since(t0);
  MESSAGE("the abandoned compile stopped ", stopped_after, " s after the abort");
  CHECK(is_stopped);
  CHECK(counts->num_interrupted == 1);  // cancelled, not finished
  std::string answer = "(none)";
  pending.receive([&](std::string& error) { answer = error; },
                  [&](caf::error& e) { answer = caf::to_string(e); });
  MESSAGE("its request answered ", seconds_since(t0), " s after the abort (", answer, ")");
  CHECK(answer == "the request was aborted");  // answered at the abort
  // The grammar thread is free: a cheap regex compiles at once.
  CHECK(prepare_on(ts.sys, exec, "regex:[0-9]+") == "");
  CHECK(seconds_since(t0) < 10.0);
  // An abort of a request that waits for nothing (answered, or never sent) changes nothing.
  sched->send(exec, actors::abandon_grammar_atom::value, std::uint64_t(7));
  sched->send(exec, actors::abandon_grammar_atom::value, std::uint64_t(99));
  CHECK(prepare_on(ts.sys, exec, "regex:a+") == "");
  CHECK(counts->num_started == 3);
  caf::anon_send_exit(exec, caf::exit_reason::user_shutdown);
}

TEST_CASE("executor: a compile shared with a live request runs on when another is aborted") {
  test::test_system ts;
  auto counts = std::make_shared<compile_counts>();
  auto exec = spawn_compiling_executor(ts.sys, counts, std::chrono::seconds(60));
  caf::scoped_actor sched{ts.sys};  // stands in for the scheduler
  const auto wait = std::chrono::seconds(10);
  auto first = sched->request(exec, wait, actors::prepare_grammar_atom::value, std::uint64_t(1),
                              std::string("spin"));
  REQUIRE(eventually([&] { return counts->num_started == 1; }));
  // The second request joins the compile (it arrives before the abort: one sender's order).
  auto second = sched->request(exec, wait, actors::prepare_grammar_atom::value, std::uint64_t(2),
                               std::string("spin"));
  sched->send(exec, actors::abandon_grammar_atom::value, std::uint64_t(1));
  std::string answer = "(none)";
  first.receive([&](std::string& error) { answer = error; },
                [&](caf::error& e) { answer = caf::to_string(e); });
  CHECK(answer == "the request was aborted");
  {
    // Another actor's request 2 is not this one's: its abort changes nothing either.
    caf::scoped_actor other{ts.sys};
    other->send(exec, actors::abandon_grammar_atom::value, std::uint64_t(2));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  CHECK(counts->num_running == 1);  // request 2 still waits: the compile runs on
  CHECK(counts->num_interrupted == 0);
  CHECK(counts->num_started == 1);
  // The last of its requests aborted: the compile stops.
  const auto t0 = std::chrono::steady_clock::now();
  sched->send(exec, actors::abandon_grammar_atom::value, std::uint64_t(2));
  answer = "(none)";
  second.receive([&](std::string& error) { answer = error; },
                 [&](caf::error& e) { answer = caf::to_string(e); });
  CHECK(answer == "the request was aborted");
  CHECK(eventually([&] { return counts->num_running == 0; }, 5));
  MESSAGE("the compile stopped ", seconds_since(t0), " s after its last request's abort");
  CHECK(counts->num_interrupted == 1);
  // A new request for the spec compiles it anew (the cancelled compile is not joined).
  auto third = sched->request(exec, wait, actors::prepare_grammar_atom::value, std::uint64_t(3),
                              std::string("spin"));
  CHECK(eventually([&] { return counts->num_started == 2 && counts->num_running == 1; }));
  sched->send(exec, actors::abandon_grammar_atom::value, std::uint64_t(3));
  third.receive([](std::string&) {}, [](caf::error&) {});
  CHECK(eventually([&] { return counts->num_running == 0; }, 5));
  CHECK(counts->num_interrupted == 2);
  caf::anon_send_exit(exec, caf::exit_reason::user_shutdown);
}

TEST_CASE("scheduler: an aborted request's compile stops on its executors") {
  // The scheduler ended an aborted request (or, its router down, every preparing one) but its
  // executors compiled on until the limit (100 s), a core busy for nobody.
  for (const bool is_router_down : {false, true}) {
    CAPTURE(is_router_down);
    test::test_system ts;
    auto counts = std::make_shared<compile_counts>();
    auto exec = spawn_toy_executor(ts.sys, compiling_preparer(counts));
    const cluster_config c = test::toy_config();
    auto sched = test::spawn_one_executor_group(ts.sys, exec, c);
    caf::scoped_actor self{ts.sys};
    {
      caf::scoped_actor router{ts.sys};  // stands in for the router
      router
          ->request(sched, std::chrono::seconds(30),
                    actors::attach_router{caf::actor_cast<actors::router_actor>(router)})
          .receive([](actors::group_info&) {}, [](caf::error& e) { FAIL(caf::to_string(e)); });
      router->send(sched, actors::start_request{gated_group::request(41, "spin")});
      REQUIRE(eventually([&] { return counts->num_running == 1; }));
      if (!is_router_down) router->send(sched, actors::abort_request{41});
    }  // the router goes down
    const auto t0 = std::chrono::steady_clock::now();
    const bool is_stopped = eventually([&] { return counts->num_running == 0; }, 10);
    MESSAGE("the executor's compile stopped ", seconds_since(t0), " s after the ",
            std::string(is_router_down ? "router went down" : "abort"));
    CHECK(is_stopped);
    CHECK(counts->num_interrupted == 1);
    actors::group_status g;
    self->request(sched, std::chrono::seconds(30), actors::status_atom::value)
        .receive([&](actors::group_status& s) { g = std::move(s); },
                 [](caf::error& e) { FAIL(caf::to_string(e)); });
    CHECK(g.is_up);
    CHECK(g.stats.num_running + g.stats.num_waiting == 0);
    CHECK(g.stats.counters.num_steps == 0);
    self->send_exit(sched, caf::exit_reason::user_shutdown);
    self->send_exit(exec, caf::exit_reason::user_shutdown);
  }
}

namespace {

/// A preparer that fails every spec once the compile `other` counts has begun (another
/// executor of the group is then compiling the same spec).
std::function<void(const std::string&)> failing_preparer(std::shared_ptr<compile_counts> other) {
  return [other](const std::string&) {
    eventually([&] { return other->num_running > 0; }, 10);
    DI_FAIL("does not compile (fake)");
  };
}

/// Stops its actors when a test ends, whatever fails (the actor system waits for them).
struct stop_at_end {
  std::vector<caf::actor> actors;
  ~stop_at_end() {
    for (const caf::actor& a : actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }
};

}  // namespace

TEST_CASE("scheduler: a grammar one executor cannot compile stops the others' compiles") {
  // A group of two executors: the first fails the spec at once, the second compiles it on (a
  // 60 s limit). The request waited for both, so its refusal came at the second's limit, and the
  // second compiled on for a request refused already. Now the first error refuses it and the
  // scheduler abandons the other executors' compiles of it.
  test::test_system ts;
  auto counts = std::make_shared<compile_counts>();
  auto failing = spawn_toy_executor(ts.sys, failing_preparer(counts));
  auto compiling = spawn_toy_executor(ts.sys, compiling_preparer(counts));
  const cluster_config c = test::toy_config();
  auto sched = actors::spawn_scheduler_actor(ts.sys, {.group = 0,
                                                      .executors = {failing, compiling},
                                                      .executor_nodes = {0, 0},
                                                      .limits = c.scheduler,
                                                      .kv = c.kv,
                                                      .status_interval_s = 0,
                                                      .startup_timeout_s = 30});
  const stop_at_end stop{{caf::actor_cast<caf::actor>(sched), caf::actor_cast<caf::actor>(failing),
                          caf::actor_cast<caf::actor>(compiling)}};
  caf::scoped_actor self{ts.sys};
  {
    caf::scoped_actor router{ts.sys};  // stands in for the router
    router
        ->request(sched, std::chrono::seconds(30),
                  actors::attach_router{caf::actor_cast<actors::router_actor>(router)})
        .receive([](actors::group_info&) {}, [](caf::error& e) { FAIL(caf::to_string(e)); });
    const auto t0 = std::chrono::steady_clock::now();
    std::optional<runtime::admission_result> reply;
    router
        ->request(sched, std::chrono::seconds(10),
                  actors::start_request{gated_group::request(41, "spin")})
        .receive([&](runtime::admission_result& a) { reply = a; },
                 [](caf::error& e) { FAIL_CHECK(caf::to_string(e)); });
    const double refused_after = seconds_since(t0);
    const bool is_stopped = eventually([&] { return counts->num_running == 0; }, 10);
    MESSAGE("refused ", refused_after,
            " s after the request; the other executor's compile stopped ", seconds_since(t0),
            " s after it");
    REQUIRE(reply);
    CHECK_FALSE(reply->is_accepted());
    CHECK(reply->status == runtime::admission_status::invalid_request);
    CHECK(reply->message.find("does not compile (fake)") != std::string::npos);
    CHECK(is_stopped);
    CHECK(counts->num_started == 1);
    CHECK(counts->num_interrupted == 1);  // cancelled, not compiled to the limit
  }
  actors::group_status g;
  self->request(sched, std::chrono::seconds(30), actors::status_atom::value)
      .receive([&](actors::group_status& s) { g = std::move(s); },
               [](caf::error& e) { FAIL(caf::to_string(e)); });
  CHECK(g.is_up);
  CHECK(g.stats.counters.num_refused == 1);
  CHECK(g.stats.counters.num_steps == 0);
}

TEST_CASE("executor: a compile stops once every requester waiting for it is down") {
  // A scheduler that went down without aborting its requests (killed, its node lost) left its
  // executors compiling for nobody to the limit (60 s here, 100 s in a server). The executor
  // monitors its requesters: a compile stops once none that waits for it is up; one shared with
  // a live requester runs on.
  test::test_system ts;
  auto counts = std::make_shared<compile_counts>();
  auto exec = spawn_compiling_executor(ts.sys, counts, std::chrono::seconds(60));
  const stop_at_end stop{{caf::actor_cast<caf::actor>(exec)}};
  const auto wait = std::chrono::seconds(30);
  auto second = std::make_unique<caf::scoped_actor>(ts.sys);
  {
    caf::scoped_actor first{ts.sys};  // stands in for a scheduler, then goes down
    first->request(exec, wait, actors::prepare_grammar_atom::value, std::uint64_t(1),
                   std::string("spin"));
    REQUIRE(eventually([&] { return counts->num_started == 1; }));
    // Another requester's request (the same id) joins the compile: it is in once a later
    // message of that sender is answered.
    (*second)->request(exec, wait, actors::prepare_grammar_atom::value, std::uint64_t(1),
                       std::string("spin"));
    (*second)
        ->request(exec, wait, actors::info_atom::value)
        .receive([](actors::executor_info&) {}, [](caf::error& e) { FAIL(caf::to_string(e)); });
  }  // the first requester is down
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  CHECK(counts->num_running == 1);  // the second still waits: the compile runs on
  CHECK(counts->num_interrupted == 0);
  const auto t0 = std::chrono::steady_clock::now();
  second.reset();  // the last requester is down
  const bool is_stopped = eventually([&] { return counts->num_running == 0; }, 10);
  MESSAGE("the compile stopped ", seconds_since(t0), " s after its last requester went down");
  REQUIRE(is_stopped);
  CHECK(counts->num_interrupted == 1);  // cancelled, not finished
  CHECK(counts->num_started == 1);
  // The executor serves on, its grammar thread free; a requester that goes down once answered
  // (prepare_on's) changes nothing.
  CHECK(prepare_on(ts.sys, exec, "regex:[0-9]+") == "");
  CHECK(prepare_on(ts.sys, exec, "regex:a+") == "");
  CHECK(counts->num_started == 3);
  CHECK(counts->num_interrupted == 1);
}

TEST_CASE("scheduler: a killed scheduler's compile stops on its executor") {
  // A scheduler killed while a request's grammar compiled never abandoned the compile (only an
  // abort, its router going down or a failed group did): the executor compiled on to the limit.
  test::test_system ts;
  auto counts = std::make_shared<compile_counts>();
  auto exec = spawn_toy_executor(ts.sys, compiling_preparer(counts));
  const cluster_config c = test::toy_config();
  auto sched = test::spawn_one_executor_group(ts.sys, exec, c);
  const stop_at_end stop{{caf::actor_cast<caf::actor>(sched), caf::actor_cast<caf::actor>(exec)}};
  caf::scoped_actor router{ts.sys};  // stands in for the router
  router
      ->request(sched, std::chrono::seconds(30),
                actors::attach_router{caf::actor_cast<actors::router_actor>(router)})
      .receive([](actors::group_info&) {}, [](caf::error& e) { FAIL(caf::to_string(e)); });
  router->send(sched, actors::start_request{gated_group::request(41, "spin")});
  REQUIRE(eventually([&] { return counts->num_running == 1; }));
  router->send_exit(sched, caf::exit_reason::kill);  // no exit handler runs: fail_group does not
  const auto t0 = std::chrono::steady_clock::now();
  const bool is_stopped = eventually([&] { return counts->num_running == 0; }, 10);
  MESSAGE("the executor's compile stopped ", seconds_since(t0),
          " s after its scheduler was killed");
  REQUIRE(is_stopped);
  CHECK(counts->num_interrupted == 1);
  CHECK(prepare_on(ts.sys, exec, "regex:[0-9]+") == "");  // the executor serves on
}
