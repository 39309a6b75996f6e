// The client session, the seam for front ends: submits from several threads stream their
// events and end with the outputs the batch client gets; abort works mid-decode; refusals
// and a lost router reach the callbacks; destroying a session aborts what it left live.
#include "tests/actors/actor_test_util.hpp"

#include "actors/client_session.hpp"

#include <mutex>
#include <thread>

namespace di::test {

TEST_CASE("client session: submits from several threads stream and equal the batch client") {
  test_system ts;
  const cluster_config c = toy_config({"model.toy.step_ms=1"});
  actors::local_cluster cluster(ts.sys, {.config = c, .assets = toy_assets(c)});
  std::vector<actors::submit_request> reqs;
  for (int i = 0; i < 12; ++i)
    reqs.push_back(ids_request(random_prompt(40 + std::uint64_t(i), 5 + 7 * i), 3 + i, i % 2 == 0, std::uint64_t(i)));
  const auto expected = actors::run_requests(ts.sys, cluster.router(), reqs, 12);

  actors::client_session session(ts.sys, cluster.router());
  std::mutex mutex;
  std::vector<std::vector<std::int32_t>> streamed(reqs.size());
  std::vector<int> num_final(reqs.size(), 0);
  std::vector<std::future<actors::request_outcome>> futures(reqs.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      for (std::size_t i = std::size_t(t); i < reqs.size(); i += 3)
        futures[i] = session.submit(reqs[i], [&, i](const runtime::token_event& e) {
          std::lock_guard lock(mutex);
          streamed[i].insert(streamed[i].end(), e.token_ids.begin(), e.token_ids.end());
          num_final[i] += e.is_finished();
        });
    });
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    const actors::request_outcome out = futures[i].get();
    CAPTURE(i);
    CHECK(out.reply.accepted);
    CHECK(out.finish_reason() == "length");
    CHECK(out.output_ids == expected[i].output_ids);
    CHECK(out.text == expected[i].text);
    std::lock_guard lock(mutex);
    CHECK(streamed[i] == out.output_ids);
    CHECK(num_final[i] == 1);
  }
  CHECK(session.num_live() == 0);
}

TEST_CASE("client session: abort mid-decode, refusals, and the destructor aborts what is live") {
  test_system ts;
  const cluster_config c = toy_config({"model.toy.step_ms=5", "kv.enable_prefix_caching=false"});
  actors::local_cluster cluster(ts.sys, {.config = c, .assets = toy_assets(c)});
  const std::int64_t free_at_start = cluster.status().groups[0].stats.num_free_blocks;
  {
    actors::client_session session(ts.sys, cluster.router());
    std::atomic<int> tokens{0};
    std::promise<actors::submit_reply> reply;
    std::promise<actors::request_outcome> done;
    const std::uint64_t id = session.submit(
        ids_request(random_prompt(50, 20), 2000),
        {.on_reply = [&](const actors::submit_reply& r) { reply.set_value(r); },
         .on_event = [&](const runtime::token_event& e) { tokens += int(e.token_ids.size()); },
         .on_finished = [&](const actors::request_outcome& o) { done.set_value(o); }});
    CHECK(reply.get_future().get().accepted);
    REQUIRE(wait_for([&] { return tokens.load() >= 5; }));
    session.abort(id);
    const actors::request_outcome out = done.get_future().get();
    CHECK(out.finish_reason() == "abort");
    CHECK(out.output_ids.size() >= 5);
    CHECK(out.output_ids.size() < 2000);

    auto refused = session.submit(ids_request({0, 999999}, 4)).get();  // outside the vocabulary
    CHECK(refused.finish_reason() == "error");
    CHECK_FALSE(refused.reply.accepted);
    CHECK(refused.error.find("outside the vocabulary") != std::string::npos);
    CHECK(refused.reply.kind == runtime::failure_kind::invalid);
    CHECK(refused.reply.param == "prompt");

    session.submit(ids_request(random_prompt(51, 20), 2000), actors::request_callbacks{});
    REQUIRE(wait_for([&] { return cluster.status().groups[0].stats.num_running == 1; }));
    CHECK(session.num_live() == 1);
  }  // the session goes away with a live request: the router aborts it
  CHECK(wait_for([&] { return cluster.status().groups[0].stats.num_running == 0; }));
  const auto s = cluster.status();
  CHECK(s.groups[0].stats.counters.num_aborts == 2);
  CHECK(wait_for([&] { return cluster.status().groups[0].stats.num_free_blocks == free_at_start; }));
}

TEST_CASE("client session: a lost router fails live requests and refuses new ones at once") {
  test_system ts;
  const cluster_config c = toy_config({"model.toy.step_ms=5"});
  actors::local_cluster cluster(ts.sys, {.config = c, .assets = toy_assets(c)});
  actors::client_session session(ts.sys, cluster.router());
  auto live = session.submit(ids_request(random_prompt(60, 10), 2000));
  REQUIRE(wait_for([&] { return cluster.status().groups[0].stats.num_running == 1; }));
  caf::scoped_actor self{ts.sys};
  self->send_exit(cluster.router(), caf::exit_reason::kill);
  REQUIRE(live.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  const actors::request_outcome out = live.get();
  CHECK(out.finish_reason() == "error");
  CHECK(out.error.find("lost the router") != std::string::npos);
  CHECK(out.failure == runtime::failure_kind::unavailable);
  const auto t0 = std::chrono::steady_clock::now();
  const actors::request_outcome later = session.submit(ids_request({0, 5}, 4)).get();
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
  CHECK(later.error.find("lost the router") != std::string::npos);
  CHECK(later.reply.kind == runtime::failure_kind::unavailable);
}

TEST_CASE("client session: a router shut down in order says so") {
  // The coordinator's orderly stop: live requests end with "shutting down", and the router's
  // exit reason says it shut down (front ends said "lost the router: ...").
  test_system ts;
  const cluster_config c = toy_config({"model.toy.step_ms=5"});
  actors::local_cluster cluster(ts.sys, {.config = c, .assets = toy_assets(c)});
  actors::client_session session(ts.sys, cluster.router());
  auto live = session.submit(ids_request(random_prompt(60, 11), 2000));
  REQUIRE(wait_for([&] { return cluster.status().groups[0].stats.num_running == 1; }));
  caf::scoped_actor self{ts.sys};
  bool stopped = false;
  self->request(cluster.router(), std::chrono::seconds(5), actors::shutdown_atom::value)
      .receive([&](bool) { stopped = true; }, [](caf::error&) {});
  CHECK(stopped);
  REQUIRE(live.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  CHECK(live.get().error == "the cluster is shutting down");
  bool down = false;  // it stops by itself
  self->monitor(cluster.router());
  self->receive([&](caf::down_msg&) { down = true; }, caf::after(std::chrono::seconds(5)) >> [] {});
  REQUIRE(down);
  const actors::request_outcome later = session.submit(ids_request({0, 5}, 4)).get();
  CHECK(later.error == "the router shut down (the cluster stopped)");
  CHECK(later.reply.kind == runtime::failure_kind::unavailable);
}

/// A router that takes requests and never answers them (their promises kept, not delivered).
struct silent_router_state {
  std::vector<caf::typed_response_promise<actors::submit_reply>> held;
};

actors::router_actor::behavior_type silent_router(
    actors::router_actor::stateful_pointer<silent_router_state> self) {
  return {
      [=](actors::submit_request&) -> caf::result<actors::submit_reply> {
        self->state.held.push_back(self->make_response_promise<actors::submit_reply>());
        return self->state.held.back();
      },
      [](actors::abort_request&) {},
      [](actors::group_events&) {},
      [](actors::node_event&) {},
      [](actors::status_atom) { return actors::cluster_status{}; },
      [](actors::limits_atom) { return std::int64_t(1) << 30; },
      [](actors::shutdown_atom) { return true; },
      [](actors::tick_atom) {},
  };
}

TEST_CASE("client session: a request the router never answered before it stopped gets a reply") {
  // The request reached the router, which stopped before replying: the session's down handler
  // ended it with a final event but left the reply empty (kind 0, no error), and on_reply was
  // never called -- CI saw "a router shut down in order says so" fail that way when a submit
  // met the router as it stopped. The reply now says why, as a refusal would.
  test_system ts;
  auto router = ts.sys.spawn(silent_router);
  actors::client_session session(ts.sys, router);
  std::promise<actors::submit_reply> replied;
  auto heard = replied.get_future();
  std::promise<actors::request_outcome> finished;
  auto done = finished.get_future();
  session.submit(ids_request({0, 5}, 4),
                 {.on_reply = [&](const actors::submit_reply& r) { replied.set_value(r); },
                  .on_event = {},
                  .on_finished = [&](const actors::request_outcome& o) { finished.set_value(o); }});
  caf::scoped_actor self{ts.sys};
  // (a status request answered means the submit, sent before it by the session, has arrived)
  REQUIRE(wait_for([&] {
    bool held = false;
    self->request(router, std::chrono::seconds(5), actors::status_atom::value)
        .receive([&](actors::cluster_status&) { held = true; }, [](caf::error&) {});
    return held;
  }));
  self->send_exit(router, caf::exit_reason::user_shutdown);
  REQUIRE(heard.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  const actors::submit_reply r = heard.get();
  CHECK_FALSE(r.accepted);
  CHECK(r.kind == runtime::failure_kind::unavailable);
  CHECK(!r.error.empty());
  REQUIRE(done.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  const actors::request_outcome o = done.get();
  CHECK(o.reply.kind == runtime::failure_kind::unavailable);
  CHECK(o.error == r.error);
}

TEST_CASE("front ends: a router that has just stopped is reported with its down reason") {
  // A request sent to a remote router as it stops can come back as request_receiver_down
  // before the monitor's down message: the front ends said "the router did not answer:
  // request_receiver_down" (4 of 3000 requests in OrderlyStopTest). The request now waits for
  // the down message, which carries why.
  const caf::error gone = caf::make_error(caf::sec::request_receiver_down);
  CHECK(actors::submit_error_text(gone, "") == "");
  CHECK(actors::submit_error_text(gone, "the router shut down (the cluster stopped)") ==
        "the router shut down (the cluster stopped)");
  CHECK(actors::submit_error_text(caf::make_error(caf::sec::request_timeout), "") ==
        "the router did not answer: request_timeout");
  CHECK(actors::router_gone_message(actors::router_shutdown_reason()) ==
        "the router shut down (the cluster stopped)");
}

}  // namespace di::test
