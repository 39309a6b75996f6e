// The BASP frame-length guard (actors/basp_frame_guard.hpp): this binary's
// caf::io::basp::valid is the guarded one, it still refuses what CAF refuses, and it refuses a
// header CAF accepts when its payload length is over the bound -- session 35's 32-byte header
// among them. Clients refuse a request too large for one message before sending it.
#include "actors/basp_frame_guard.hpp"

#include <dlfcn.h>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <caf/io/basp/header.hpp>

#include <cstdint>
#include <string>

namespace di::test {

namespace {

using caf::io::basp::header;
using caf::io::basp::message_type;

/// libcaf_io's own check, for comparison.
bool caf_valid(const header& h) {
  using fn = bool (*)(const header&);
  static const fn f =
      reinterpret_cast<fn>(dlsym(RTLD_NEXT, "_ZN3caf2io4basp5validERKNS1_6headerE"));
  REQUIRE(static_cast<bool>(f));
  return f(h);
}

/// Session 35's header (00c4e90a 92533f54 aa47df7fd9a8be16 97721a5a8202f3e9 58af797659fce489),
/// decoded field by field as CAF's deserializer reads it (big-endian integers).
header session35_header() {
  header h;
  h.operation = message_type::server_handshake;
  h.padding1 = 0xc4;
  h.padding2 = 0xe9;
  h.flags = 0x0a;
  h.payload_len = 0x92533f54u;
  h.operation_data = 0xaa47df7fd9a8be16ull;
  h.source_actor = 0x97721a5a8202f3e9ull;
  h.dest_actor = 0x58af797659fce489ull;
  return h;
}

}  // namespace

TEST_CASE("the guard is the definition CAF calls") {
  CHECK(actors::basp_frame_guard_active());
}

TEST_CASE("a header CAF accepts is refused when its payload is over the bound") {
  const std::uint64_t refused_before = actors::basp_frames_refused();
  header h = session35_header();
  CHECK(caf_valid(h));                   // CAF 0.17 accepts it: the defect
  CHECK_FALSE(caf::io::basp::valid(h));  // the guard does not
  CHECK(actors::basp_frames_refused() == refused_before + 1);
  h.payload_len = 4096;  // the same header with a small payload passes both
  CHECK(caf_valid(h));
  CHECK(caf::io::basp::valid(h));
  h.payload_len = actors::basp_handshake_limit;  // handshakes: up to 1 MiB
  CHECK(caf::io::basp::valid(h));
  h.payload_len = actors::basp_handshake_limit + 1;
  CHECK_FALSE(caf::io::basp::valid(h));
  CHECK(actors::basp_frames_refused() == refused_before + 2);
}

TEST_CASE("what CAF refuses stays refused") {
  header h = session35_header();
  h.payload_len = 16;
  h.operation_data = 0;  // a server handshake needs non-zero operation data
  CHECK_FALSE(caf_valid(h));
  CHECK_FALSE(caf::io::basp::valid(h));
  h = session35_header();
  h.payload_len = 16;
  h.operation = message_type(0x07);  // no such operation
  CHECK_FALSE(caf_valid(h));
  CHECK_FALSE(caf::io::basp::valid(h));
}

TEST_CASE("messages other than handshakes are bounded by cluster.max_message_bytes") {
  const std::int64_t saved = actors::basp_message_limit();
  const auto direct = std::uint8_t(message_type::direct_message);
  actors::set_basp_message_limit(std::int64_t(8) << 20);
  CHECK(actors::basp_payload_allowed(direct, 8u << 20));
  CHECK_FALSE(actors::basp_payload_allowed(direct, (8u << 20) + 1));
  CHECK_FALSE(
      actors::basp_payload_allowed(std::uint8_t(message_type::client_handshake), (1u << 20) + 1));
  CHECK(actors::basp_payload_allowed(std::uint8_t(message_type::heartbeat), 0));
  actors::set_basp_message_limit(1);  // never below the handshake bound
  CHECK(actors::basp_message_limit() == actors::basp_handshake_limit);
  actors::set_basp_message_limit(saved);
}

TEST_CASE("a client refuses a request too large for one message") {
  const std::int64_t saved = actors::basp_message_limit();
  actors::set_basp_message_limit(std::int64_t(2) << 20);
  actors::submit_request req;
  req.prompt = std::string(1 << 20, 'x');
  CHECK(actors::submit_size_error(req).empty());
  req.prompt_ids.assign(300000, 5);  // + 1.2 MB of ids
  const std::string why = actors::submit_size_error(req);
  // the serialized size: the prompt, 4 bytes an id, and a little more
  const std::int64_t bytes = actors::submit_message_bytes(req);
  CHECK(bytes > (1 << 20) + 4 * 300000);
  CHECK(bytes < (1 << 20) + 4 * 300000 + 2 * actors::basp_envelope_bytes);
  CHECK(why == fmt::format("request of {} bytes exceeds cluster.max_message_bytes = 2097152 (the "
                           "largest message the router's node accepts; sent, it would close the "
                           "connection)",
                           bytes));
  req.prompt_ids.clear();
  req.params.stop.assign(2, std::string(600000, 's'));
  CHECK_FALSE(actors::submit_size_error(req).empty());
  // the bound the router announced (connect_router) wins over this process's own
  req.params.stop.clear();
  actors::set_router_message_limit(std::int64_t(1) << 20);
  CHECK(actors::submit_size_error(req).find("cluster.max_message_bytes = 1048576") !=
        std::string::npos);
  actors::set_router_message_limit(std::int64_t(8) << 20);
  req.prompt_ids.assign(1000000, 5);  // 1 + 4 MB: past this process's 2 MiB, within the router's
  CHECK(actors::submit_size_error(req).empty());
  actors::set_router_message_limit(0);
  CHECK_FALSE(actors::submit_size_error(req).empty());
  actors::set_basp_message_limit(saved);
}

TEST_CASE("the router's bound on events is an upper bound of their size") {
  std::vector<runtime::token_event> events(3);
  events[0].token_ids = {1, 2, 3};
  events[0].text = "abc";
  events[1].prompt_logprobs.emplace_back();
  for (int i = 0; i < 500; ++i)
    events[1].prompt_logprobs.push_back(runtime::position_logprobs{
        .id = i, .logprob = -1.5f, .rank = 3, .top = std::vector<runtime::token_logprob>(20)});
  events[2].error = std::string(1000, 'e');
  events[2].logprobs.push_back({.id = 7, .top = std::vector<runtime::token_logprob>(5)});
  const std::int64_t exact = actors::events_message_bytes(events);
  CHECK(exact > 500 * 20 * 8);
  CHECK(actors::events_bytes_bound(events) >= exact);
  CHECK(actors::events_bytes_bound(events) < 2 * exact);
}

}  // namespace di::test
