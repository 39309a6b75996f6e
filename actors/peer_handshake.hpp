// What another cluster's node calls its cluster, for the error a node or client prints when CAF
// refuses the connection with `incompatible_application_ids` (cluster.name differs). CAF 0.17
// says only that the names differ; a CAF node sends its application ids in the BASP server
// handshake, the first thing it writes on a new connection, so they are read from there over a
// plain TCP connection (best effort: a TLS port, or anything unexpected, gives nothing).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace di::actors {

/// The application ids of a CAF 0.17.6 BASP server handshake (32-byte header, then the payload:
/// the node id, then the ids as a list of strings); nothing when `bytes` is not one (or is cut
/// short).
std::optional<std::vector<std::string>> server_handshake_app_ids(std::string_view bytes);

/// The application ids announced by the node listening at host:port, read within `timeout`.
std::optional<std::vector<std::string>> peer_app_ids(const std::string& host, std::uint16_t port,
                                                     std::chrono::milliseconds timeout);

/// "OWN 'X' does not match the cluster it connects to: WHAT at HOST:PORT has cluster.name 'Y'"
/// (or "... belongs to a cluster of another name" when Y cannot be read); `own` names the
/// setting, e.g. "this node's cluster.name".
std::string cluster_name_mismatch(const std::string& own, const std::string& own_name,
                                  const std::string& what, const std::string& host,
                                  std::uint16_t port, bool tls);

}  // namespace di::actors
