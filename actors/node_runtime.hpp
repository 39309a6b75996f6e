// The process side of the actor runtime: the CAF configuration every process of a cluster
// uses (message types, middleman, heartbeats, application id, optional TLS), running one node
// until it stops (`deepinfer node`), and connecting a client to a router (`deepinfer client`).
#pragma once

#include "actors/messages.hpp"
#include "common/error.hpp"
#include "config/cluster_config.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <functional>
#include <string>

namespace di::actors {

/// The CAF-level settings of a process (nodes take them from the cluster file).
struct network_settings {
  std::string app_id = "deepinfer";  ///< cluster.name
  int heartbeat_interval_ms = 500;
  int connection_timeout_ms = 5000;
  std::string policy = "sharing";
  int threads = 0;
  std::int64_t max_message_bytes = default_max_message_bytes;  ///< cluster.max_message_bytes
  tls_section tls;
};

network_settings network_settings_of(const cluster_config& config);

/// A CAF configuration with every message type registered and the middleman (and, with TLS,
/// the OpenSSL manager) loaded. Throws di::error when TLS is on without a certificate.
class process_config : public caf::actor_system_config {
 public:
  explicit process_config(const network_settings& settings);
};

/// Runs node `rank` of `config` until it stops; `on_ready` gets the client address (rank 0).
/// Returns the process exit code. SIGINT/SIGTERM shut the node (the coordinator: the cluster)
/// down in order.
int run_node(const cluster_config& config, int rank, std::function<void(const std::string&)> on_ready);

/// Thrown by connect_router when the router belongs to a cluster of another name (retrying
/// cannot help).
class cluster_name_error : public di::error {
 public:
  using di::error::error;
};

/// Connects to the router published at host:port (TLS when settings.tls.enabled).
/// Throws di::error with CAF's reason (cluster_name_error for another cluster.name).
router_actor connect_router(caf::actor_system& sys, const network_settings& settings,
                            const std::string& host, std::uint16_t port);

/// Why listening on `address`:`port` fails, e.g. "Address already in use"; "" when it works
/// now (CAF 0.17 reports only "tcp socket creation failed").
std::string listen_failure_cause(const std::string& address, std::uint16_t port);

/// Why a TCP connection to `host`:`port` fails now ("Connection refused", a resolver error);
/// "" when one opens. (CAF 0.17's failed remote_actor says only "ip_connect failed".)
std::string connect_failure_cause(const std::string& host, std::uint16_t port);

/// "host:port" → (host, port); throws di::error naming `what` when malformed.
std::pair<std::string, std::uint16_t> split_address(const std::string& address, const std::string& what);

}  // namespace di::actors
