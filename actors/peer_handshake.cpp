// Reading a peer's application ids from its BASP server handshake (see peer_handshake.hpp).
#include "actors/peer_handshake.hpp"

#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace di::actors {

namespace {

constexpr std::size_t header_size = 32;      // caf::io::basp::header_size
constexpr std::size_t max_payload = 1 << 16;  // a handshake is a few hundred bytes
constexpr std::size_t max_ids = 16, max_id_bytes = 1024;

/// A reader over the payload; every read fails (and stays failed) past its end.
struct reader {
  std::string_view in;
  bool ok = true;

  std::string_view take(std::size_t n) {
    if (!ok || in.size() < n) {
      ok = false;
      return {};
    }
    std::string_view out = in.substr(0, n);
    in.remove_prefix(n);
    return out;
  }
  /// CAF's length prefix: 7 bits a byte, least significant first.
  std::uint64_t varbyte() {
    std::uint64_t x = 0;
    for (int shift = 0; shift < 64 && ok; shift += 7) {
      const std::string_view b = take(1);
      if (!ok) break;
      x |= std::uint64_t(std::uint8_t(b[0]) & 0x7f) << shift;
      if ((std::uint8_t(b[0]) & 0x80) == 0) return x;
    }
    ok = false;
    return 0;
  }
};

/// Connects to host:port within `timeout`; -1 on failure.
int connect_to(const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list) != 0) return -1;
  int fd = -1;
  for (addrinfo* a = list; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    timeval tv{.tv_sec = timeout.count() / 1000, .tv_usec = (timeout.count() % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(list);
  return fd;
}

constexpr std::string_view wire_tag = "@wire-";

}  // namespace

std::string_view wire_fingerprint() {
  return DEEPINFER_WIRE_FINGERPRINT;
}

std::string app_identifier(const std::string& cluster_name, std::string_view wire) {
  return cluster_name + std::string(wire_tag) + std::string(wire);
}

app_id_parts split_app_identifier(std::string_view id) {
  const std::size_t at = id.rfind(wire_tag);
  if (at == std::string_view::npos) return {std::string(id), ""};
  return {std::string(id.substr(0, at)), std::string(id.substr(at + wire_tag.size()))};
}

std::optional<std::vector<std::string>> server_handshake_app_ids(std::string_view bytes) {
  if (bytes.size() < header_size || bytes[0] != 0) return std::nullopt;  // 0: server_handshake
  std::uint32_t payload_len = 0;
  for (int i = 4; i < 8; ++i) payload_len = (payload_len << 8) | std::uint8_t(bytes[std::size_t(i)]);
  if (payload_len > max_payload || bytes.size() < header_size + payload_len) return std::nullopt;
  reader r{bytes.substr(header_size, payload_len)};
  // The node id: its implementation's atom (zero: no node id, nothing follows), then the
  // default implementation's process id (4 bytes) and host id (20 bytes).
  const std::string_view impl = r.take(8);
  if (!r.ok || impl.find_first_not_of('\0') == std::string_view::npos) return std::nullopt;
  r.take(4 + 20);
  const std::uint64_t n = r.varbyte();
  if (!r.ok || n == 0 || n > max_ids) return std::nullopt;
  std::vector<std::string> ids;
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint64_t len = r.varbyte();
    if (!r.ok || len > max_id_bytes) return std::nullopt;
    const std::string_view id = r.take(std::size_t(len));
    if (!r.ok) return std::nullopt;
    for (const char ch : id)
      if (std::uint8_t(ch) < 0x20 || ch == 0x7f) return std::nullopt;  // not a name
    ids.emplace_back(id);
  }
  return ids;
}

std::optional<std::vector<std::string>> peer_app_ids(const std::string& host, std::uint16_t port,
                                                     std::chrono::milliseconds timeout) {
  const int fd = connect_to(host, port, timeout);
  if (fd < 0) return std::nullopt;
  std::string bytes;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::optional<std::vector<std::string>> ids;
  while (!ids && bytes.size() < header_size + max_payload) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    if (left.count() <= 0 || poll(&p, 1, int(left.count())) <= 0) break;
    char buf[4096];
    const ssize_t got = recv(fd, buf, sizeof(buf), 0);
    if (got <= 0) break;
    bytes.append(buf, std::size_t(got));
    ids = server_handshake_app_ids(bytes);
  }
  close(fd);
  return ids;
}

std::string cluster_name_mismatch(const std::string& own, const std::string& own_name,
                                  const std::string& what, const std::string& host,
                                  std::uint16_t port, bool tls, const std::string& name_advice) {
  std::optional<std::vector<std::string>> theirs;
  if (!tls) theirs = peer_app_ids(host, port, std::chrono::milliseconds(1000));
  std::string names;
  for (const std::string& id : theirs.value_or(std::vector<std::string>{})) {
    const app_id_parts p = split_app_identifier(id);
    if (p.name == own_name)  // the name agrees: the builds differ
      return fmt::format(
          "{} at {}:{} runs another build of deepinfer (wire fingerprint {}, this process's {}): "
          "the nodes and clients of a cluster must come from the same sources, or they would "
          "misread each other's messages",
          what, host, port, p.wire.empty() ? "none, from an older build" : p.wire,
          wire_fingerprint());
    names += fmt::format("{}'{}'", names.empty() ? "" : " or ", p.name);
  }
  std::string text = fmt::format(
      "{} '{}' does not match the cluster it connects to: {} at {}:{} {}", own, own_name, what,
      host, port,
      names.empty() ? "belongs to a cluster of another name" : "has cluster.name " + names);
  if (!name_advice.empty()) text += "; " + name_advice;
  return text;
}

}  // namespace di::actors
