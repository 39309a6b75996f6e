// The application id a process of a cluster announces -- its cluster.name and its build's wire
// fingerprint -- and, for the error a node or client prints when CAF refuses a connection with
// `incompatible_application_ids`, what the other side announced. CAF 0.17 says only that the
// ids differ; a CAF node sends its application ids in the BASP server handshake, the first
// thing it writes on a new connection, so they are read from there over a plain TCP connection
// (best effort: a TLS port, or anything unexpected, gives nothing).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace di::actors {

/// This build's wire fingerprint: a hash of the headers that define what the processes of a
/// cluster send each other (actors/CMakeLists.txt). CAF 0.17 checks message type names only,
/// so processes of builds whose layouts differ would misread each other without an error.
std::string_view wire_fingerprint();

/// The CAF application id of a process of cluster `cluster_name`: "NAME@wire-FINGERPRINT", so
/// that CAF refuses a connection between clusters of other names and between other builds.
std::string app_identifier(const std::string& cluster_name,
                           std::string_view wire = wire_fingerprint());

/// An announced application id split into cluster name and wire fingerprint (the last
/// "@wire-"); the fingerprint is empty for an id without one (a build from before them).
struct app_id_parts {
  std::string name;
  std::string wire;
};
app_id_parts split_app_identifier(std::string_view id);

/// The application ids of a CAF 0.17.6 BASP server handshake (32-byte header, then the payload:
/// the node id, then the ids as a list of strings); nothing when `bytes` is not one (or is cut
/// short).
std::optional<std::vector<std::string>> server_handshake_app_ids(std::string_view bytes);

/// The application ids announced by the node listening at host:port, read within `timeout`.
std::optional<std::vector<std::string>> peer_app_ids(const std::string& host, std::uint16_t port,
                                                     std::chrono::milliseconds timeout);

/// Why CAF refused the connection to WHAT at HOST:PORT (incompatible_application_ids), as read
/// from its handshake. Another build (the same cluster name, another wire fingerprint): "WHAT
/// at HOST:PORT runs another build of deepinfer (...)". Else "OWN 'X' does not match the
/// cluster it connects to: WHAT at HOST:PORT has cluster.name 'Y'" (or "... belongs to a
/// cluster of another name" when Y cannot be read), then "; " and `name_advice` when given;
/// `own` names the setting, e.g. "this node's cluster.name".
std::string cluster_name_mismatch(const std::string& own, const std::string& own_name,
                                  const std::string& what, const std::string& host,
                                  std::uint16_t port, bool tls,
                                  const std::string& name_advice = "");

}  // namespace di::actors
