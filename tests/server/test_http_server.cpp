// The HTTP server in process, over a fake router: a handler that throws fails its own response
// (a 500, or an error event and [DONE] in a stream) and the server answers the next request;
// the I/O threads' loop outlives a handler's exception.
#include "actors/messages.hpp"
#include "runtime/grammar/compile_interrupt.hpp"
#include "server/engine.hpp"
#include "server/http_server.hpp"
#include "server/server_context.hpp"
#include "tests/test_support.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::json;

struct caf_config : caf::actor_system_config {
  caf_config() {
    di::actors::register_types(*this);
    set("scheduler.max-threads", 2);
    set("logger.console-verbosity", caf::atom("quiet"));
    set("logger.file-verbosity", caf::atom("quiet"));
  }
};

/// A prompt that starts with one of these ids is "poisoned": the fake router's accepted reply
/// gives a prompt id the tokenizer has no token for, so an echo of it cannot be decoded (the
/// server validated the ids it sent; here the router's reply bypasses that check). The first
/// finishes at once, the second is held until it is aborted.
constexpr std::int32_t poison = 4242;
constexpr std::int32_t poison_held = 4243;
/// A prompt that starts with this id is served normally ("hi") after `slow_delay`.
constexpr std::int32_t slow = 4244;
constexpr std::chrono::milliseconds slow_delay{400};

struct router_counts {
  std::atomic<int> submits{0};
  std::atomic<int> aborts{0};
};

struct fake_router_state {
  std::shared_ptr<router_counts> counts;
  std::int32_t bad_id = 0;
  std::map<std::pair<caf::actor_addr, std::uint64_t>, di::actors::client_actor>
      held;  // live, never finished
};

/// Accepts every request. A normal one finishes at once (one token, "hi"), as does one
/// poisoned with `poison` (accepted with an undecodable prompt id); one poisoned with
/// `poison_held` is held until aborted, when its final event says abort; a `slow` one finishes
/// after slow_delay.
di::actors::router_actor::behavior_type fake_router(
    di::actors::router_actor::stateful_pointer<fake_router_state> self,
    std::shared_ptr<router_counts> counts, std::int32_t bad_id) {
  self->state.counts = std::move(counts);
  self->state.bad_id = bad_id;
  return {
      [=](di::actors::submit_request& req) -> caf::result<di::actors::submit_reply> {
        ++self->state.counts->submits;
        auto client = caf::actor_cast<di::actors::client_actor>(self->current_sender());
        auto rp = self->make_response_promise<di::actors::submit_reply>();
        const std::int32_t first = req.prompt_ids.empty() ? -1 : req.prompt_ids.front();
        const bool poisoned = first == poison || first == poison_held;
        di::actors::submit_reply reply{.accepted = true, .prompt_ids = req.prompt_ids};
        if (poisoned) reply.prompt_ids = {self->state.bad_id};
        rp.deliver(std::move(reply));  // before the events, which the client takes in order
        if (first == poison_held) {
          self->state.held[{client.address(), req.id}] = client;
          return rp;
        }
        di::runtime::token_event e{.request_id = req.id,
                                   .token_ids = {72},
                                   .text = "hi",
                                   .status = di::runtime::sequence_status::finished_length};
        if (first == slow)
          self->delayed_send(client, slow_delay, di::actors::client_events{{std::move(e)}});
        else
          self->send(client, di::actors::client_events{{std::move(e)}});
        return rp;
      },
      [=](di::actors::abort_request& a) {
        ++self->state.counts->aborts;
        const auto key =
            std::make_pair(caf::actor_cast<caf::actor_addr>(self->current_sender()), a.id);
        const auto it = self->state.held.find(key);
        if (it == self->state.held.end()) return;
        di::runtime::token_event e{.request_id = a.id,
                                   .status = di::runtime::sequence_status::finished_abort};
        self->send(it->second, di::actors::client_events{{std::move(e)}});
        self->state.held.erase(it);
      },
      [](di::actors::group_events&) {},
      [](di::actors::node_event&) {},
      [](di::actors::status_atom) { return di::actors::cluster_status{}; },
      [](di::actors::limits_atom) { return std::int64_t(1) << 30; },
      [](di::actors::shutdown_atom) { return true; },
      [](di::actors::tick_atom) {},
  };
}

struct reply {
  int status = 0;
  std::string body;
};

/// Connects `sock` to the server on 127.0.0.1:port; its reads give up after 20 s (a test that
/// waits for an answer that never comes fails instead of hanging).
void connect_local(tcp::socket& sock, std::uint16_t port) {
  sock.connect({asio::ip::make_address("127.0.0.1"), port});
  timeval tv{.tv_sec = 20, .tv_usec = 0};
  setsockopt(sock.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

/// One request on a fresh connection, read to its end (a stream too); reads give up after 20 s.
reply post(std::uint16_t port, const std::string& target, const json& body) {
  asio::io_context ioc;
  tcp::socket sock(ioc);
  connect_local(sock, port);
  http::request<http::string_body> req{http::verb::post, target, 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::content_type, "application/json");
  req.body() = body.dump();
  req.prepare_payload();
  http::write(sock, req);
  beast::flat_buffer buf;
  http::response<http::string_body> res;
  http::read(sock, buf, res);
  return {int(res.result_int()), res.body()};
}

/// The server on port 0 in front of a fake router, with the bundled tokenizer.
struct fake_server {
  caf_config cfg;
  caf::actor_system sys{cfg};
  std::shared_ptr<router_counts> counts = std::make_shared<router_counts>();
  di::server::server_context ctx;
  std::unique_ptr<di::server::engine> cluster;
  std::unique_ptr<di::server::http_server> server;
  di::actors::router_actor router;

  /// The in-process runners' compile of a request's grammar: "spin" runs until interrupted.
  std::atomic<int> compiles_running{0};
  std::atomic<int> compiles_interrupted{0};

  fake_server() {
    ctx.prepare_grammar = [this](const std::string& spec) {
      if (spec.find("spin") == std::string::npos) return;
      ++compiles_running;
      try {
        for (;;) {
          di::grammar::check_interrupt();
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      } catch (const di::grammar::compile_interrupted&) {
        ++compiles_interrupted;
        --compiles_running;
        throw;
      }
    };
    auto tok = std::make_shared<const di::tok::tokenizer>(di::tok::tokenizer::from_dir(
        di::test::shared_path("models/deepseek-v3-tokenizer").string(), {}));
    router = sys.spawn(fake_router, counts, std::int32_t(tok->vocab_size()) + 7);
    ctx.settings.port = 0;
    ctx.settings.io_threads = 1;
    ctx.settings.grammar_threads = 1;
    ctx.model = {.name = "fake", .tokenizer = tok};
    cluster = std::make_unique<di::server::engine>(sys, router);
    ctx.cluster = cluster.get();
    server = std::make_unique<di::server::http_server>(ctx);
    server->start();
  }
  ~fake_server() {
    server->stop();
    cluster->shutdown();
    caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
  }
  std::uint16_t port() const { return server->port(); }

  bool slots_released() const {
    return di::test::eventually([&] { return ctx.num_inflight.load() == 0; });
  }
};

json completion(std::vector<std::int32_t> prompt, bool stream) {
  return {
      {"model", "fake"}, {"prompt", prompt}, {"max_tokens", 4}, {"echo", true}, {"stream", stream}};
}

void check_served_normally(const fake_server& s) {
  const reply ok = post(s.port(), "/v1/completions", completion({1, 2, 3}, false));
  CHECK(ok.status == 200);
  const json body = json::parse(ok.body);
  CHECK(body["choices"][0]["text"].get<std::string>().ends_with("hi"));
  CHECK(body["choices"][0]["finish_reason"] == "length");
}

}  // namespace

TEST_CASE("http server: a response whose handler throws fails alone, with a 500") {
  // The echo decodes the router's prompt ids, one of which has no token: di::error in the
  // handler posted to the connection's strand. It reached the I/O thread and std::terminate
  // ended the server.
  fake_server s;
  const reply bad = post(s.port(), "/v1/completions", completion({poison, 5}, false));
  CHECK(bad.status == 500);
  const json err = json::parse(bad.body);
  REQUIRE(err.contains("error"));
  CHECK(err["error"]["code"] == "generation_failed");
  CHECK(err["error"]["message"].get<std::string>().find("internal error") != std::string::npos);
  CHECK(s.slots_released());
  check_served_normally(s);  // the same server answers the next request
  CHECK(s.slots_released());
}

TEST_CASE("http server: a stream whose handler throws ends with an error event and [DONE]") {
  // Thrown as the stream opens (the echo of the first chunk): the job is aborted (the router
  // hears it and ends the request), the client reads an error event and [DONE].
  fake_server s;
  const reply bad = post(s.port(), "/v1/completions", completion({poison_held, 5}, true));
  CHECK(bad.status == 200);
  const std::string error_event = "data: {\"error\":";
  const auto at = bad.body.find(error_event);
  REQUIRE(at != std::string::npos);
  const std::string tail = bad.body.substr(at);
  CHECK(tail.find("generation_failed") != std::string::npos);
  CHECK(tail.ends_with("data: [DONE]\n\n"));
  CHECK(bad.body.find("data: [DONE]") == bad.body.rfind("data: [DONE]"));  // once
  // The abort reaches the router after the client has read [DONE]; wait for it.
  CHECK(di::test::eventually([&] { return s.counts->aborts.load() >= 1; }));
  CHECK(s.slots_released());  // the aborted request's final event gave the slot back
  check_served_normally(s);
  const reply ok = post(s.port(), "/v1/completions", completion({1, 2}, true));
  CHECK(ok.status == 200);
  CHECK(ok.body.find("\"error\"") == std::string::npos);
  CHECK(ok.body.ends_with("data: [DONE]\n\n"));
}

TEST_CASE("http server: the I/O loop outlives a handler that throws") {
  asio::io_context ioc;
  auto guard = asio::make_work_guard(ioc);
  std::atomic<int> ran{0};
  asio::post(ioc, [] { throw std::runtime_error("a bad handler"); });
  asio::post(ioc, [&] { throw 7; });  // not even a std::exception
  asio::post(ioc, [&] {
    ++ran;
    ioc.stop();
  });
  std::thread t([&] { di::server::run_io_context(ioc); });
  t.join();
  CHECK(ran.load() == 1);
}

TEST_CASE("http server: /tokenize names the field at fault") {
  // A bad add_special_tokens was read inside the encode's try, whose catch blamed the prompt.
  fake_server s;
  const reply bad = post(s.port(), "/tokenize", {{"prompt", "hi"}, {"add_special_tokens", "yes"}});
  CHECK(bad.status == 400);
  const json err = json::parse(bad.body);
  CHECK(err["error"]["param"] == "add_special_tokens");
  CHECK(err["error"]["message"] == "'add_special_tokens' must be a boolean");
  const reply ok = post(s.port(), "/tokenize", {{"prompt", "hi"}, {"add_special_tokens", false}});
  CHECK(ok.status == 200);
  CHECK(json::parse(ok.body)["count"] == 1);
}

TEST_CASE("http server: a client that leaves while its grammar compiles stops the compile") {
  // Its wait went on until the compile ended or the 100 s limit passed, holding a grammar
  // thread and an admission slot for nobody.
  fake_server s;
  asio::io_context ioc;
  tcp::socket sock(ioc);
  sock.connect({asio::ip::make_address("127.0.0.1"), s.port()});
  http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
  req.set(http::field::host, "127.0.0.1");
  req.body() = json{{"prompt", "x"},
                    {"max_tokens", 4},
                    {"response_format", {{"type", "regex"}, {"regex", "spin"}}}}
                   .dump();
  req.prepare_payload();
  http::write(sock, req);
  REQUIRE(di::test::eventually([&] { return s.compiles_running.load() == 1; }));
  CHECK(s.ctx.num_inflight.load() == 1);
  const auto t0 = std::chrono::steady_clock::now();
  sock.close();
  CHECK(di::test::eventually([&] { return s.compiles_interrupted.load() == 1; }));
  CHECK(s.slots_released());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("the compile stopped and the slot came back ", seconds, " s after the client left");
  CHECK(seconds < 2.0);
  CHECK(s.counts->submits.load() == 0);  // nothing was started for it
  check_served_normally(s);
}

namespace {
/// CPU seconds this process used (every thread).
double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}
}  // namespace

TEST_CASE("http server: out of file descriptors, the accept loop waits instead of spinning") {
  // The failed accept was tried again at once, failed again at once while the connections
  // waited in the backlog, and the I/O thread spun until a descriptor came free.
  fake_server s;
  // The client sockets exist before the limit drops (connect() takes no descriptor).
  std::vector<int> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(::socket(AF_INET, SOCK_STREAM, 0));
  for (int fd : clients) REQUIRE(fd >= 0);
  rlimit old_limit{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &old_limit) == 0);
  rlimit low = old_limit;
  low.rlim_cur = 3;  // below every descriptor open: each accept fails with EMFILE
  REQUIRE(setrlimit(RLIMIT_NOFILE, &low) == 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(s.port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int connected = 0;
  for (int fd : clients)
    connected += ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double cpu0 = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double busy = process_cpu_seconds() - cpu0;
  REQUIRE(setrlimit(RLIMIT_NOFILE, &old_limit) == 0);
  CHECK(connected == 3);  // in the backlog
  MESSAGE("CPU seconds in the second the accepts failed: ", busy);
  CHECK(busy < 0.3);  // one I/O thread spinning: about 1
  // Once descriptors are free again, the waiting connections are served.
  const std::string get = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  for (int fd : clients) {
    timeval tv{.tv_sec = 10, .tv_usec = 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    REQUIRE(::send(fd, get.data(), get.size(), 0) == ssize_t(get.size()));
    char buf[64] = {};
    const ssize_t n = ::recv(fd, buf, sizeof buf - 1, 0);
    CHECK(std::string(buf, n > 0 ? std::size_t(n) : 0).starts_with("HTTP/1.1 200"));
    ::close(fd);
  }
  check_served_normally(s);
}

TEST_CASE("http server: an absolute-form target is routed by its path") {
  // RFC 9112 3.2.2: a server must accept "POST http://host:port/v1/completions HTTP/1.1". It
  // was routed as written, a 404 "no route".
  fake_server s;
  const std::string origin = fmt::format("http://127.0.0.1:{}", s.port());
  const reply ok = post(s.port(), origin + "/v1/completions", completion({1, 2, 3}, false));
  CHECK(ok.status == 200);
  CHECK(json::parse(ok.body)["choices"][0]["text"].get<std::string>().ends_with("hi"));
  // The scheme and authority are ignored (any case, any host); the query as in origin form.
  const reply tok = post(s.port(), "HTTPS://example.com:443/tokenize?x=1", {{"prompt", "hi"}});
  CHECK(tok.status == 200);
  CHECK(json::parse(tok.body)["count"] == 2);
  const reply none = post(s.port(), origin + "/nothing?a=/b", {{"prompt", "hi"}});
  CHECK(none.status == 404);
  CHECK(json::parse(none.body)["error"]["message"] == "no route POST /nothing");
  const reply root = post(s.port(), origin + "?q", {{"prompt", "hi"}});
  CHECK(root.status == 404);
  CHECK(json::parse(root.body)["error"]["message"] == "no route POST /");
  check_served_normally(s);
}

namespace {

/// A connection that sends a request head with `Expect: 100-continue` and a Content-Length,
/// and reads what comes back, one response (an interim 100 too) at a time.
struct expecting_client {
  asio::io_context ioc;
  tcp::socket sock{ioc};
  beast::flat_buffer buf;

  /// `expect`: the Expect header line ("" for none).
  expecting_client(std::uint16_t port, const std::string& method, const std::string& target,
                   const std::string& extra_headers, std::size_t content_length,
                   const std::string& expect = "Expect: 100-continue\r\n") {
    connect_local(sock, port);
    asio::write(sock, asio::buffer(fmt::format(
                          "{} {} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          "Content-Length: {}\r\n{}{}\r\n",
                          method, target, content_length, expect, extra_headers)));
  }
  http::response<http::string_body> read() {
    http::response<http::string_body> res;
    http::read(sock, buf, res);
    return res;
  }
};

}  // namespace

TEST_CASE(
    "http server: Expect: 100-continue is answered with the final status when the head decides") {
  // The 100 Continue went out before the API key, the route and the method were checked: a
  // client about to be refused 401/404/405 was told to upload its body (up to 8 MB) first.
  fake_server s;
  s.ctx.settings.api_keys = {"sk-right"};  // (read per request; none is in flight yet)
  const std::string body = completion({1, 2, 3}, false).dump();
  const std::string key = "Authorization: Bearer sk-right\r\n";
  struct refused_case {
    std::string method, target, headers;
    int status;
  };
  for (const refused_case& c : std::vector<refused_case>{
           {"POST", "/v1/completions", "Authorization: Bearer sk-wrong\r\n", 401},
           {"POST", "/v1/completions", "", 401},
           {"POST", "/v1/nothing", key, 404},
           {"POST", "/v1/nothing", "", 401},  // the key first, as without Expect
           {"PUT", "/v1/completions", key, 405},
           {"POST", "/health", "", 405},
           {"POST", "/v1/completions", key + "Content-Encoding: gzip\r\n", 415}}) {
    CAPTURE(c.method);
    CAPTURE(c.target);
    CAPTURE(c.headers);
    expecting_client client(s.port(), c.method, c.target, c.headers, 8'000'000);
    const auto res = client.read();  // without sending a byte of the body
    CHECK(res.result_int() == c.status);
    if (res.result_int() == 100) continue;  // (the old code: it waits for the body)
    CHECK(res[http::field::connection] == "close");
    if (c.status == 405) CHECK(!res[http::field::allow].empty());
    const json err = json::parse(res.body());
    CHECK(err["error"].contains("message"));
    // The server closes the connection after it.
    beast::error_code ec;
    http::response<http::string_body> next;
    http::read(client.sock, client.buf, next, ec);
    CHECK(ec);
  }
  // A request the head does not refuse gets the 100, then its answer once the body is sent.
  expecting_client ok(s.port(), "POST", "/v1/completions", key, body.size());
  CHECK(ok.read().result_int() == 100);
  asio::write(ok.sock, asio::buffer(body));
  const auto res = ok.read();
  CHECK(res.result_int() == 200);
  CHECK(json::parse(res.body())["choices"][0]["text"].get<std::string>().ends_with("hi"));
  // A body that decides the answer is read first, as before: a 400 after the 100.
  expecting_client bad(s.port(), "POST", "/v1/completions", key, 2);
  CHECK(bad.read().result_int() == 100);
  asio::write(bad.sock, asio::buffer(std::string("{]")));
  CHECK(bad.read().result_int() == 400);
  s.ctx.settings.api_keys.clear();
  check_served_normally(s);
}

TEST_CASE("http server: while draining, a generation request is refused 503 from its head") {
  // The 503 of a server shutting down went out only after the whole body was read (up to
  // server.max_body_bytes): a client uploading a large prompt sent it all to be refused.
  fake_server s;
  s.ctx.is_draining = true;
  for (const std::string target : {"/v1/completions", "/v1/chat/completions"}) {
    CAPTURE(target);
    expecting_client client(s.port(), "POST", target, "", 8'000'000, "");
    const auto res = client.read();  // without sending a byte of the body
    CHECK(res.result_int() == 503);
    CHECK(res[http::field::connection] == "close");
    CHECK(!res[http::field::retry_after].empty());
    const json err = json::parse(res.body().empty() ? "{}" : res.body());
    CHECK(err["error"]["code"] == "shutting_down");
    beast::error_code ec;  // and closes the connection
    http::response<http::string_body> next;
    http::read(client.sock, client.buf, next, ec);
    CHECK(ec);
  }
  // What the head alone refuses comes first, as when the body was read: no route is a 404.
  expecting_client none(s.port(), "POST", "/v1/nothing", "", 8'000'000, "");
  CHECK(none.read().result_int() == 404);
  // Routes the drain does not refuse still read their body and answer.
  const reply tok = post(s.port(), "/tokenize", {{"prompt", "hi"}});
  CHECK(tok.status == 200);
  s.ctx.is_draining = false;
  check_served_normally(s);
  CHECK(s.counts->submits.load() == 1);  // (check_served_normally's)
}

namespace {

/// The bytes of a POST with a JSON body.
std::string post_bytes(const std::string& target, const json& body) {
  const std::string b = body.dump();
  return fmt::format(
      "POST {} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: {}\r\n\r\n{}",
      target, b.size(), b);
}

}  // namespace

TEST_CASE(
    "http server: a client that leaves after pipelining a request aborts the one in progress") {
  // The disconnect watch stopped at the first byte of a pipelined request (a wait on a socket
  // with unread bytes wakes at once): a client that left then was not noticed, and the request
  // in progress ran on to its max_tokens for nobody, holding its admission slot.
  fake_server s;
  const std::string held = post_bytes("/v1/completions", completion({poison_held, 5}, false));
  const std::string normal = post_bytes("/v1/completions", completion({1, 2, 3}, false));
  {
    // The connection's first request, the next one behind it in the socket.
    asio::io_context ioc;
    tcp::socket sock(ioc);
    sock.connect({asio::ip::make_address("127.0.0.1"), s.port()});
    asio::write(sock, asio::buffer(held));
    REQUIRE(di::test::eventually([&] { return s.counts->submits.load() == 1; }));
    asio::write(sock, asio::buffer(normal));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the watch sees its bytes
    sock.close();
    CHECK(di::test::eventually([&] { return s.counts->aborts.load() == 1; }));
    CHECK(s.slots_released());
  }
  {
    // The second of a pipelined pair (read from the session's buffer), a third behind it.
    asio::io_context ioc;
    tcp::socket sock(ioc);
    sock.connect({asio::ip::make_address("127.0.0.1"), s.port()});
    asio::write(sock, asio::buffer(normal + held));
    REQUIRE(di::test::eventually([&] { return s.counts->submits.load() == 3; }));
    asio::write(sock, asio::buffer(normal));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    sock.close();
    CHECK(di::test::eventually([&] { return s.counts->aborts.load() == 2; }));
    CHECK(s.slots_released());
  }
  CHECK(s.counts->submits.load() == 3);  // nothing was started after the client left
  check_served_normally(s);
}

TEST_CASE("http server: requests pipelined behind a slow one are answered in order") {
  // The bytes of the next requests are read while the slow one is answered (so that the
  // disconnect watch sees a client that leaves), one of them in two parts: they must be parsed
  // as sent.
  fake_server s;
  asio::io_context ioc;
  tcp::socket sock(ioc);
  connect_local(sock, s.port());
  asio::write(sock, asio::buffer(post_bytes("/v1/completions", completion({slow, 5}, false))));
  REQUIRE(di::test::eventually([&] { return s.counts->submits.load() == 1; }));
  const std::string second = post_bytes("/tokenize", {{"prompt", "hi"}});
  asio::write(sock, asio::buffer(second.substr(0, 40)));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  asio::write(sock, asio::buffer(second.substr(40) +
                                 post_bytes("/v1/completions", completion({1, 2}, false))));
  beast::flat_buffer buf;
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    http::response<http::string_body> res;
    beast::error_code ec;
    http::read(sock, buf, res, ec);
    REQUIRE(!ec);
    CHECK(res.result_int() == 200);
    const json body = json::parse(res.body());
    if (i == 1)
      CHECK(body["count"] == 2);
    else
      CHECK(body["choices"][0]["text"].get<std::string>().ends_with("hi"));
  }
  CHECK(s.slots_released());
}

TEST_CASE("http server: an HTTP/1.0 request's Expect: 100-continue is ignored") {
  // RFC 9110 10.1.1: a server must ignore it, and must not send a 1xx to an HTTP/1.0 client
  // (15.2), which reads the 100 as its answer. The 100 went out.
  fake_server s;
  asio::io_context ioc;
  tcp::socket sock(ioc);
  connect_local(sock, s.port());
  const std::string body = completion({1, 2, 3}, false).dump();
  asio::write(sock, asio::buffer(fmt::format(
                        "POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
                        "Content-Length: {}\r\nExpect: 100-continue\r\n\r\n{}",
                        body.size(), body)));
  beast::flat_buffer buf;
  http::response<http::string_body> res;
  http::read(sock, buf, res);
  CHECK(res.result_int() == 200);  // the answer, with no interim response before it
  if (res.result_int() == 200)
    CHECK(json::parse(res.body())["choices"][0]["text"].get<std::string>().ends_with("hi"));
}
