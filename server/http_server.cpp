// http_server (see http_server.hpp).
#include "server/http_server.hpp"

#include "actors/grammar_limit.hpp"
#include "actors/logging.hpp"
#include "common/error.hpp"
#include "server/detail/http_session.hpp"
#include "server/grammar_jobs.hpp"

#include <fmt/format.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>

#include <sys/resource.h>

#include <chrono>
#include <thread>
#include <vector>

namespace di::server {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

struct http_server::impl {
  server_context& ctx;
  asio::io_context ioc;
  // The I/O threads run until stop(), not until they run out of work: once the acceptor
  // closed (a drain), a session waiting for its grammar's compile or for the engine has no
  // operation pending, and the 503 posted to it after the compiles were ended never ran (its
  // client saw the connection close without an answer, about one stop in two).
  asio::executor_work_guard<asio::io_context::executor_type> keep_running{ioc.get_executor()};
  tcp::acceptor acceptor;
  std::vector<std::thread> threads;
  int num_grammar_threads;
  grammar_jobs grammars;  // its compiles run on grammar_pool, which goes first (joined)
  asio::thread_pool grammar_pool;
  bool is_stopped = false;
  asio::steady_timer accept_pause{ioc};  ///< after a failed accept (pause_accepting)
  static constexpr std::chrono::milliseconds accept_retry{50};
  std::int64_t num_accept_failures = 0;  ///< in a row

  explicit impl(server_context& c)
      : ctx(c),
        ioc(c.settings.io_threads),
        acceptor(ioc),
        num_grammar_threads(
            server::num_grammar_threads(c.settings, std::thread::hardware_concurrency())),
        grammars(
            grammar_pool, num_grammar_threads,
            [&c](const std::string& spec) { compile_request_grammar(c, spec); },
            actors::grammar_prepare_limit()),
        grammar_pool(std::size_t(num_grammar_threads)) {
    ctx.grammars = &grammars;
  }

  void bind() {
    boost::system::error_code ec;
    const auto address = asio::ip::make_address(ctx.settings.host, ec);
    DI_CHECK(!ec, "server.host '{}' is not an IP address: {}", ctx.settings.host, ec.message());
    const tcp::endpoint ep(address, ctx.settings.port);
    acceptor.open(ep.protocol(), ec);
    if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor.bind(ep, ec);
    DI_CHECK(!ec, "cannot listen on {}:{}: {}", ctx.settings.host, ctx.settings.port, ec.message());
  }

  void listen() {
    boost::system::error_code ec;
    acceptor.listen(asio::socket_base::max_listen_connections, ec);
    DI_CHECK(!ec, "cannot listen on {}:{}: {}", ctx.settings.host, port(), ec.message());
  }

  std::uint16_t port() const { return acceptor.local_endpoint().port(); }

  void accept() {
    acceptor.async_accept(asio::make_strand(ioc),
                          [this](boost::system::error_code ec, tcp::socket socket) {
                            if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
                            if (ec) return pause_accepting(ec);
                            num_accept_failures = 0;
                            admit(std::move(socket));
                            accept();
                          });
  }

  /// An accept that failed -- the process out of file descriptors (EMFILE), the system out of
  /// them or of memory -- is tried again after a pause. It was tried again at once, failed
  /// again at once while the connection waited in the backlog, and the I/O thread spun (0.7
  /// CPU s/s on a 2-core box) until a descriptor came free. (One accept is pending at a time,
  /// so the timer is touched by one handler at a time.)
  void pause_accepting(boost::system::error_code ec) {
    if (num_accept_failures++ == 0)
      actors::component_logger("serve")->warn(
          "accepting a connection failed: {}; trying again every {} ms (server.max_connections "
          "is {}; the open-file limit may be lower)",
          ec.message(), accept_retry.count(), ctx.settings.max_connections);
    accept_pause.expires_after(accept_retry);
    accept_pause.async_wait([this](boost::system::error_code wait_ec) {
      if (wait_ec || !acceptor.is_open()) return;
      accept();
    });
  }

  void admit(tcp::socket socket) {
    boost::system::error_code ec;
    socket.set_option(tcp::no_delay(true), ec);
    if (ctx.num_connections.load() >= ctx.settings.max_connections)
      return refuse(std::move(socket));
    std::make_shared<detail::http_session>(std::move(socket), ctx)->start();
  }

  /// Over the connection limit: a 503 and close, without reading the request.
  void refuse(tcp::socket socket) {
    ctx.metrics.on_http_response(503);
    const std::string body =
        R"j({"error":{"message":"too many open connections (server.max_connections)","type":)j"
        R"j("service_unavailable_error","param":null,"code":"too_many_connections"}})j";
    auto msg = std::make_shared<std::string>(
        fmt::format("HTTP/1.1 503 Service Unavailable\r\nContent-Type: "
                    "application/json\r\nContent-Length: {}\r\n"
                    "Retry-After: {}\r\nConnection: close\r\n\r\n{}",
                    body.size(), ctx.settings.retry_after_s, body));
    auto sock = std::make_shared<tcp::socket>(std::move(socket));
    asio::async_write(*sock, asio::buffer(*msg),
                      [sock, msg](boost::system::error_code, std::size_t) {
                        boost::system::error_code ec;
                        sock->shutdown(tcp::socket::shutdown_both, ec);
                        sock->close(ec);
                      });
  }
};

void run_io_context(asio::io_context& ioc) {
  for (;;) {
    try {
      ioc.run();
      return;  // stopped
    } catch (const std::exception& e) {
      actors::component_logger("serve")->error(
          "an HTTP handler threw: {}; its connection may be left unanswered, the server serves on",
          e.what());
    } catch (...) {
      actors::component_logger("serve")->error(
          "an HTTP handler threw a non-standard exception; the server serves on");
    }
    // (run() may be called again after a handler's exception without restart())
  }
}

void raise_open_file_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

http_server::http_server(server_context& ctx) : impl_(std::make_unique<impl>(ctx)) {
  impl_->bind();
}

http_server::~http_server() {
  stop();
}

std::uint16_t http_server::port() const {
  return impl_->port();
}

void http_server::start() {
  impl_->listen();
  impl_->accept();
  for (int i = 0; i < impl_->ctx.settings.io_threads; ++i)
    impl_->threads.emplace_back([this] { run_io_context(impl_->ioc); });
}

void http_server::stop_accepting() {
  asio::post(impl_->ioc, [this] {
    boost::system::error_code ec;
    impl_->acceptor.close(ec);
  });
}

void http_server::stop() {
  if (impl_->is_stopped) return;
  impl_->is_stopped = true;
  stop_accepting();
  impl_->keep_running.reset();
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads) t.join();
  impl_->ctx.grammars = nullptr;
  impl_->grammars.stop();  // a compile in progress stops at its next check
  impl_->grammar_pool.stop();
  impl_->grammar_pool.join();
}

}  // namespace di::server
