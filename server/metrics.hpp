// Prometheus metrics of the HTTP front end, named as vLLM names them (with the `deepinfer:`
// prefix): request counts by finish reason, prompt and generation tokens, TTFT / inter-token
// / end-to-end latency histograms, HTTP responses by status, and the cluster's gauges
// (running, waiting, KV blocks, prefix-cache hits) taken from the router's status at scrape
// time. Thread-safe: observations come from I/O threads.
#pragma once

#include "actors/messages.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace di::server {

/// A cumulative histogram with fixed upper bounds (seconds).
class histogram {
 public:
  explicit histogram(std::vector<double> bounds);
  void observe(double x);
  /// Prometheus text lines for `name` (bucket, sum, count).
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<std::int64_t> counts_;  // per bucket, last = +Inf
  double sum_ = 0;
  std::int64_t count_ = 0;
};

/// Front-end counters at one instant (connections and in-flight jobs are the server's).
struct front_end_gauges {
  std::int64_t num_connections = 0;
  std::int64_t num_inflight = 0;  ///< HTTP generation requests being served
};

class server_metrics {
 public:
  server_metrics();

  void on_http_response(int status);
  void on_first_token(double seconds);
  /// `num_tokens` tokens arrived `gap_seconds` after the previous ones of the same choice.
  void on_tokens(std::int64_t num_tokens, double gap_seconds);
  void on_request_done(const std::string& finish_reason, std::int64_t prompt_tokens,
                       std::int64_t generation_tokens, double e2e_seconds);

  /// The whole exposition; `cluster` is null when the router did not answer.
  std::string render(const actors::cluster_status* cluster, const front_end_gauges& gauges) const;

 private:
  mutable std::mutex mutex_;
  std::map<int, std::int64_t> http_responses_;
  std::map<std::string, std::int64_t> finished_;
  std::int64_t prompt_tokens_ = 0;
  std::int64_t generation_tokens_ = 0;
  histogram ttft_;
  histogram itl_;
  histogram e2e_;
};

}  // namespace di::server
