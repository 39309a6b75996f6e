// Process-level runtime (see node_runtime.hpp): CAF configuration, signals, the node's main
// loop, connecting to the coordinator and to routers.
#include "actors/node_runtime.hpp"

#include "actors/basp_frame_guard.hpp"
#include "actors/logging.hpp"
#include "actors/node_actor.hpp"
#include "actors/peer_handshake.hpp"
#include "actors/tls_error_queue.hpp"
#include "actors/tls_files.hpp"
#include "common/error.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <spdlog/spdlog.h>

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <future>
#include <memory>
#include <optional>
#include <system_error>
#include <thread>

namespace di::actors {

namespace {

std::atomic<int> g_signals{0};
std::atomic<int> g_first_signal{0};  ///< the first signal's number

extern "C" void on_signal(int sig) {
  int none = 0;
  g_first_signal.compare_exchange_strong(none, sig);
  if (g_signals.fetch_add(1) >= 1) std::_Exit(130);  // a second signal: stop now
}

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // `launch` starts nodes with these blocked until now; one that arrived meanwhile is taken here.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
}

template <class Handle>
caf::expected<std::uint16_t> publish_node(caf::actor_system& sys, const network_settings& net,
                                          const Handle& node, std::uint16_t port, const std::string& bind) {
  if (net.tls.enabled) return caf::openssl::publish(node, port, bind.c_str(), true);
  return sys.middleman().publish(node, port, bind.c_str(), true);
}

/// Reaches the coordinator, retrying until the startup deadline (it may start later);
/// nullopt when a stop signal came first.
std::optional<node_actor> find_coordinator(caf::actor_system& sys, const cluster_config& c,
                                           const network_settings& net) {
  const node_config& n0 = c.nodes[0];
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(c.cluster.startup_timeout_s);
  std::string last;
  while (std::chrono::steady_clock::now() < deadline && g_signals.load() == 0) {
    caf::expected<node_actor> h =
        net.tls.enabled ? caf::openssl::remote_actor<node_actor>(sys, n0.host, n0.port)
                        : sys.middleman().remote_actor<node_actor>(n0.host, n0.port);
    if (h) return *h;
    // Another cluster.name: retrying cannot help (it waited out startup_timeout_s and then
    // printed CAF's incompatible_application_ids).
    if (h.error() == caf::sec::incompatible_application_ids)
      DI_FAIL("{}",
              cluster_name_mismatch("this node's cluster.name", net.app_id,
                                    "the coordinator (node 0)", n0.host, n0.port, net.tls.enabled,
                                    "start every node with the same cluster file and --set "
                                    "options"));
    last = describe(h.error());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (g_signals.load() > 0) return std::nullopt;
  DI_FAIL("cannot reach the coordinator (node 0) at {}:{} within {} s: {}", n0.host, n0.port,
          c.cluster.startup_timeout_s, last);
}

}  // namespace

namespace {

/// Tries `attempt` (a socket call on a fresh stream socket; an errno or 0) on every address
/// `host`:`port` resolves to until one succeeds: "" then, else the first failure's message (or
/// the resolver's).
template <class Attempt>
std::string first_socket_failure(const std::string& host, std::uint16_t port, int flags,
                                 Attempt&& attempt) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags;
  addrinfo* list = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc =
          getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &list);
      rc != 0)
    return gai_strerror(rc);
  std::string cause;
  bool done = false;
  for (addrinfo* a = list; a != nullptr && !done; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    const int err = fd < 0 ? errno : attempt(fd, *a);
    if (fd >= 0) close(fd);
    if (err == 0)
      done = true;
    else if (cause.empty())
      cause = std::error_code(err, std::generic_category()).message();
  }
  freeaddrinfo(list);
  return done ? "" : cause;
}

}  // namespace

/// Why listening on `address`:`port` fails, e.g. "Address already in use"; "" when it works now.
/// CAF 0.17 reports a failed publish as "tcp socket creation failed" only: the errno is dropped
/// inside CAF (on the middleman's thread), so after a failure the bind is tried once more here
/// the way CAF does it (SO_REUSEADDR, every address the name resolves to).
std::string listen_failure_cause(const std::string& address, std::uint16_t port) {
  return first_socket_failure(address, port, AI_PASSIVE, [](int fd, const addrinfo& a) {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    return ::bind(fd, a.ai_addr, a.ai_addrlen) != 0 || ::listen(fd, 1) != 0 ? errno : 0;
  });
}

/// Why a TCP connection to `host`:`port` fails, e.g. "Connection refused"; "" when one opens
/// now. CAF 0.17 says only "ip_connect failed" (the errno stays inside CAF), so after a failed
/// connect the client tries one plain connection itself to name the cause.
std::string connect_failure_cause(const std::string& host, std::uint16_t port) {
  return first_socket_failure(host, port, 0, [](int fd, const addrinfo& a) {
    return ::connect(fd, a.ai_addr, a.ai_addrlen) != 0 ? errno : 0;
  });
}

network_settings network_settings_of(const cluster_config& c) {
  return {.app_id = c.cluster.name,
          .heartbeat_interval_ms = c.cluster.heartbeat_interval_ms,
          .connection_timeout_ms = c.cluster.connection_timeout_ms,
          .policy = c.cluster.caf_policy,
          .threads = c.cluster.caf_threads,
          .max_message_bytes = c.cluster.max_message_bytes,
          .tls = c.tls};
}

process_config::process_config(const network_settings& s) {
  register_types(*this);
  load<caf::io::middleman>();
  set_basp_message_limit(s.max_message_bytes);
  if (!basp_frame_guard_active())
    component_logger("node")->warn(
        "the BASP frame-length guard is not in effect in this binary; one header announcing a huge "
        "payload can stall this process's network thread (actors/basp_frame_guard.hpp)");
  if (s.tls.enabled) {
    // Without a certificate CAF silently falls back to anonymous TLS: encrypted but anyone
    // can connect. The cluster file validation refuses that too; clients check here.
    DI_CHECK(!s.tls.certificate.empty() && !s.tls.key.empty() && !s.tls.cafile.empty(),
             "TLS needs a certificate, a key and a CA file (anonymous TLS would authenticate nobody)");
    check_tls_files(s.tls);  // CAF's own load fails inside an actor: abort or a hang
    load<caf::openssl::manager>();
    if (!tls_error_queue_guard_active())
      component_logger("node")->warn(
          "TLS: the OpenSSL error-queue guard is not in effect in this binary; one failed "
          "handshake may break this process's other TLS connections (actors/tls_error_queue.hpp)");
    set("openssl.certificate", s.tls.certificate);
    set("openssl.key", s.tls.key);
    set("openssl.cafile", s.tls.cafile);
    if (!s.tls.passphrase.empty()) set("openssl.passphrase", s.tls.passphrase);
  }
  set("middleman.app-identifiers", std::vector<std::string>{app_identifier(s.app_id)});
  set("middleman.heartbeat-interval", caf::timespan{std::chrono::milliseconds(s.heartbeat_interval_ms)});
  set("middleman.connection-timeout", caf::timespan{std::chrono::milliseconds(s.connection_timeout_ms)});
  set("scheduler.policy", s.policy == "stealing" ? caf::atom("stealing") : caf::atom("sharing"));
  if (s.threads > 0) set("scheduler.max-threads", s.threads);
  set("logger.console-verbosity", caf::atom("quiet"));
  set("logger.file-verbosity", caf::atom("quiet"));
}

namespace {

/// Destroys the actor system, waiting at most `limit`. CAF 0.17's ~actor_system stops the
/// middleman and then waits until every detached actor object is destroyed, and its private
/// threads could keep a finished detached actor alive forever (CAF issue 1196): executor
/// nodes hung on 1 in 4 shutdowns until the executor stopped being a detached actor (see
/// executor_actor.hpp). No actor here is detached any more; the watchdog stays as a last
/// resort and logs a warning when it fires: every actor has stopped by the time this runs,
/// so past the limit it ends the process without the teardown rather than let it hang.
int finish_process(std::unique_ptr<caf::actor_system> sys, std::unique_ptr<process_config> cfg, int code,
                   std::chrono::seconds limit) {
  std::promise<void> finished;
  std::thread watchdog([done = finished.get_future(), code, limit] {
    if (done.wait_for(limit) == std::future_status::ready) return;
    component_logger("node")->warn("the actor system did not finish within {} s after every actor stopped; "
                                   "exiting without it", limit.count());
    spdlog::shutdown();
    std::fflush(nullptr);
    std::_Exit(code);
  });
  sys.reset();  // the destruction stays on the thread that created the system
  cfg.reset();
  finished.set_value();
  watchdog.join();
  return code;
}

/// The node's life: publish, join, serve until the node actor stops.
int serve_node(caf::actor_system& sys, const cluster_config& c, const network_settings& net, int rank,
               std::function<void(const std::string&)> on_ready) {
  auto log = component_logger("node");
  auto exit_code = std::make_shared<std::atomic<int>>(0);
  local_node_actor node = spawn_node_actor(sys, {.config = c, .rank = rank, .on_ready = std::move(on_ready),
                                                 .exit_code = exit_code});
  caf::scoped_actor self{sys};
  const node_config& me = c.nodes[std::size_t(rank)];
  caf::expected<std::uint16_t> port = publish_node(sys, net, node, me.port, c.bind_of(rank));
  if (!port) {
    self->send_exit(node, caf::exit_reason::user_shutdown);
    const std::string cause = listen_failure_cause(c.bind_of(rank), me.port);
    DI_FAIL("node {}: cannot listen on {}:{} (nodes.{}.port / bind): {}{}", rank, c.bind_of(rank),
            me.port, rank, describe(port.error()), cause.empty() ? "" : " (" + cause + ")");
  }
  log->info("node {} listening on {}:{} (internal plane: never expose it)", rank, c.bind_of(rank), *port);
  if (rank > 0) {
    std::optional<node_actor> coordinator;
    try {
      coordinator = find_coordinator(sys, c, net);
    } catch (const di::error&) {
      self->send_exit(node, caf::exit_reason::user_shutdown);
      throw;
    }
    if (!coordinator) {
      // Asked to stop before there was a cluster to leave: launch stops its other nodes this
      // way when node 0 fails to start, and each printed "error: stopped by a signal while
      // waiting for the coordinator" (exit 1) under node 0's real error. Not an error; the
      // status still says the start did not happen (128 + the signal, as launch and serve).
      log->info("node {}: stopped by signal {} while waiting for the coordinator (node 0) at {}:{}",
                rank, g_first_signal.load(), c.nodes[0].host, c.nodes[0].port);
      self->send_exit(node, caf::exit_reason::user_shutdown);
      return 128 + g_first_signal.load();
    }
    self->send(node, coordinator_found{*coordinator});
  }
  self->monitor(node);
  bool asked = false, done = false;
  while (!done) {
    self->receive([&](caf::down_msg&) { done = true; },
                  caf::after(std::chrono::milliseconds(100)) >> [&] {
                    if (g_signals.load() > 0 && !asked) {
                      asked = true;
                      log->info("node {}: signal received, shutting down", rank);
                      self->send(node, shutdown_atom::value);
                    }
                  });
  }
  return exit_code->load();
}

}  // namespace

int run_node(const cluster_config& c, int rank, std::function<void(const std::string&)> on_ready) {
  DI_CHECK(rank >= 0 && rank < int(c.nodes.size()), "--rank {}: the cluster file has nodes 0..{}", rank,
           c.nodes.size() - 1);
  // The router's node opens the clients' port only once every group is ready, after the
  // executors have loaded the model (minutes on a large one): a port already taken failed the
  // cluster only then. It is tried here first, before anything starts or loads. (Whatever takes
  // the port in between still fails the publish later.) The cause stays in parentheses, as
  // in the publish's message: tests/integration/cluster_util.py finds a taken port by it.
  if (rank == c.router.node && c.router.port != 0) {
    const std::string cause = listen_failure_cause(c.router.host, c.router.port);
    DI_CHECK(cause.empty(),
             "node {}: cannot listen for clients on {}:{} (router.host / router.port): tried "
             "before anything started ({})",
             rank, c.router.host, c.router.port, cause);
  }
  install_signal_handlers();
  const network_settings net = network_settings_of(c);
  auto cfg = std::make_unique<process_config>(net);
  auto sys = std::make_unique<caf::actor_system>(*cfg);
  const int code = serve_node(*sys, c, net, rank, std::move(on_ready));
  return finish_process(std::move(sys), std::move(cfg), code, std::chrono::seconds(3));
}

router_actor connect_router(caf::actor_system& sys, const network_settings& s, const std::string& host,
                            std::uint16_t port) {
  auto attempt = [&] {
    return s.tls.enabled ? caf::openssl::remote_actor<router_actor>(sys, host, port)
                         : sys.middleman().remote_actor<router_actor>(host, port);
  };
  // CAF 0.17 gives up on a handshake at the first heartbeat tick that finds the connection
  // silent (~0.5-0.8 s), whatever the connection timeout: a router stopped for 1.5 s failed
  // `client --connection-timeout-ms 10000` after 0.8 s with "connection_timeout". Silence is
  // given the settings' connection timeout (0: CAF waits itself).
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(std::max(0, s.connection_timeout_ms));
  caf::expected<router_actor> r = attempt();
  while (!r && r.error() == caf::sec::connection_timeout &&
         std::chrono::steady_clock::now() < deadline)
    r = attempt();
  if (!r && r.error() == caf::sec::incompatible_application_ids)
    throw cluster_name_error(
        fmt::format("cannot connect to the router: {}",
                    cluster_name_mismatch("this process's cluster name", s.app_id, "the router",
                                          host, port, s.tls.enabled,
                                          "pass the cluster's name: cluster.name in the file, "
                                          "--cluster-name for client")),
        __FILE__, __LINE__);
  // A node's internal port answers with an actor of another interface: CAF's name for that
  // ("unexpected_actor_messaging_interface") was all the client said.
  if (!r && r.error() == caf::sec::unexpected_actor_messaging_interface)
    DI_FAIL(
        "cannot connect to the router at {}:{}: what listens there is not the router (a "
        "node's internal port? --connect takes router.host:router.port)",
        host, port);
  // Something else answers there, or nothing does: CAF's "malformed_basp_message" (an answer
  // that is not a handshake: `client --connect` to the HTTP port of `deepinfer serve` said only
  // that), "connection_timeout" (a program that stays silent) or "disconnect_during_handshake"
  // was all the client said.
  if (!r &&
      (r.error() == caf::sec::connection_timeout || r.error() == caf::sec::malformed_basp_message ||
       r.error() == caf::sec::disconnect_during_handshake))
    DI_FAIL(
        "cannot connect to the router at {}:{}: what listens there did not answer as a deepinfer "
        "router ({}): the HTTP port of `deepinfer serve`, another program{}, or a router whose "
        "process is stopped? --connect takes the HOST:PORT of launch's `ready:` line",
        host, port, describe(r.error()), s.tls.enabled ? "" : ", a cluster with TLS (--tls-*)");
  if (!r && r.error() == caf::sec::cannot_connect_to_node) {
    // CAF's "ip_connect failed" names no cause: refused (nothing listens), unreachable, a name
    // that does not resolve.
    const std::string cause = connect_failure_cause(host, port);
    if (!cause.empty())
      DI_FAIL("cannot connect to the router at {}:{}: {} (is the cluster running? --connect "
              "takes the HOST:PORT of launch's `ready:` line)",
              host, port, cause);
  }
  DI_CHECK(bool(r), "cannot connect to the router at {}:{}: {}", host, port, describe(r.error()));
  // The bound of the router's node, which may be lower than this process's: a request past it
  // is refused here (sent, it closed the connection and every request on it failed).
  caf::scoped_actor self{sys};
  self->request(*r, std::chrono::seconds(5), limits_atom::value)
      .receive([](std::int64_t bytes) { set_router_message_limit(bytes); },
               [](caf::error&) { set_router_message_limit(0); });  // this process's own bound
  return *r;
}

std::pair<std::string, std::uint16_t> split_address(const std::string& address, const std::string& what) {
  const std::size_t colon = address.rfind(':');
  DI_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < address.size(),
           "{} '{}': expected HOST:PORT", what, address);
  // Digits only (std::stoi took "7000x", " 7000" and "7000.9" as 7000).
  const std::string digits = address.substr(colon + 1);
  int port = 0;
  for (const char ch : digits) {
    if (ch < '0' || ch > '9' || port > 65535) {
      port = 0;
      break;
    }
    port = port * 10 + (ch - '0');
  }
  DI_CHECK(port > 0 && port < 65536, "{} '{}': the port must be a number in 1..65535", what,
           address);
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')  // [::1]:7000
    host = host.substr(1, host.size() - 2);
  return {host, std::uint16_t(port)};
}

}  // namespace di::actors
