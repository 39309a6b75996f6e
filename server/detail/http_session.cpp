// http_session (see http_session.hpp). Responses are serialized by hand (status line, headers,
// body or chunks) into one write queue, so a complete answer and an SSE stream share one path.
#include "server/detail/http_session.hpp"

#include "server/api_routes.hpp"

#include <fmt/format.h>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/read.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

namespace di::server::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

std::string status_line(int status) {
  return fmt::format("HTTP/1.1 {} {}\r\n", status,
                     std::string(http::obsolete_reason(http::status(status))));
}

}  // namespace

http_session::http_session(asio::ip::tcp::socket&& socket, server_context& ctx)
    : stream_(std::move(socket)), ctx_(ctx) {
  ++ctx_.num_connections;
}

http_session::~http_session() {
  count_responding(false);
  --ctx_.num_connections;
}

void http_session::set_responding(bool on) {
  is_responding_ = on;
  count_responding(on);
}

void http_session::count_responding(bool on) {
  if (on == is_counted_) return;
  is_counted_ = on;
  if (on)
    ++ctx_.num_responding;
  else
    --ctx_.num_responding;
}

void http_session::start() {
  asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read(); });
}

double http_session::request_age() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - request_start_).count();
}

void http_session::do_read() {
  if (!is_open_) return;
  parser_.emplace();
  parser_->header_limit(std::uint32_t(ctx_.settings.max_header_bytes));
  parser_->body_limit(std::uint64_t(ctx_.settings.max_body_bytes));
  request_ = {};
  stream_.expires_after(std::chrono::seconds(ctx_.settings.header_timeout_s));
  http::async_read_header(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
}

namespace {
/// A request whose body arrives in a coding we do not decode: 501 for a transfer coding other
/// than chunked (RFC 9112 6.1), 415 for a content coding (RFC 9110 15.5.16). Both were ignored
/// and the coded bytes parsed as JSON.
void refuse_codings(const http_request& r) {
  const auto te = r[http::field::transfer_encoding];
  if (!te.empty() && !beast::iequals(te, "chunked"))
    throw api_error(501,
                    fmt::format("Transfer-Encoding '{}' is not supported (only chunked)",
                                std::string(te.substr(0, 100))),
                    "", "not_implemented");
  const auto ce = r[http::field::content_encoding];
  if (!ce.empty() && !beast::iequals(ce, "identity"))
    throw api_error(415,
                    fmt::format("Content-Encoding '{}' is not supported (send the body "
                                "uncompressed)",
                                std::string(ce.substr(0, 100))),
                    "", "unsupported_media_type");
}
}  // namespace

void http_session::on_header(beast::error_code ec) {
  if (ec) return on_read_error(ec);
  auto read_body = [self = shared_from_this()] { self->read_body(); };
  const auto& h = parser_->get();
  // An HTTP/1.0 client's expectation is ignored (RFC 9110 10.1.1): it cannot read a 1xx
  // response (15.2), and took the 100 for its answer.
  const bool expects_100 =
      h.version() >= 11 && beast::iequals(h[http::field::expect], "100-continue");
  if (parser_->is_done() || (!expects_100 && !ctx_.is_draining)) return read_body();
  // The answer its head alone decides -- no route, a wrong API key, a method the route does not
  // take, a coding we do not decode, a generation while the server shuts down -- goes out
  // instead of the 100 Continue (RFC 9110 10.1.1 lets a server answer with a final status), and
  // while draining before the body is read at all: the client uploaded its body, up to
  // server.max_body_bytes, only to be refused. The connection closes after it (a client that
  // sends the body anyway is drained by linger_close).
  request_ = http_request(h.base());
  std::optional<api_error> refused;
  try {
    refuse_codings(request_);
    refused = header_error(request_, ctx_);
  } catch (const api_error& e) {
    refused = e;
  }
  if (refused) {
    stream_.expires_never();
    begin_request();
    close_after_ = true;
    return respond_api_error(shared_from_this(), *refused);
  }
  if (!expects_100) return read_body();
  // curl and others wait for this before sending a large body.
  writing_ = "HTTP/1.1 100 Continue\r\n\r\n";
  is_writing_ = true;
  asio::async_write(stream_.socket(), asio::buffer(writing_),
                    [self = shared_from_this(), read_body](beast::error_code ec, std::size_t) {
                      self->is_writing_ = false;
                      self->writing_.clear();
                      if (ec) return self->close();
                      read_body();
                    });
}

void http_session::read_body() {
  if (parser_->is_done()) return on_read({});
  // An idle timeout, renewed by every read: the header deadline used to run on through the
  // body, so a large upload slower than header_timeout_s in total was cut off.
  stream_.expires_after(std::chrono::seconds(ctx_.settings.header_timeout_s));
  http::async_read_some(stream_, buffer_, *parser_,
                        [self = shared_from_this()](beast::error_code ec, std::size_t) {
                          if (ec) return self->on_read_error(ec);
                          self->read_body();
                        });
}

void http_session::on_read(beast::error_code ec) {
  if (ec) return on_read_error(ec);
  stream_.expires_never();
  request_ = parser_->release();
  begin_request();
  try {
    refuse_codings(request_);
    handle_request(shared_from_this());
  } catch (const api_error& e) {
    if (!response_ended_) respond_error(e);
  } catch (const std::exception& e) {
    if (!response_ended_)
      respond_error(api_error(500, fmt::format("internal error: {}", e.what())));
  }
}

void http_session::begin_request() {
  ++request_serial_;
  request_start_ = std::chrono::steady_clock::now();
  set_responding(true);
  response_ended_ = false;
  on_gone_ = nullptr;
  if (!request_.keep_alive() || ctx_.is_draining) close_after_ = true;
}

void http_session::on_read_error(beast::error_code ec) {
  // partial_message: the peer closed in the middle of a request; nobody reads an answer (a 400
  // was counted in http_responses_total for each such client).
  if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
      ec == beast::error::timeout || ec == asio::error::eof ||
      ec == asio::error::connection_reset || ec == asio::error::operation_aborted)
    return close();
  close_after_ = true;
  set_responding(true);
  stream_.expires_never();
  if (ec == http::error::body_limit)
    return respond_error(
        api_error(413,
                  fmt::format("the request body exceeds {} bytes (server.max_body_bytes)",
                              ctx_.settings.max_body_bytes),
                  "", "request_too_large"));
  if (ec == http::error::header_limit)
    return respond_error(
        api_error(431,
                  fmt::format("the request headers exceed {} bytes (server.max_header_bytes)",
                              ctx_.settings.max_header_bytes),
                  "", "headers_too_large"));
  if (&ec.category() == &http::make_error_code(http::error::bad_target).category())
    return respond_error(api_error(400, fmt::format("malformed HTTP request: {}", ec.message())));
  close();
}

void http_session::respond(int status, const std::string& body, const std::string& content_type,
                           const header_list& extra) {
  if (response_ended_) return;
  response_ended_ = true;
  ctx_.metrics.on_http_response(status);
  std::string head = status_line(status);
  head += fmt::format("Content-Type: {}\r\nContent-Length: {}\r\n", content_type, body.size());
  for (const auto& [k, v] : extra) head += fmt::format("{}: {}\r\n", k, v);
  head += close_after_ ? "Connection: close\r\n\r\n" : "Connection: keep-alive\r\n\r\n";
  // A HEAD answer has the GET answer's headers and no body (RFC 9110 9.3.2): the body sent
  // after them was read as the start of the next response on a kept-alive connection.
  queue(request_.method() == http::verb::head ? std::move(head) : head + body);
}

void http_session::respond_error(const api_error& e, const header_list& extra) {
  respond(e.status, e.body().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
          "application/json", extra);
}

void http_session::begin_stream() {
  ctx_.metrics.on_http_response(200);
  // An HTTP/1.0 client cannot read chunked encoding: its stream is the raw events, ended by
  // closing the connection.
  is_chunked_ = request_.version() >= 11;
  if (!is_chunked_) close_after_ = true;
  queue(status_line(200) + "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\n" +
        (is_chunked_ ? "Transfer-Encoding: chunked\r\n" : "") +
        (close_after_ ? "Connection: close\r\n\r\n" : "Connection: keep-alive\r\n\r\n"));
}

void http_session::send(const std::string& data) {
  if (response_ended_ || data.empty()) return;
  queue(is_chunked_ ? fmt::format("{:x}\r\n", data.size()) + data + "\r\n" : data);
}

void http_session::end_stream() {
  if (response_ended_) return;
  response_ended_ = true;
  if (is_chunked_)
    queue("0\r\n\r\n");
  else
    flush();  // the connection closes once the events are written (close_after_)
}

void http_session::queue(std::string bytes) {
  if (!is_open_) return;
  pending_ += bytes;
  flush();
}

void http_session::flush() {
  if (is_writing_ || pending_.empty() || !is_open_) {
    if (!is_writing_ && pending_.empty() && response_ended_ && is_responding_) response_done();
    return;
  }
  is_writing_ = true;
  writing_.swap(pending_);
  pending_.clear();
  asio::async_write(
      stream_.socket(), asio::buffer(writing_),
      [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_written(ec); });
}

void http_session::on_written(beast::error_code ec) {
  is_writing_ = false;
  writing_.clear();
  if (ec) return gone();
  flush();
}

void http_session::response_done() {
  set_responding(false);
  on_gone_ = nullptr;
  if (close_after_) return linger_close();
  do_read();
}

void http_session::linger_close() {
  // Half-close, then drain what the client still sends (e.g. the rest of an oversized body)
  // for a moment, so that it reads our answer instead of a reset.
  beast::error_code ec;
  stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ec);
  stream_.expires_after(std::chrono::seconds(2));
  drain_.resize(16384);
  stream_.async_read_some(asio::buffer(drain_),
                          [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                            self->num_drained_ += std::int64_t(n);
                            if (ec || self->num_drained_ > 2 * self->ctx_.settings.max_body_bytes)
                              return self->close();
                            self->linger_close();
                          });
}

void http_session::watch_disconnect(std::function<void()> on_gone) {
  on_gone_ = std::move(on_gone);
  arm_watch();
}

void http_session::arm_watch() {
  if (is_watching_ || !is_open_) return;
  is_watching_ = true;
  stream_.socket().async_wait(
      asio::ip::tcp::socket::wait_read,
      [self = shared_from_this(), serial = request_serial_](beast::error_code ec) {
        self->is_watching_ = false;
        if (!self->is_responding_) return;
        if (serial != self->request_serial_) {
          // A wait armed for an earlier request woke because this
          // request's bytes arrived (and were read): not a disconnect.
          if (self->on_gone_) self->arm_watch();
          return;
        }
        if (ec) return self->gone();
        switch (self->read_ahead()) {
          case peer::closed:
            return self->gone();
          case peer::connected:
            // Nothing more to read (a stale readiness edge, or pipelined bytes now in
            // buffer_): watch on.
            return self->arm_watch();
          case peer::sent_too_much:
            return;
        }
      });
}

http_session::peer http_session::read_ahead() {
  // A wait on a socket with unread bytes wakes at once (asio re-arms its epoll registration,
  // which reports them again), so the watch cannot wait behind a pipelined request: it stopped
  // at its first byte, and a client that left then went unnoticed -- the request in progress
  // ran on to its max_tokens for nobody. Reading them here empties the socket, and its end
  // shows. Bounded by one request's worth; past that the watch stops as before.
  const auto limit =
      std::size_t(ctx_.settings.max_header_bytes) + std::size_t(ctx_.settings.max_body_bytes);
  const int fd = stream_.socket().native_handle();
  while (buffer_.size() < limit) {
    const auto room = buffer_.prepare(std::min<std::size_t>(limit - buffer_.size(), 65536));
    const ssize_t n = ::recv(fd, room.data(), room.size(), MSG_DONTWAIT);
    if (n > 0) {
      buffer_.commit(std::size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return peer::connected;
    return peer::closed;  // 0: orderly shutdown; other errors: reset
  }
  return peer::sent_too_much;
}

void http_session::gone() {
  if (!is_open_) return;
  auto on_gone = std::move(on_gone_);
  on_gone_ = nullptr;
  close();
  if (on_gone) on_gone();
}

void http_session::close() {
  count_responding(false);  // nothing more will be written
  if (!is_open_) return;
  is_open_ = false;
  beast::error_code ec;
  stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
}

}  // namespace di::server::detail
