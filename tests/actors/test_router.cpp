// The router alone, over fake groups: scheduler actors that answer probes with a chosen cached
// prefix and take, refuse, hold or die on each request as told. What the client sees when its
// group goes down or refuses it, and when it aborts meanwhile, is exact here (no timing).
#include "tests/actors/actor_test_util.hpp"

#include "actors/router_actor.hpp"

#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>

namespace di::test {

namespace {

/// What a fake group does with a request it is sent.
enum class on_start {
  serve,  ///< accepts it and ends it at once: one token, finished_length
  full,   ///< refuses it: queue_full
  hold,   ///< does not answer (a grammar being compiled, a slow link) until the request is
          ///< aborted: then admits it late, emits a token and ends it finished_abort, as a
          ///< scheduler does that reads the request, then the abort that followed it
  die,    ///< stops with an error before answering
  /// does not answer, as a scheduler while the request's grammar compiles: an abort meanwhile
  /// finds nothing to abort and is lost; a tick_atom admits it late and emits a token (and an
  /// abort then ends it finished_abort)
  compile,
  /// as compile, but no abort ever ends it: every tick_atom emits one more token
  deaf,
};

/// What a fake group was sent, for the test to read (the group's thread writes it).
struct fake_group_log {
  std::mutex mutex;
  std::vector<std::uint64_t> aborted;  ///< the request ids of the aborts it received
  int num_started = 0;                 ///< start_request messages received
  int num_held_probes = 0;             ///< probes it has not answered yet

  std::vector<std::uint64_t> aborts() {
    std::lock_guard lock(mutex);
    return aborted;
  }
  int started() {
    std::lock_guard lock(mutex);
    return num_started;
  }
  int held_probes() {
    std::lock_guard lock(mutex);
    return num_held_probes;
  }
};

struct fake_group_state {
  fake_group_state() = default;  // not an aggregate: CAF would build it from the actor pointer
  std::optional<actors::router_actor> router;
  std::map<std::uint64_t, caf::typed_response_promise<runtime::admission_result>> held;
  std::vector<caf::typed_response_promise<std::int64_t>> held_probes;
  std::map<std::uint64_t, caf::typed_response_promise<runtime::admission_result>> compiling;
  std::set<std::uint64_t> running;  ///< admitted by a tick and not ended
  std::set<std::uint64_t> deaf;     ///< requests no abort ends
};

using fake_group_self = actors::scheduler_actor::stateful_pointer<fake_group_state>;

/// `hold_probe`: its probe answers wait for a tick_atom. `start_failure`: not empty, it fails
/// its start with that reason as the router's attach comes, in the order a scheduler that quit
/// before reading the attach answers: CAF's request_receiver_down first, then the down message
/// with the reason.
actors::scheduler_actor::behavior_type fake_group(fake_group_self self, int group,
                                                  std::deque<on_start> plan, std::int64_t cached,
                                                  bool hold_probe,
                                                  std::shared_ptr<fake_group_log> log,
                                                  std::string start_failure) {
  auto steps = std::make_shared<std::deque<on_start>>(std::move(plan));
  return {
      [=](actors::attach_router& m) -> caf::result<actors::group_info> {
        if (!start_failure.empty()) {
          auto rp = self->make_response_promise<actors::group_info>();
          rp.deliver(caf::make_error(caf::sec::request_receiver_down));
          self->quit(caf::make_error(caf::sec::runtime_error, start_failure));
          return rp;
        }
        self->state.router = m.router;
        return actors::group_info{.group = group,
                                  .max_model_len = 4096,
                                  .token_block_size = 16,
                                  .num_blocks = 256,
                                  .num_executors = 1,
                                  .device = "fake"};
      },
      [=](actors::start_request& m) -> caf::result<runtime::admission_result> {
        const on_start what = steps->empty() ? on_start::serve : steps->front();
        if (!steps->empty()) steps->pop_front();
        {
          std::lock_guard lock(log->mutex);
          ++log->num_started;
        }
        auto rp = self->make_response_promise<runtime::admission_result>();
        switch (what) {
          case on_start::serve:
            rp.deliver(runtime::admission_result{});  // the reply first, as a scheduler sends it
            self->send(*self->state.router,
                       actors::group_events{group,
                                            {{.request_id = m.request.id,
                                              .token_ids = {m.request.prompt_ids.back()},
                                              .status = runtime::sequence_status::finished_length}}});
            break;
          case on_start::full:
            rp.deliver(runtime::admission_result{runtime::admission_status::queue_full,
                                                 "no room (fake)", ""});
            break;
          case on_start::hold:
            self->state.held.emplace(m.request.id, rp);
            break;
          case on_start::compile:
            self->state.compiling.emplace(m.request.id, rp);
            break;
          case on_start::deaf:
            self->state.compiling.emplace(m.request.id, rp);
            self->state.deaf.insert(m.request.id);
            break;
          case on_start::die:
            self->quit(caf::make_error(caf::sec::runtime_error,
                                       fmt::format("group {} died (injected)", group)));
            break;
        }
        return rp;
      },
      [=](actors::abort_request& m) {
        if (auto it = self->state.held.find(m.id); it != self->state.held.end()) {
          it->second.deliver(runtime::admission_result{});  // admitted late
          self->state.held.erase(it);
          self->send(*self->state.router,
                     actors::group_events{group,
                                          {{.request_id = m.id, .token_ids = {1}},
                                           {.request_id = m.id,
                                            .status = runtime::sequence_status::finished_abort}}});
        }
        if (!self->state.deaf.contains(m.id) && self->state.running.erase(m.id) != 0)
          self->send(*self->state.router,
                     actors::group_events{group,
                                          {{.request_id = m.id,
                                            .status = runtime::sequence_status::finished_abort}}});
        std::lock_guard lock(log->mutex);  // after the events: the test reads it as "all sent"
        log->aborted.push_back(m.id);
      },
      [=](actors::prefix_probe&) -> caf::result<std::int64_t> {
        if (!hold_probe) return cached;
        self->state.held_probes.push_back(self->make_response_promise<std::int64_t>());
        std::lock_guard lock(log->mutex);
        ++log->num_held_probes;
        return self->state.held_probes.back();
      },
      [=](actors::status_atom) { return actors::group_status{.group = group, .is_up = true}; },
      [=](actors::tick_atom) {  // answers the probes it holds, admits what it compiled, steps
        for (auto& rp : self->state.held_probes) rp.deliver(cached);
        self->state.held_probes.clear();
        for (auto& [id, rp] : self->state.compiling) {
          rp.deliver(runtime::admission_result{});
          self->state.running.insert(id);
        }
        self->state.compiling.clear();
        for (std::uint64_t id : self->state.running)  // one step: a token for each
          self->send(*self->state.router,
                     actors::group_events{group, {{.request_id = id, .token_ids = {1}}}});
        std::lock_guard lock(log->mutex);
        log->num_held_probes = 0;
      },
  };
}

struct fake_group_spec {
  std::deque<on_start> plan;
  std::int64_t cached = 0;  ///< its answer to every probe
  bool hold_probe = false;  ///< its probe answers wait for a tick_atom
};

/// A router over fake groups, ready, and a client of it.
struct router_bench {
  /// `tune`: changes to the router's parameters.
  explicit router_bench(std::vector<fake_group_spec> specs,
                        const std::function<void(actors::router_params&)>& tune = {}) {
    actors::router_params p;
    for (std::size_t g = 0; g < specs.size(); ++g) {
      logs.push_back(std::make_shared<fake_group_log>());
      groups.push_back(ts.sys.spawn(fake_group, int(g), specs[g].plan, specs[g].cached,
                                    specs[g].hold_probe, logs.back(), std::string()));
    }
    p.groups = groups;
    p.status_interval_s = 0;
    p.vocab_size = 1000;
    if (tune) tune(p);
    router = actors::spawn_router_actor(ts.sys, std::move(p));
    int num_groups = 0;
    admin->request(router, std::chrono::seconds(5), actors::info_atom::value)
        .receive([&](int n) { num_groups = n; }, [&](caf::error&) {});
    REQUIRE(num_groups == int(specs.size()));
  }
  ~router_bench() {  // the actor system waits for every actor at its end
    admin->send_exit(router, caf::exit_reason::user_shutdown);
    for (const actors::scheduler_actor& g : groups) admin->send_exit(g, caf::exit_reason::user_shutdown);
  }
  static actors::submit_request request(std::uint64_t client_id, std::uint64_t seed) {
    actors::submit_request req = ids_request(random_prompt(seed, 80), 4);
    req.id = client_id;
    return req;
  }
  actors::submit_reply submit(std::uint64_t client_id, std::uint64_t seed) {
    actors::submit_reply out;
    client->request(router, std::chrono::seconds(10), request(client_id, seed))
        .receive([&](actors::submit_reply& rep) { out = std::move(rep); },
                 [&](caf::error& err) { out.error = actors::describe(err); });
    return out;
  }
  /// The final event of `client_id`, or a default event when none came within a second.
  runtime::token_event final_event(std::uint64_t client_id) {
    runtime::token_event out;
    bool done = false;
    while (!done) {
      bool timed_out = false;
      client->receive(
          [&](actors::client_events& ev) {
            for (runtime::token_event& e : ev.events)
              if (e.request_id == client_id && e.is_finished()) {
                out = std::move(e);
                done = true;
              }
          },
          caf::after(std::chrono::seconds(1)) >> [&] { timed_out = true; });
      if (timed_out) break;
    }
    return out;
  }
  actors::cluster_status status() {
    actors::cluster_status out;
    admin->request(router, std::chrono::seconds(5), actors::status_atom::value)
        .receive([&](actors::cluster_status& s) { out = std::move(s); }, [&](caf::error&) {});
    return out;
  }

  /// Returns once the router has taken what the client sent it so far, and each group has read
  /// what the router sent it before (the router's status request to a group follows it).
  void sync_client() {
    client->request(router, std::chrono::seconds(5), actors::status_atom::value)
        .receive([](actors::cluster_status&) {}, [](caf::error&) {});
  }

  /// Client events in the client's mailbox now, of any request.
  int num_pending_events() {
    int n = 0;
    bool empty = false;
    while (!empty)
      client->receive([&](actors::client_events&) { ++n; },
                      caf::after(std::chrono::seconds(0)) >> [&] { empty = true; });
    return n;
  }

  test_system ts;
  std::vector<actors::scheduler_actor> groups;
  std::vector<std::shared_ptr<fake_group_log>> logs;  ///< one per group
  actors::router_handle router;
  caf::scoped_actor client{ts.sys};
  caf::scoped_actor admin{ts.sys};  ///< status queries and exits, apart from the client's mailbox
};

}  // namespace

TEST_CASE("router: a group that goes down before admitting a request passes it on") {
  // Group 0 holds the prompt's prefix (affinity sends the request there) and dies on it before
  // answering; group 1 is up and idle. The client was refused ("group 0 is down") though group
  // 1 could serve it.
  router_bench bench({{.plan = {on_start::die}, .cached = 64}, {.cached = 0}});
  const actors::submit_reply reply = bench.submit(1, 1);
  CHECK_MESSAGE(reply.accepted, reply.error);
  CHECK(reply.group == 1);
  const std::vector<std::int32_t> prompt = bench.request(1, 1).prompt_ids;
  CHECK(reply.prompt_ids == prompt);
  const runtime::token_event last = bench.final_event(1);
  CHECK(last.status == runtime::sequence_status::finished_length);
  CHECK(last.token_ids == std::vector<std::int32_t>{prompt.back()});  // group 1 had its prompt
  const actors::cluster_status s = bench.status();
  REQUIRE(s.groups.size() == 2);
  CHECK_FALSE(s.groups[0].is_up);
  CHECK(s.groups[0].num_requests == 0);  // it did not take it
  CHECK(s.groups[0].num_affinity == 0);
  CHECK(s.groups[0].num_live == 0);
  CHECK(s.groups[1].num_requests == 1);
  CHECK(s.groups[1].num_live == 0);
  CHECK(s.router.num_live == 0);
  CHECK(s.router.num_refused == 0);
  CHECK(s.router.num_finished == 1);
}

TEST_CASE("router: a group that quit before reading its attach fails the start with its reason") {
  // A scheduler that fails at start quits; an attach that reaches it after (or still waits in
  // its mailbox) CAF answers request_receiver_down, before the down message that carries the
  // reason. The router failed the start with "group 1 did not start: request_receiver_down"
  // (6 in 100 failed starts under load). Group 1 here answers in that order every time.
  test_system ts;
  caf::scoped_actor admin{ts.sys};
  const std::string why = "group 1 cannot start: kv.num_blocks is too small (injected)";
  actors::router_params p;
  p.groups = {ts.sys.spawn(fake_group, 0, std::deque<on_start>{}, std::int64_t(0), false,
                           std::make_shared<fake_group_log>(), std::string()),
              ts.sys.spawn(fake_group, 1, std::deque<on_start>{}, std::int64_t(0), false,
                           std::make_shared<fake_group_log>(), why)};
  p.status_interval_s = 0;
  p.vocab_size = 1000;
  const std::vector<actors::scheduler_actor> groups = p.groups;
  const actors::router_handle router = actors::spawn_router_actor(ts.sys, std::move(p));
  std::string error;
  admin->request(router, std::chrono::seconds(5), actors::info_atom::value)
      .receive([&](int) { error = "it started"; },
               [&](caf::error& err) { error = actors::describe(err); });
  CHECK(error == "group 1 did not start: " + why);
  const actors::cluster_status s = [&] {
    actors::cluster_status out;
    admin->request(router, std::chrono::seconds(5), actors::status_atom::value)
        .receive([&](actors::cluster_status& st) { out = std::move(st); }, [](caf::error&) {});
    return out;
  }();
  CHECK(s.groups.size() == 2);  // not REQUIRE: the actors below must be stopped
  if (s.groups.size() == 2) {
    CHECK_FALSE(s.groups[1].is_up);
    CHECK(s.groups[1].down_reason == why);
  }
  admin->send_exit(router, caf::exit_reason::user_shutdown);
  for (const actors::scheduler_actor& g : groups)
    admin->send_exit(g, caf::exit_reason::user_shutdown);
}

TEST_CASE("router: refused for room by the group it was passed on to, the request is refused") {
  // Group 0 (the prefix) dies on it, group 1 refuses it for room: no group is left to try, and
  // the refusal the client sees is group 1's.
  router_bench bench({{.plan = {on_start::die}, .cached = 64}, {.plan = {on_start::full}}});
  const actors::submit_reply reply = bench.submit(1, 2);
  CHECK_FALSE(reply.accepted);
  CHECK(reply.status == runtime::admission_status::queue_full);
  CHECK(reply.kind == runtime::failure_kind::overloaded);
  const actors::cluster_status s = bench.status();
  CHECK(s.router.num_live == 0);
  CHECK(s.groups[1].num_live == 0);
  // the next request goes to group 1, which serves it (its plan is spent)
  const actors::submit_reply next = bench.submit(2, 3);
  CHECK(next.accepted);
  CHECK(bench.final_event(2).status == runtime::sequence_status::finished_length);
}

TEST_CASE("router: a request aborted before admission is not passed on when its group dies") {
  // The client aborts while group 0 has not answered the request; group 0 reads the abort and
  // goes down before it answers either: passed on, the request would start on group 1 only to
  // be aborted there. It is refused with the reason.
  router_bench bench({{.plan = {on_start::compile}, .cached = 64}, {.cached = 0}});
  auto pending = bench.client->request(bench.router, std::chrono::seconds(10),
                                       router_bench::request(7, 4));
  REQUIRE(wait_for([&] { return bench.status().groups[0].num_live == 1; }));
  bench.client->send(bench.router, actors::abort_request{7});
  bench.sync_client();  // group 0 has read the abort
  CHECK(bench.logs[0]->aborts() == std::vector<std::uint64_t>{1});
  bench.admin->send_exit(bench.groups[0], caf::exit_reason::kill);
  actors::submit_reply reply;
  pending.receive([&](actors::submit_reply& rep) { reply = std::move(rep); },
                  [&](caf::error& err) { reply.error = actors::describe(err); });
  CHECK_FALSE(reply.accepted);
  CHECK(reply.kind == runtime::failure_kind::unavailable);
  CHECK_MESSAGE(reply.error.find("group 0 is down") != std::string::npos, reply.error);
  CHECK(reply.group == actors::no_group);  // a refusal names no group
  const actors::cluster_status s = bench.status();
  CHECK(s.groups[1].num_requests == 0);
  CHECK(s.router.num_live == 0);
  CHECK(s.router.num_refused == 1);
  CHECK(s.router.num_aborts == 0);  // refused, not aborted: counted once
}

}  // namespace di::test

namespace di::test {

TEST_CASE("router: a request its group does not answer in time is aborted at the group") {
  // Group 0 holds the request past the router's admission timeout (short here). The client is
  // refused once; the group is sent the abort a client's abort sends, so that it cancels a late
  // admission at once (it ran the request to the end with nobody listening); what the group
  // sends after that (the late admission, a token, the abort's final event) reaches nobody.
  router_bench bench({{.plan = {on_start::hold}}}, [](actors::router_params& p) {
    p.admission_timeout = std::chrono::milliseconds(200);
  });
  const actors::submit_reply reply = bench.submit(3, 5);
  CHECK_FALSE(reply.accepted);
  CHECK(reply.kind == runtime::failure_kind::unavailable);
  CHECK_MESSAGE(reply.error.find("group 0 did not take the request") != std::string::npos,
                reply.error);
  // the one request the router sent it (router id 1) is aborted there
  REQUIRE(wait_for([&] { return !bench.logs[0]->aborts().empty(); }));
  CHECK(bench.logs[0]->aborts() == std::vector<std::uint64_t>{1});
  CHECK(bench.logs[0]->started() == 1);
  // The group sent its late events before it logged the abort, so the router has read them
  // before this status request; whatever it forwarded is in the client's mailbox by now.
  const actors::cluster_status s = bench.status();
  CHECK(bench.num_pending_events() == 0);
  CHECK(s.router.num_live == 0);
  CHECK(s.router.num_refused == 1);
  CHECK(s.router.num_accepted == 0);
  CHECK(s.router.num_finished == 0);
  CHECK(s.groups[0].num_live == 0);
  // the group serves the next request as usual
  const actors::submit_reply next = bench.submit(4, 6);
  CHECK(next.accepted);
  CHECK(bench.final_event(4).status == runtime::sequence_status::finished_length);
  CHECK(bench.logs[0]->aborts().size() == 1);
}

TEST_CASE("router: a request aborted while the groups are probed is sent to none") {
  // Group 0 holds the prompt's prefix and answers the probe only when told; the client aborts
  // meanwhile. Dispatched, the request would start on group 0 only to be aborted there. The
  // client sees an abort: the accepted reply, then finished_abort.
  router_bench bench({{.cached = 64, .hold_probe = true}, {.cached = 0}},
                     [](actors::router_params& p) { p.limits.probe_timeout_ms = 60000; });
  auto pending =
      bench.client->request(bench.router, std::chrono::seconds(10), router_bench::request(9, 7));
  REQUIRE(wait_for([&] { return bench.logs[0]->held_probes() == 1; }));
  bench.client->send(bench.router, actors::abort_request{9});
  bench.sync_client();
  bench.admin->send(bench.groups[0], actors::tick_atom::value);  // the probe's answer
  actors::submit_reply reply;
  pending.receive([&](actors::submit_reply& rep) { reply = std::move(rep); },
                  [&](caf::error& err) { reply.error = actors::describe(err); });
  CHECK_MESSAGE(reply.accepted, reply.error);
  CHECK(reply.group == actors::no_group);  // no group ever saw it
  CHECK(reply.prompt_ids == router_bench::request(9, 7).prompt_ids);
  CHECK(bench.final_event(9).status == runtime::sequence_status::finished_abort);
  const actors::cluster_status s = bench.status();
  REQUIRE(s.groups.size() == 2);
  CHECK(s.groups[0].num_requests == 0);
  CHECK(s.groups[1].num_requests == 0);
  CHECK(bench.logs[0]->started() == 0);
  CHECK(bench.logs[1]->started() == 0);
  CHECK(s.router.num_live == 0);
  CHECK(s.router.num_aborts == 1);
  CHECK(s.router.num_finished == 1);
  CHECK(bench.num_pending_events() == 0);  // one final event, nothing after it
}

}  // namespace di::test

namespace di::test {

TEST_CASE("router: a group that admits a request after losing its abort is told again, once") {
  // Group 0 does not answer in time, as while a grammar compiles: the router refuses the
  // request and aborts it there, but the group loses the abort (a scheduler before session 52
  // that had not admitted the request yet had nothing to abort). Admitted later, its first
  // token reaches no live request: the router aborts it again, and the group ends it. A group
  // that loses that abort too (deaf) and steps on is not told again at every step (it was: one
  // abort per step). The client hears the refusal only.
  for (const on_start plan : {on_start::compile, on_start::deaf}) {
    CAPTURE(int(plan));
    router_bench bench({{.plan = {plan}}}, [](actors::router_params& p) {
      p.admission_timeout = std::chrono::milliseconds(200);
    });
    const actors::submit_reply reply = bench.submit(3, 8);
    CHECK_FALSE(reply.accepted);
    REQUIRE(wait_for([&] { return bench.logs[0]->aborts().size() == 1; }));  // lost
    for (int step = 0; step < 3; ++step)  // admitted late, then a token a step while it runs
      bench.admin->send(bench.groups[0], actors::tick_atom::value);
    // The router has read the steps once it answers a status request sent after the ticks (its
    // status request to the group follows them); the group has read the router's aborts, and
    // the router the group's finished_abort, once it answers the next one.
    bench.status();
    const actors::cluster_status s = bench.status();
    CHECK(bench.logs[0]->aborts().size() == 2);
    CHECK(bench.logs[0]->aborts() == std::vector<std::uint64_t>{1, 1});
    CHECK(bench.num_pending_events() == 0);
    CHECK(s.router.num_live == 0);
    CHECK(s.router.num_refused == 1);
    CHECK(s.router.num_finished == 0);
    CHECK(s.groups[0].num_live == 0);
  }
}

}  // namespace di::test

namespace di::test {

TEST_CASE("router: a client's abort before admission goes to the group at once") {
  // Group 0 has not answered the request (as while its grammar compiles). The router held the
  // client's abort until the group's answer, and the group worked on for nobody meanwhile; now
  // the abort goes to the group at once, once however often the client sends it, and the group
  // (that reads it after the request) ends the request: the accepted reply, then one final event.
  router_bench bench({{.plan = {on_start::hold}}});
  auto pending =
      bench.client->request(bench.router, std::chrono::seconds(10), router_bench::request(5, 9));
  bench.client->send(bench.router, actors::abort_request{5});  // after the request: sent already
  bench.client->send(bench.router, actors::abort_request{5});
  bench.sync_client();  // the group has read what the router passed on
  CHECK(bench.logs[0]->aborts() == std::vector<std::uint64_t>{1});
  actors::submit_reply reply;
  pending.receive([&](actors::submit_reply& rep) { reply = std::move(rep); },
                  [&](caf::error& err) { reply.error = actors::describe(err); });
  CHECK_MESSAGE(reply.accepted, reply.error);
  CHECK(reply.group == 0);
  CHECK(bench.final_event(5).status == runtime::sequence_status::finished_abort);
  const actors::cluster_status s = bench.status();
  CHECK(bench.num_pending_events() == 0);  // one final event, nothing after it
  CHECK(s.router.num_accepted == 1);
  CHECK(s.router.num_finished == 1);
  CHECK(s.router.num_aborts == 1);
  CHECK(s.router.num_refused == 0);
  CHECK(s.router.num_live == 0);
  CHECK(s.groups[0].num_live == 0);
  // the admission it answered the abort with sent no second abort
  CHECK(bench.logs[0]->aborts().size() == 1);
  CHECK(bench.logs[0]->aborts() == std::vector<std::uint64_t>{1});
}

TEST_CASE("router: a request's group is sent one abort however often it is aborted") {
  // Group 0 reads the aborts but never answers (as if it lost them): the client aborts twice,
  // then the admission timeout aborts it once more. The group hears one abort.
  router_bench bench({{.plan = {on_start::compile}}}, [](actors::router_params& p) {
    p.admission_timeout = std::chrono::milliseconds(200);
  });
  auto pending =
      bench.client->request(bench.router, std::chrono::seconds(10), router_bench::request(6, 11));
  bench.client->send(bench.router, actors::abort_request{6});
  bench.client->send(bench.router, actors::abort_request{6});
  bench.sync_client();  // the group has read what the router passed on
  CHECK(bench.logs[0]->aborts().size() == 1);
  actors::submit_reply reply;
  pending.receive([&](actors::submit_reply& rep) { reply = std::move(rep); },
                  [&](caf::error& err) { reply.error = actors::describe(err); });
  CHECK_FALSE(reply.accepted);  // refused at the timeout: the one final answer it gets
  CHECK_MESSAGE(reply.error.find("did not take the request") != std::string::npos, reply.error);
  bench.status();  // the group has read what the router sent it before the refusal
  CHECK(bench.logs[0]->aborts().size() == 1);
  CHECK(bench.num_pending_events() == 0);
  const actors::cluster_status s = bench.status();
  CHECK(s.router.num_refused == 1);
  CHECK(s.router.num_aborts == 0);
  CHECK(s.router.num_live == 0);
}

}  // namespace di::test
