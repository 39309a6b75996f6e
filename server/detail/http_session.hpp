// One HTTP/1.1 connection (Boost.Beast over Asio, all on the connection's strand): reads
// requests with bounded headers and body, answers them through the routes, writes complete
// responses or a chunked SSE stream from a queue, keeps the connection alive between requests,
// and notices a peer that goes away while a response is pending (so its generation is
// aborted; also with pipelined requests waiting behind it). Never more than one request at a
// time per connection.
#pragma once

#include "server/api_error.hpp"
#include "server/server_context.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace di::server::detail {

using http_request = boost::beast::http::request<boost::beast::http::string_body>;
using header_list = std::vector<std::pair<std::string, std::string>>;

class http_session : public std::enable_shared_from_this<http_session> {
 public:
  http_session(boost::asio::ip::tcp::socket&& socket, server_context& ctx);
  ~http_session();
  void start();

  // Everything below runs on the connection's strand (post there from other threads).
  boost::asio::any_io_executor executor() { return stream_.get_executor(); }
  server_context& context() { return ctx_; }
  const http_request& request() const { return request_; }
  /// Seconds since the current request was read.
  double request_age() const;
  /// A complete response; the connection then reads the next request (or closes).
  void respond(int status, const std::string& body,
               const std::string& content_type = "application/json", const header_list& extra = {});
  void respond_error(const api_error& e, const header_list& extra = {});
  /// Starts a text/event-stream response; send() writes one chunk; end_stream() finishes it.
  void begin_stream();
  void send(const std::string& data);
  void end_stream();
  bool is_open() const { return is_open_; }
  /// Calls `on_gone` once if the peer closes or resets before the response ends.
  void watch_disconnect(std::function<void()> on_gone);
  /// Closes the connection after the current response.
  void close_after_response() { close_after_ = true; }

 private:
  void do_read();
  void on_header(boost::beast::error_code ec);
  void read_body();
  void on_read(boost::beast::error_code ec);
  /// The request_ just read (or its head, answered before its body) is being answered.
  void begin_request();
  void on_read_error(boost::beast::error_code ec);
  void queue(std::string bytes);
  void flush();
  void on_written(boost::beast::error_code ec);
  void response_done();
  /// is_responding_, counted in server_context::num_responding.
  void set_responding(bool on);
  void count_responding(bool on);
  void arm_watch();
  /// What read_ahead found: the peer still there, gone, or more bytes waiting than buffer_
  /// takes (the watch stops there).
  enum class peer { connected, closed, sent_too_much };
  /// Moves the bytes the peer sent after the request being answered (pipelined requests) from
  /// the socket to buffer_, where the next do_read parses them, without blocking.
  peer read_ahead();
  void gone();
  void linger_close();
  void close();

  boost::beast::tcp_stream stream_;
  server_context& ctx_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  http_request request_;
  std::chrono::steady_clock::time_point request_start_;
  std::string pending_;  // bytes waiting for the write in progress
  std::string writing_;  // bytes of the write in progress
  bool is_writing_ = false;
  bool is_responding_ = false;  // a request was read and its response has not ended
  bool is_counted_ = false;     // counted in num_responding
  bool response_ended_ = false;
  bool close_after_ = false;
  bool is_chunked_ = true;  // the stream's framing: chunked, or raw until close (HTTP/1.0)
  bool is_open_ = true;
  bool is_watching_ = false;
  std::uint64_t request_serial_ = 0;  ///< counts requests read; a watch belongs to one of them
  std::function<void()> on_gone_;
  std::string drain_;  // discarded bytes while closing
  std::int64_t num_drained_ = 0;
};

}  // namespace di::server::detail
