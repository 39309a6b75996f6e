// A bound on the payload length a BASP header may announce, against a defect of CAF 0.17's
// network layer (libcaf_io): one 32-byte header from anyone who can connect took a cluster down.
//
// Cause. CAF reads a BASP header (32 bytes: operation, flags, payload length, ...), checks its
// fields with caf::io::basp::valid(), and then asks the stream for exactly `payload_len`
// bytes; the stream resizes its receive buffer to that length at once, on the middleman's one
// I/O thread. valid() does not look at the length, so a header such as a `server_handshake`
// with non-zero operation data and a length of 0x92533f54 made the router node allocate and
// zero 2.4 GB before a single payload byte arrived. The I/O thread stalled for seconds, the
// other nodes' connection timeouts fired, and the executor node stopped (session 35's finding;
// tests/integration/test_cluster.py sends that header).
//
// Fix. This binary defines caf::io::basp::valid itself: it calls libcaf_io's definition (found
// with dlsym(RTLD_NEXT)) and also refuses a header whose payload is longer than the bound of
// its operation: a handshake at most `handshake_limit`, every other message at most
// `message_limit` (cluster.max_message_bytes, default 16 MiB). CAF's own call to valid() goes through the
// PLT, so the dynamic loader binds it to this definition (symbol interposition, as in
// tls_error_queue.hpp); a refused header closes that one connection the way any malformed
// header does, and the refusal is logged. Nodes check at start that the guard is in effect.
#pragma once

#include "actors/messages.hpp"
#include "config/cluster_config.hpp"

#include <cstdint>
#include <string>

namespace di::actors {

/// The largest payload a BASP handshake may announce (application ids, the published actor
/// and its interface: a few KB in practice).
inline constexpr std::uint32_t basp_handshake_limit = 1u << 20;

/// Sets the bound for messages other than handshakes (bytes, >= basp_handshake_limit);
/// process-wide, before the middleman accepts connections.
void set_basp_message_limit(std::int64_t bytes);
std::int64_t basp_message_limit();

/// Whether `operation` (a BASP message type byte) announcing `payload_len` bytes is within
/// the bounds (the check the guard adds to CAF's).
bool basp_payload_allowed(std::uint8_t operation, std::uint32_t payload_len);

/// The bound of messages this process sends to its router: the router node's
/// cluster.max_message_bytes as the router announced it (connect_router asks it); until then,
/// or after 0, this process's own bound. Process-wide, like the guard.
void set_router_message_limit(std::int64_t bytes);
std::int64_t router_message_limit();

/// Room for CAF's envelope of a message in a BASP payload (forwarding stack, type names, ids):
/// tens of bytes measured; counted on top of the serialized content.
inline constexpr std::int64_t basp_envelope_bytes = 1024;

/// The BASP payload size of `req` sent as a message: its serialized size plus the envelope.
std::int64_t submit_message_bytes(const submit_request& req);

/// Empty when `req` fits in one message to the router (router_message_limit()); otherwise the
/// error a front end reports for that request instead of sending it ("request of N bytes
/// exceeds cluster.max_message_bytes = M"): the router's node would close the connection, and
/// every other request on it would fail with "lost the router".
std::string submit_size_error(const submit_request& req);

/// An upper bound of the BASP payload size of `events` sent as one client_events message,
/// cheap to compute (the router's answer side measures exactly only above its bound).
std::int64_t events_bytes_bound(const std::vector<runtime::token_event>& events);

/// The BASP payload size of `events` sent as one client_events message.
std::int64_t events_message_bytes(const std::vector<runtime::token_event>& events);

/// Headers refused by the bound since the process started.
std::uint64_t basp_frames_refused();

/// Whether CAF's calls to caf::io::basp::valid resolve to the guarded definition (false if the
/// linker did not export it, e.g. in a static build).
bool basp_frame_guard_active();

}  // namespace di::actors
