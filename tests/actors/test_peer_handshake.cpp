// Reading a peer's cluster name from its BASP server handshake (actors/peer_handshake.hpp):
// from a real CAF node of another name, and nothing from bytes that are not a handshake.
#include "actors/peer_handshake.hpp"

#include "actor_test_util.hpp"
#include "actors/node_runtime.hpp"
#include "common/error.hpp"

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

namespace di::test {

namespace {

/// A node of cluster `name` with an actor published on a free port.
struct named_node {
  struct config : test_config {
    explicit config(const std::string& name) {
      load<caf::io::middleman>();
      set("middleman.app-identifiers", std::vector<std::string>{name});
    }
  };
  config cfg;
  caf::actor_system sys{cfg};
  caf::actor actor = sys.spawn([]() -> caf::behavior { return {[](int x) { return x; }}; });
  std::uint16_t port = 0;

  explicit named_node(const std::string& name) : cfg(name) {
    auto p = sys.middleman().publish(actor, 0, "127.0.0.1", true);
    REQUIRE(static_cast<bool>(p));
    port = *p;
  }
  ~named_node() { caf::anon_send_exit(actor, caf::exit_reason::user_shutdown); }
};

/// A TCP server on a free port of 127.0.0.1 that is not a deepinfer node: to each connection it
/// writes `reply` (nothing: it stays silent) and then holds it open until destroyed, or closes it.
struct foreign_server {
  int fd = -1;
  std::uint16_t port = 0;
  std::atomic<bool> is_stopping{false};
  std::thread thread;

  foreign_server(std::string reply, bool close_after) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    REQUIRE(::listen(fd, 8) == 0);
    socklen_t len = sizeof(a);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
    thread = std::thread([this, reply, close_after] {
      std::vector<int> open;
      while (!is_stopping) {
        pollfd p{.fd = fd, .events = POLLIN};
        if (::poll(&p, 1, 20) <= 0) continue;
        const int c = ::accept(fd, nullptr, nullptr);
        if (c < 0) continue;
        if (!reply.empty()) (void)!::write(c, reply.data(), reply.size());
        if (close_after)
          ::close(c);
        else
          open.push_back(c);
      }
      for (const int c : open) ::close(c);
    });
  }
  ~foreign_server() {
    is_stopping = true;
    thread.join();
    ::close(fd);
  }
};

/// The error connect_router throws for a router at 127.0.0.1:`port` (empty: it connected).
std::string connect_error(std::uint16_t port) {
  actors::network_settings net;
  net.connection_timeout_ms = 2000;
  actors::process_config cfg(net);
  caf::actor_system sys{cfg};
  try {
    actors::connect_router(sys, net, "127.0.0.1", port);
  } catch (const di::error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a port where something else than a router listens is named as such") {
  // `client --connect` to the HTTP port of `deepinfer serve` (or any other program) said only
  // CAF's "connection_timeout" (it waits for a handshake that never comes),
  // "malformed_basp_message" (an answer that is not one) or "disconnect_during_handshake".
  for (const auto& [reply, close_after, cause] :
       {std::tuple<std::string, bool, std::string>{"", false, "connection_timeout"},
        {"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", true, "malformed_basp_message"},
        {"", true, "disconnect_during_handshake"}}) {
    foreign_server server(reply, close_after);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string error = connect_error(server.port);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Silence is given the connection timeout (2 s here): CAF gave up at its first heartbeat
    // tick, after 0.7 s, whatever the timeout (a router stalled for 1.5 s failed a client).
    if (cause == "connection_timeout") {
      CHECK(secs >= 1.9);
      CHECK(secs < 6);
    }
    INFO(error);
    CHECK(error.starts_with(
        fmt::format("cannot connect to the router at 127.0.0.1:{}: ", server.port)));
    CHECK(error.find("did not answer as a deepinfer router (" + cause + ")") != std::string::npos);
    CHECK(error.find("`deepinfer serve`") != std::string::npos);  // its HTTP port, a common slip
  }
}

TEST_CASE("a node's cluster name is read from its handshake") {
  named_node node("cluster-a");
  const auto ids = actors::peer_app_ids("127.0.0.1", node.port, std::chrono::milliseconds(2000));
  REQUIRE(ids.has_value());
  CHECK(*ids == std::vector<std::string>{"cluster-a"});
  // what a node of another name prints (CAF itself refuses the connection, naming neither)
  named_node other("cluster-b");
  auto h = other.sys.middleman().remote_actor("127.0.0.1", node.port);
  REQUIRE_FALSE(static_cast<bool>(h));
  CHECK(h.error() == caf::sec::incompatible_application_ids);
  const std::string msg = actors::cluster_name_mismatch(
      "this node's cluster.name", "cluster-b", "the coordinator (node 0)", "127.0.0.1", node.port, false);
  CHECK(msg == fmt::format("this node's cluster.name 'cluster-b' does not match the cluster it "
                           "connects to: the coordinator (node 0) at 127.0.0.1:{} has "
                           "cluster.name 'cluster-a'",
                           node.port));
}

TEST_CASE("a process of another build is refused, and the message says so") {
  // A client built after submit_reply gained a field read a running cluster's replies one byte
  // off without an error (its seed shifted, its prompt ids empty): CAF 0.17 compares message
  // type names only. The application id now carries the build's wire fingerprint.
  const std::string mine = actors::app_identifier("c");
  CHECK(mine == "c@wire-" + std::string(actors::wire_fingerprint()));
  CHECK(actors::wire_fingerprint().size() == 12);
  const actors::app_id_parts parts = actors::split_app_identifier(mine);
  CHECK(parts.name == "c");
  CHECK(parts.wire == actors::wire_fingerprint());
  const actors::app_id_parts odd = actors::split_app_identifier("a@wire-b@wire-0123");
  CHECK(odd.name == "a@wire-b");  // a name may hold the tag: the last one splits
  CHECK(odd.wire == "0123");
  CHECK(actors::split_app_identifier("plain").wire.empty());

  named_node node(actors::app_identifier("c", "000000000000"));  // the same name, another build
  named_node other(mine);
  auto h = other.sys.middleman().remote_actor("127.0.0.1", node.port);
  REQUIRE_FALSE(static_cast<bool>(h));
  CHECK(h.error() == caf::sec::incompatible_application_ids);
  const std::string msg = actors::cluster_name_mismatch(
      "this node's cluster.name", "c", "the coordinator (node 0)", "127.0.0.1", node.port, false,
      "start every node with the same cluster file");
  CHECK(msg == fmt::format("the coordinator (node 0) at 127.0.0.1:{} runs another build of "
                           "deepinfer (wire fingerprint 000000000000, this process's {}): the "
                           "nodes and clients of a cluster must come from the same sources, or "
                           "they would misread each other's messages",
                           node.port, actors::wire_fingerprint()));
  // A build from before fingerprints announces the bare name.
  named_node old("c");
  CHECK(actors::cluster_name_mismatch("own", "c", "the router", "127.0.0.1", old.port, false)
            .find("(wire fingerprint none, from an older build, this process's ") !=
        std::string::npos);
  // Another name is still a name mismatch, with the caller's advice after it.
  named_node named(actors::app_identifier("d"));
  CHECK(actors::cluster_name_mismatch("own", "c", "the router", "127.0.0.1", named.port, false,
                                      "pass --cluster-name") ==
        fmt::format("own 'c' does not match the cluster it connects to: the router at "
                    "127.0.0.1:{} has cluster.name 'd'; pass --cluster-name",
                    named.port));
}

TEST_CASE("bytes that are not a server handshake give no name") {
  CHECK_FALSE(actors::server_handshake_app_ids("").has_value());
  CHECK_FALSE(actors::server_handshake_app_ids(std::string(32, '\0')).has_value());  // no payload
  std::string hdr(32, '\0');
  hdr[7] = 40;  // announces 40 bytes, has 10
  CHECK_FALSE(actors::server_handshake_app_ids(hdr + std::string(10, 'x')).has_value());
  hdr[0] = 1;  // another operation
  CHECK_FALSE(actors::server_handshake_app_ids(hdr + std::string(40, 'x')).has_value());
  // nobody listening: no name, and the message says so without one
  const std::string msg =
      actors::cluster_name_mismatch("own", "a", "the router", "127.0.0.1", 1, false);
  CHECK(msg.find("belongs to a cluster of another name") != std::string::npos);
}

}  // namespace di::test
