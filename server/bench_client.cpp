// The `bench serve` load generator (see bench_client.hpp).
#include "server/bench_client.hpp"

#include "common/error.hpp"
#include "model/tokenizer/tokenizer.hpp"

#include <fmt/format.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

namespace di::server {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

double seconds_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct target {
  std::string host;
  std::string port;
};

target parse_url(const std::string& url) {
  DI_CHECK(url.rfind("http://", 0) == 0, "--url {}: expected http://HOST:PORT", url);
  std::string rest = url.substr(7);
  rest = rest.substr(0, rest.find('/'));
  const std::size_t colon = rest.rfind(':');
  if (colon == std::string::npos) return {rest, "80"};
  return {rest.substr(0, colon), rest.substr(colon + 1)};
}

/// GET path synchronously (for /v1/models before the run). A server that cannot be reached
/// or that breaks the exchange is a di::error naming `url` (it was Asio's bare "connect:
/// Connection refused").
std::string get(const target& t, const std::string& url, const std::string& path,
                const std::string& key) {
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  http::response<http::string_body> res;
  try {
    stream.expires_after(std::chrono::seconds(30));
    stream.connect(tcp::resolver(ioc).resolve(t.host, t.port));
    http::request<http::empty_body> req{http::verb::get, path, 11};
    req.set(http::field::host, t.host);
    if (!key.empty()) req.set(http::field::authorization, "Bearer " + key);
    http::write(stream, req);
    beast::flat_buffer buf;
    http::read(stream, buf, res);
  } catch (const boost::system::system_error& e) {
    DI_FAIL(
        "--url {}: GET {} failed: {} (is `deepinfer serve` or another OpenAI-compatible "
        "server listening there?)",
        url, path, e.code().message());
  }
  DI_CHECK(res.result_int() == 200, "GET {}: HTTP {}: {}", path, res.result_int(), res.body());
  return res.body();
}

struct prompt_item {
  json prompt;
  int output_len = 0;
};

/// A text of about `len` tokens: random ids decoded, re-encoded and adjusted (cut when the
/// text encodes to more, topped up with random ids when to fewer) until it encodes to exactly
/// `len` (almost always within a few rounds) -- as vLLM's random dataset does.
std::string random_text(const tok::tokenizer& tok, std::size_t len, std::mt19937_64& rng,
                        std::uniform_int_distribution<std::int32_t>& id) {
  std::vector<tok::token_id> ids(len);
  for (auto& x : ids) x = id(rng);
  std::string text;
  for (int attempt = 0; attempt < 20; ++attempt) {
    text = tok.decode(ids);
    std::vector<tok::token_id> again = tok.encode(text);
    if (again.size() == len) return text;
    if (again.size() > len) again.resize(len);
    while (again.size() < len) again.push_back(id(rng));
    ids = std::move(again);
  }
  return tok.decode(ids);
}

std::vector<prompt_item> make_prompts(const bench_params& p, bool chat) {
  std::vector<prompt_item> items;
  if (!p.dataset.empty()) {
    std::error_code ec;  // a folder opens as a stream with no lines: "no prompts" said nothing
    DI_CHECK(!std::filesystem::is_directory(p.dataset, ec),
             "--dataset {}: is a directory, not a file", p.dataset);
    std::ifstream in(p.dataset);
    DI_CHECK(in, "--dataset {}: cannot read", p.dataset);
    int line_number = 0;
    for (std::string line; std::getline(in, line) && int(items.size()) < p.num_prompts;) {
      ++line_number;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      json j;
      try {
        j = json::parse(line);
      } catch (const json::parse_error& e) {
        DI_FAIL("--dataset {}: line {}: not valid JSON: {}", p.dataset, line_number, e.what());
      }
      DI_CHECK(j.is_object() && j.contains("prompt"),
               "--dataset {}: line {}: expected an object with a \"prompt\"", p.dataset,
               line_number);
      const json& prompt = j["prompt"];
      DI_CHECK(prompt.is_string() || (!chat && prompt.is_array()),
               "--dataset {}: line {}: \"prompt\" must be a string{}", p.dataset, line_number,
               chat ? " (a chat message)" : " or an array of token ids");
      int output_len = p.output_len;
      if (auto o = j.find("output_len"); o != j.end()) {
        DI_CHECK(o->is_number_integer() && o->get<std::int64_t>() > 0 &&
                     o->get<std::int64_t>() <= std::numeric_limits<int>::max(),
                 "--dataset {}: line {}: \"output_len\" must be a positive whole number, got {}",
                 p.dataset, line_number, o->dump());
        output_len = int(o->get<std::int64_t>());
      }
      items.push_back({prompt, output_len});
    }
    DI_CHECK(!items.empty(), "--dataset {}: no prompts", p.dataset);
    while (int(items.size()) < p.num_prompts) items.push_back(items[items.size() % items.size()]);
    return items;
  }
  std::mt19937_64 rng(p.seed);
  std::uniform_int_distribution<std::int32_t> id(p.vocab_lo, p.vocab_hi - 1);
  if (chat) {
    DI_CHECK(!p.tokenizer_dir.empty(),
             "--endpoint /v1/chat/completions with random prompts needs --tokenizer");
    const tok::tokenizer tok = tok::tokenizer::from_dir(p.tokenizer_dir);
    for (int i = 0; i < p.num_prompts; ++i)
      items.push_back({random_text(tok, std::size_t(p.input_len), rng, id), p.output_len});
    return items;
  }
  for (int i = 0; i < p.num_prompts; ++i) {
    std::vector<std::int32_t> ids(std::size_t(p.input_len));
    for (auto& x : ids) x = id(rng);
    items.push_back({json(ids), p.output_len});
  }
  return items;
}

class bench_run;

/// One streaming request on its own connection.
class bench_conn : public std::enable_shared_from_this<bench_conn> {
 public:
  bench_conn(bench_run& run, int index, std::string body);
  void start();

 private:
  void on_connected(beast::error_code ec);
  void on_written(beast::error_code ec);
  void on_header(beast::error_code ec);
  void read_body();
  void on_body(beast::error_code ec);
  void consume(std::string_view bytes);
  void on_event(std::string_view payload);
  void finish(std::string error);

  bench_run& run_;
  int index_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> req_;
  http::response_parser<http::buffer_body> parser_;
  char chunk_[16384];
  std::string events_;  // SSE text not yet split into events
  std::string error_body_;
  bench_request_result result_;
  clock_type::time_point start_, last_;
  std::int64_t num_chunks_ = 0;  // content chunks: the output tokens if no usage comes
  bool has_first_ = false, saw_done_ = false, is_finished_ = false;
};

class bench_run {
 public:
  bench_run(const bench_params& p, std::vector<std::string> bodies, const target& t)
      : params(p), bodies_(std::move(bodies)), target_(t), timer_(ioc) {
    results.resize(bodies_.size());
    endpoints = tcp::resolver(ioc).resolve(t.host, t.port);
    std::mt19937_64 rng(p.seed ^ 0x9e3779b97f4a7c15ull);
    std::exponential_distribution<double> gap(std::isfinite(p.request_rate) ? p.request_rate : 1.0);
    double t_s = 0;
    for (std::size_t i = 0; i < bodies_.size(); ++i) {
      arrivals_.push_back(t_s);
      if (std::isfinite(p.request_rate)) t_s += gap(rng);
    }
  }

  void run() {
    start_ = clock_type::now();
    arrive();
    ioc.run();
    duration_s = seconds_between(start_, clock_type::now());
  }

  void done(int index, bench_request_result r) {
    results[std::size_t(index)] = std::move(r);
    --in_flight_;
    ++num_done_;
    if (params.on_progress) params.on_progress(num_done_, int(bodies_.size()));
    launch();
  }

  const bench_params& params;
  asio::io_context ioc{1};
  tcp::resolver::results_type endpoints;
  std::vector<bench_request_result> results;
  double duration_s = 0;
  int max_in_flight = 0;
  const target& host() const { return target_; }

 private:
  /// Requests whose arrival time has come join the queue; the timer waits for the next one.
  void arrive() {
    const double now = seconds_between(start_, clock_type::now());
    while (next_ < bodies_.size() && arrivals_[next_] <= now) waiting_.push_back(int(next_++));
    launch();
    if (next_ < bodies_.size()) {
      timer_.expires_at(start_ + std::chrono::duration_cast<clock_type::duration>(
                                     std::chrono::duration<double>(arrivals_[next_])));
      timer_.async_wait([this](beast::error_code) { arrive(); });
    }
  }

  void launch() {
    while (!waiting_.empty() && (params.concurrency <= 0 || in_flight_ < params.concurrency)) {
      const int i = waiting_.front();
      waiting_.pop_front();
      ++in_flight_;
      max_in_flight = std::max(max_in_flight, in_flight_);
      std::make_shared<bench_conn>(*this, i, std::move(bodies_[std::size_t(i)]))->start();
    }
  }

  std::vector<std::string> bodies_;
  target target_;
  asio::steady_timer timer_;
  std::vector<double> arrivals_;  // seconds from the start
  std::deque<int> waiting_;
  std::size_t next_ = 0;
  int in_flight_ = 0;
  int num_done_ = 0;
  clock_type::time_point start_;
};

bench_conn::bench_conn(bench_run& run, int index, std::string body)
    : run_(run), index_(index), stream_(run.ioc) {
  req_ = {http::verb::post, run.params.endpoint, 11};
  req_.set(http::field::host, run.host().host);
  req_.set(http::field::content_type, "application/json");
  req_.set(http::field::connection, "close");
  if (!run.params.api_key.empty())
    req_.set(http::field::authorization, "Bearer " + run.params.api_key);
  req_.body() = std::move(body);
  req_.prepare_payload();
  parser_.body_limit(std::uint64_t(1)
                     << 40);  // not boost::none: Beast 1.74 then rejects any Content-Length
}

void bench_conn::start() {
  start_ = clock_type::now();
  stream_.expires_after(std::chrono::milliseconds(std::int64_t(run_.params.timeout_s * 1000)));
  stream_.async_connect(run_.endpoints,
                        [self = shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
                          self->on_connected(ec);
                        });
}

void bench_conn::on_connected(beast::error_code ec) {
  if (ec) return finish(fmt::format("connect to {}: {}", run_.params.url, ec.message()));
  http::async_write(stream_, req_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
    self->on_written(ec);
  });
}

void bench_conn::on_written(beast::error_code ec) {
  if (ec) return finish("write: " + ec.message());
  http::async_read_header(
      stream_, buffer_, parser_,
      [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
}

void bench_conn::on_header(beast::error_code ec) {
  if (ec) return finish("read header: " + ec.message());
  result_.status = parser_.get().result_int();
  read_body();
}

void bench_conn::read_body() {
  if (parser_.is_done()) {
    if (result_.status != 200)
      return finish(fmt::format("HTTP {}: {}", result_.status, error_body_.substr(0, 300)));
    return finish(saw_done_ ? "" : "the stream ended without data: [DONE]");
  }
  parser_.get().body().data = chunk_;
  parser_.get().body().size = sizeof(chunk_);
  http::async_read_some(
      stream_, buffer_, parser_,
      [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_body(ec); });
}

void bench_conn::on_body(beast::error_code ec) {
  if (ec == http::error::need_buffer) ec = {};
  const std::size_t n = sizeof(chunk_) - parser_.get().body().size;
  if (result_.status != 200)
    error_body_.append(chunk_, n);
  else
    consume({chunk_, n});
  if (ec) return finish("read body: " + ec.message());
  if (is_finished_) return;
  read_body();
}

void bench_conn::consume(std::string_view bytes) {
  events_.append(bytes);
  for (std::size_t end; (end = events_.find("\n\n")) != std::string::npos;) {
    const std::string event = events_.substr(0, end);
    events_.erase(0, end + 2);
    if (event.rfind("data: ", 0) == 0) on_event(std::string_view(event).substr(6));
  }
}

void bench_conn::on_event(std::string_view payload) {
  if (payload == "[DONE]") {
    saw_done_ = true;
    return;
  }
  const json j = json::parse(payload, nullptr, false);
  if (!j.is_object()) return;
  if (j.contains("error")) {
    error_body_ = j["error"].value("message", "error event");
    return;
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    result_.output_tokens = u->value("completion_tokens", 0);
    result_.prompt_tokens = u->value("prompt_tokens", 0);
    result_.has_usage = true;
  }
  auto ch = j.find("choices");
  if (ch == j.end() || !ch->is_array() || ch->empty()) return;
  const json& c = (*ch)[0];
  const bool has_text =
      (c.contains("text") && c["text"].is_string() && !c["text"].get<std::string>().empty()) ||
      (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content") &&
       c["delta"]["content"].is_string() && !c["delta"]["content"].get<std::string>().empty());
  if (!has_text) return;
  ++num_chunks_;
  const auto now = clock_type::now();
  if (!has_first_)
    result_.ttft_s = seconds_between(start_, now);
  else
    result_.itl_s.push_back(seconds_between(last_, now));
  has_first_ = true;
  last_ = now;
}

void bench_conn::finish(std::string error) {
  if (is_finished_) return;
  is_finished_ = true;
  if (error.empty() && !error_body_.empty()) error = "stream error: " + error_body_;
  result_.e2e_s = seconds_between(start_, clock_type::now());
  result_.is_ok = error.empty();
  if (!result_.has_usage) result_.output_tokens = num_chunks_;
  result_.error = std::move(error);
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
  run_.done(index_, std::move(result_));
}

}  // namespace

latency_summary summarize_ms(std::vector<double> xs) {
  latency_summary s;
  if (xs.empty()) return s;
  std::sort(xs.begin(), xs.end());
  double sum = 0;
  for (double x : xs) sum += x;
  auto pct = [&](double q) {  // numpy.percentile's "linear": between the ranks around q(n-1)
    const double pos = q * double(xs.size() - 1);
    const std::size_t lo = std::size_t(pos), hi = std::min(lo + 1, xs.size() - 1);
    return (xs[lo] + (xs[hi] - xs[lo]) * (pos - double(lo))) * 1e3;
  };
  s.count = xs.size();
  s.mean = sum / double(xs.size()) * 1e3;
  s.p50 = pct(0.5);
  s.p99 = pct(0.99);
  return s;
}

bench_report run_bench(const bench_params& p) {
  DI_CHECK(p.num_prompts > 0, "--num-prompts must be positive");
  DI_CHECK(p.request_rate > 0, "--request-rate must be positive (inf = all at once)");
  DI_CHECK(p.input_len > 0 && p.output_len > 0, "--input-len and --output-len must be positive");
  DI_CHECK(p.concurrency >= 0, "--concurrency must be 0 (no limit) or positive, got {}",
           p.concurrency);
  DI_CHECK(p.timeout_s > 0 && std::isfinite(p.timeout_s),
           "--timeout must be a positive number of seconds, got {}", p.timeout_s);
  DI_CHECK(p.endpoint == "/v1/completions" || p.endpoint == "/v1/chat/completions",
           "--endpoint must be /v1/completions or /v1/chat/completions, got '{}'", p.endpoint);
  const bool chat = p.endpoint == "/v1/chat/completions";
  const std::vector<prompt_item> prompts = make_prompts(p, chat);
  const target t = parse_url(p.url);
  std::string model = p.model;
  if (model.empty()) {
    const json models = json::parse(get(t, p.url, "/v1/models", p.api_key), nullptr, false);
    DI_CHECK(models.is_object() && models.contains("data") && !models["data"].empty(),
             "{}/v1/models: no model listed", p.url);
    model = models["data"][0].value("id", "");
  }
  std::vector<std::string> bodies;
  for (const prompt_item& item : prompts) {
    json body = {{"model", model},
                 {"max_tokens", item.output_len},
                 {"stream", true},
                 {"ignore_eos", true},
                 {"stream_options", {{"include_usage", true}}},
                 {"temperature", 0}};
    if (chat) {
      body["messages"] = json::array({{{"role", "user"}, {"content", item.prompt}}});
    } else {
      body["prompt"] = item.prompt;
    }
    bodies.push_back(body.dump());
  }
  bench_run run(p, std::move(bodies), t);
  run.run();
  bench_report r;
  r.duration_s = run.duration_s;
  r.max_in_flight = run.max_in_flight;
  std::vector<double> ttft, tpot, itl, e2e, failed_e2e;
  std::set<int> failing_statuses;
  for (const bench_request_result& x : run.results) {
    ++r.status_counts[x.status];
    if (!x.is_ok && failing_statuses.insert(x.status).second && r.errors.size() < 32)
      r.errors.push_back(x.error);  // an example of each failing status (at most 32)
  }
  for (const bench_request_result& x : run.results) {
    if (!x.is_ok) {
      failed_e2e.push_back(x.e2e_s);
      ++r.num_failed;
      // then a few more distinct messages
      if (r.errors.size() < 5 &&
          std::find(r.errors.begin(), r.errors.end(), x.error) == r.errors.end())
        r.errors.push_back(x.error);
      continue;
    }
    ++r.num_completed;
    if (!x.has_usage) ++r.num_without_usage;
    r.prompt_tokens += x.prompt_tokens;
    r.output_tokens += x.output_tokens;
    ttft.push_back(x.ttft_s);
    e2e.push_back(x.e2e_s);
    if (x.output_tokens > 1) tpot.push_back((x.e2e_s - x.ttft_s) / double(x.output_tokens - 1));
    itl.insert(itl.end(), x.itl_s.begin(), x.itl_s.end());
  }
  const double d = std::max(r.duration_s, 1e-9);
  r.request_throughput = r.num_completed / d;
  r.output_throughput = double(r.output_tokens) / d;
  r.total_throughput = double(r.prompt_tokens + r.output_tokens) / d;
  r.ttft_ms = summarize_ms(std::move(ttft));
  r.tpot_ms = summarize_ms(std::move(tpot));
  r.itl_ms = summarize_ms(std::move(itl));
  r.e2e_ms = summarize_ms(std::move(e2e));
  r.failed_e2e_ms = summarize_ms(std::move(failed_e2e));
  return r;
}

std::string report_json(const bench_params& p, const bench_report& r) {
  auto lat = [](const latency_summary& s) {  // null: no sample (e.g. nothing succeeded)
    auto v = [&](double x) { return s.count > 0 ? json(x) : json(nullptr); };
    return json{{"mean", v(s.mean)}, {"p50", v(s.p50)}, {"p99", v(s.p99)}};
  };
  json j = {{"url", p.url},
            {"endpoint", p.endpoint},
            {"num_prompts", p.num_prompts},
            {"request_rate", std::isfinite(p.request_rate) ? json(p.request_rate) : json("inf")},
            {"concurrency", p.concurrency},
            {"duration_s", r.duration_s},
            {"completed", r.num_completed},
            {"failed", r.num_failed},
            {"errors", r.errors},
            {"prompt_tokens", r.prompt_tokens},
            {"output_tokens", r.output_tokens},
            {"requests_without_usage", r.num_without_usage},
            {"request_throughput", r.request_throughput},
            {"output_throughput", r.output_throughput},
            {"total_token_throughput", r.total_throughput},
            {"max_in_flight", r.max_in_flight},
            {"ttft_ms", lat(r.ttft_ms)},
            {"tpot_ms", lat(r.tpot_ms)},
            {"itl_ms", lat(r.itl_ms)},
            {"e2e_ms", lat(r.e2e_ms)},
            {"failed_e2e_ms", lat(r.failed_e2e_ms)}};
  if (p.dataset.empty()) {
    j["input_len"] = p.input_len;
    j["output_len"] = p.output_len;
  } else {
    j["dataset"] = p.dataset;  // lengths come from its lines
  }
  for (const auto& [status, n] : r.status_counts) j["status_counts"][std::to_string(status)] = n;
  return j.dump(2);
}

}  // namespace di::server
