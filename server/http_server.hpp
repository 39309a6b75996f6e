// The HTTP server: one acceptor and `server.io_threads` Asio threads serving every connection
// asynchronously (no thread per connection). Connections beyond server.max_connections are
// answered 503 and closed.
#pragma once

#include "server/server_context.hpp"

#include <cstdint>
#include <memory>

namespace boost::asio {
class io_context;
}

namespace di::server {

/// Runs `ioc` until it is stopped, as each I/O thread does: an exception that escapes a handler
/// is logged and the loop runs on (it reached std::thread and std::terminate ended the server,
/// every client's request lost, for one bad handler).
void run_io_context(boost::asio::io_context& ioc);

/// Raises this process's soft open-file limit to its hard limit (thousands of connections).
void raise_open_file_limit();

class http_server {
 public:
  /// Binds server.host:server.port (throws di::error if it cannot: a taken port, a host that
  /// is no address of this machine) without listening yet -- so that serve can fail at once,
  /// before the model loads, and clients are refused rather than queued until start().
  explicit http_server(server_context& ctx);
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  /// The bound port (the chosen one when server.port = 0).
  std::uint16_t port() const;
  /// Listens and starts accepting on the I/O threads.
  void start();
  /// Closes the listening socket: new connections are refused; open ones are served on.
  void stop_accepting();
  /// Stops accepting, closes every connection and joins the threads.
  void stop();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace di::server
