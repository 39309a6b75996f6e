// The router alone, over fake groups: scheduler actors that answer probes with a chosen cached
// prefix and take, refuse, hold or die on each request as told. What the client sees when its
// group goes down or refuses it, and when it aborts meanwhile, is exact here (no timing).
#include "tests/actors/actor_test_util.hpp"

#include "actors/router_actor.hpp"

#include <deque>

namespace di::test {

namespace {

/// What a fake group does with a request it is sent.
enum class on_start {
  serve,  ///< accepts it and ends it at once: one token, finished_length
  full,   ///< refuses it: queue_full
  hold,   ///< never answers (a grammar being compiled, a slow link)
  die,    ///< stops with an error before answering
};

struct fake_group_state {
  fake_group_state() = default;  // not an aggregate: CAF would build it from the actor pointer
  std::optional<actors::router_actor> router;
};

using fake_group_self = actors::scheduler_actor::stateful_pointer<fake_group_state>;

actors::scheduler_actor::behavior_type fake_group(fake_group_self self, int group,
                                                  std::deque<on_start> plan, std::int64_t cached) {
  auto steps = std::make_shared<std::deque<on_start>>(std::move(plan));
  return {
      [=](actors::attach_router& m) -> actors::group_info {
        self->state.router = m.router;
        return {.group = group, .max_model_len = 4096, .token_block_size = 16, .num_blocks = 256,
                .num_executors = 1, .device = "fake"};
      },
      [=](actors::start_request& m) -> caf::result<runtime::admission_result> {
        const on_start what = steps->empty() ? on_start::serve : steps->front();
        if (!steps->empty()) steps->pop_front();
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
            break;
          case on_start::die:
            self->quit(caf::make_error(caf::sec::runtime_error,
                                       fmt::format("group {} died (injected)", group)));
            break;
        }
        return rp;
      },
      [=](actors::abort_request&) {},
      [=](actors::prefix_probe&) -> std::int64_t { return cached; },
      [=](actors::status_atom) { return actors::group_status{.group = group, .is_up = true}; },
      [=](actors::tick_atom) {},
  };
}

struct fake_group_spec {
  std::deque<on_start> plan;
  std::int64_t cached = 0;  ///< its answer to every probe
};

/// A router over fake groups, ready, and a client of it.
struct router_bench {
  explicit router_bench(std::vector<fake_group_spec> specs) {
    actors::router_params p;
    for (std::size_t g = 0; g < specs.size(); ++g)
      groups.push_back(ts.sys.spawn(fake_group, int(g), specs[g].plan, specs[g].cached));
    p.groups = groups;
    p.status_interval_s = 0;
    p.vocab_size = 1000;
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

  test_system ts;
  std::vector<actors::scheduler_actor> groups;
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
  // The client aborts while group 0 holds the request, then group 0 goes down: passed on, the
  // request would start on group 1 only to be aborted there. It is refused with the reason.
  router_bench bench({{.plan = {on_start::hold}, .cached = 64}, {.cached = 0}});
  auto pending = bench.client->request(bench.router, std::chrono::seconds(10),
                                       router_bench::request(7, 4));
  REQUIRE(wait_for([&] { return bench.status().groups[0].num_live == 1; }));
  bench.client->send(bench.router, actors::abort_request{7});
  // the router has taken the abort once it answers the client's next message
  bench.client->request(bench.router, std::chrono::seconds(5), actors::status_atom::value)
      .receive([](actors::cluster_status&) {}, [](caf::error&) {});
  bench.admin->send_exit(bench.groups[0], caf::exit_reason::kill);
  actors::submit_reply reply;
  pending.receive([&](actors::submit_reply& rep) { reply = std::move(rep); },
                  [&](caf::error& err) { reply.error = actors::describe(err); });
  CHECK_FALSE(reply.accepted);
  CHECK(reply.kind == runtime::failure_kind::unavailable);
  CHECK_MESSAGE(reply.error.find("group 0 is down") != std::string::npos, reply.error);
  const actors::cluster_status s = bench.status();
  CHECK(s.groups[1].num_requests == 0);
  CHECK(s.router.num_live == 0);
}

}  // namespace di::test
