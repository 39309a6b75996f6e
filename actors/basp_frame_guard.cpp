// The bounded caf::io::basp::valid (see basp_frame_guard.hpp for the CAF 0.17 defect it works
// around).
#include "actors/basp_frame_guard.hpp"

#include "actors/logging.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <caf/binary_serializer.hpp>
#include <caf/io/basp/header.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace di::actors {

namespace {

using valid_fn = bool (*)(const caf::io::basp::header&);

/// libcaf_io's definition, looked up once (the next object after this executable).
valid_fn caf_valid() {
  static const valid_fn fn = [] {
    auto f = reinterpret_cast<valid_fn>(dlsym(RTLD_NEXT, "_ZN3caf2io4basp5validERKNS1_6headerE"));
    if (!f) {  // no libcaf_io behind us: nothing sane to call
      std::fprintf(stderr, "fatal: caf::io::basp::valid not found in libcaf_io (%s)\n", dlerror());
      std::abort();
    }
    return f;
  }();
  return fn;
}

std::atomic<std::int64_t> g_message_limit{default_max_message_bytes};
std::atomic<std::int64_t> g_router_limit{0};

/// CAF's binary encoding of `value` (what travels in a message), in bytes.
template <class T>
std::int64_t serialized_bytes(T& value) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  if (auto err = sink(value)) return std::numeric_limits<std::int64_t>::max();
  return std::int64_t(buf.size());
}
std::atomic<std::uint64_t> g_refused{0};
std::atomic<std::int64_t> g_last_log_ns{0};

/// The bound of a header's payload: handshakes basp_handshake_limit, others the message limit.
std::int64_t payload_limit(bool handshake) {
  return handshake ? std::int64_t(basp_handshake_limit) : basp_message_limit();
}

/// Logs a refusal, at most once a second (a peer sending such headers in a loop must not
/// flood the log).
void log_refusal(const caf::io::basp::header& hdr, std::uint64_t count) {
  const std::int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
  std::int64_t last = g_last_log_ns.load(std::memory_order_relaxed);
  if (now - last < 1'000'000'000 || !g_last_log_ns.compare_exchange_strong(last, now)) return;
  const bool handshake = caf::io::basp::is_handshake(hdr);
  component_logger("node")->warn(
      "closed a connection whose BASP header announced a {} of {} bytes (limit {}{}); {} such "
      "header(s) so far",
      to_string(hdr.operation), hdr.payload_len, payload_limit(handshake),
      handshake ? " for handshakes" : ": cluster.max_message_bytes", count);
}

}  // namespace

void set_basp_message_limit(std::int64_t bytes) {
  g_message_limit.store(bytes < basp_handshake_limit ? basp_handshake_limit : bytes,
                        std::memory_order_relaxed);
}

std::int64_t basp_message_limit() {
  return g_message_limit.load(std::memory_order_relaxed);
}

bool basp_payload_allowed(std::uint8_t operation, std::uint32_t payload_len) {
  const bool handshake = operation == std::uint8_t(caf::io::basp::message_type::server_handshake) ||
                         operation == std::uint8_t(caf::io::basp::message_type::client_handshake);
  return std::int64_t(payload_len) <= payload_limit(handshake);
}

void set_router_message_limit(std::int64_t bytes) {
  g_router_limit.store(bytes, std::memory_order_relaxed);
}

std::int64_t router_message_limit() {
  const std::int64_t announced = g_router_limit.load(std::memory_order_relaxed);
  return announced > 0 ? announced : basp_message_limit();
}

std::int64_t submit_message_bytes(const submit_request& req) {
  submit_request copy = req;  // CAF 0.17's serializer takes its operands as non-const
  return serialized_bytes(copy) + basp_envelope_bytes;
}

std::string submit_size_error(const submit_request& req) {
  const std::int64_t limit = router_message_limit();
  // An upper estimate first: the variable parts plus room for the fixed ones (no copy).
  std::int64_t bytes = 4096 + std::int64_t(req.prompt ? req.prompt->size() : 0) +
                       4 * std::int64_t(req.prompt_ids.size()) +
                       std::int64_t(req.params.response_format.size()) +
                       4 * std::int64_t(req.params.stop_token_ids.size());
  for (const std::string& s : req.params.stop) bytes += 8 + std::int64_t(s.size());
  if (bytes <= limit) return {};
  bytes = submit_message_bytes(req);
  if (bytes <= limit) return {};
  return fmt::format(
      "request of {} bytes exceeds cluster.max_message_bytes = {} (the largest message the "
      "router's node accepts; sent, it would close the connection)",
      bytes, limit);
}

std::int64_t events_bytes_bound(const std::vector<runtime::token_event>& events) {
  // CAF 0.17's binary encoding: fixed-width integers and floats, sizes as varbytes (<= 10).
  auto logprob_bytes = [](const runtime::position_logprobs& p) {
    return std::int64_t(32 + 8 * p.top.size());
  };
  std::int64_t bytes = basp_envelope_bytes + 10;
  for (const runtime::token_event& e : events) {
    bytes += 128 + 4 * std::int64_t(e.token_ids.size()) + std::int64_t(e.text.size()) +
             std::int64_t(e.stop_string.size() + e.error.size() + e.failure_param.size());
    for (const runtime::position_logprobs& p : e.logprobs) bytes += logprob_bytes(p);
    for (const std::optional<runtime::position_logprobs>& p : e.prompt_logprobs)
      bytes += 4 + (p ? logprob_bytes(*p) : 0);
  }
  return bytes;
}

std::int64_t events_message_bytes(const std::vector<runtime::token_event>& events) {
  client_events msg{events};
  return serialized_bytes(msg) + basp_envelope_bytes;
}

std::uint64_t basp_frames_refused() {
  return g_refused.load(std::memory_order_relaxed);
}

bool basp_frame_guard_active() {
  return dlsym(RTLD_DEFAULT, "_ZN3caf2io4basp5validERKNS1_6headerE") ==
         reinterpret_cast<void*>(
             static_cast<bool (*)(const caf::io::basp::header&)>(&caf::io::basp::valid));
}

}  // namespace di::actors

namespace caf::io::basp {

__attribute__((visibility("default"))) bool valid(const header& hdr) {
  if (!di::actors::caf_valid()(hdr)) return false;
  if (di::actors::basp_payload_allowed(std::uint8_t(hdr.operation), hdr.payload_len)) return true;
  di::actors::log_refusal(hdr, di::actors::g_refused.fetch_add(1, std::memory_order_relaxed) + 1);
  return false;
}

}  // namespace caf::io::basp
