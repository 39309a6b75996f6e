// server_metrics (see metrics.hpp).
#include "server/metrics.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace di::server {

namespace {

const std::vector<double> ttft_bounds{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
                                      0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
const std::vector<double> itl_bounds{0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
                                     0.15,  0.2,   0.3,  0.4,   0.5,  0.75,  1.0,
                                     2.5,   5.0,   10.0, 20.0,  40.0, 80.0};
const std::vector<double> e2e_bounds{0.3,  0.5,  0.8,  1.0,  1.5,  2.0,   2.5,   5.0,   10.0, 15.0,
                                     20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0};

void gauge(std::string& out, const std::string& name, const std::string& help, double value,
           const char* type = "gauge") {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
}

/// The cluster's gauges summed over the groups that are up (and answered), its counters over
/// all groups.
void render_cluster(std::string& out, const actors::cluster_status& c) {
  std::int64_t running = 0, waiting = 0, blocks = 0, used = 0, cached = 0, free = 0;
  std::int64_t queries = 0, hits = 0, query_tokens = 0, hit_tokens = 0, preemptions = 0, up = 0;
  for (const actors::group_status& g : c.groups) {
    const runtime::scheduler_stats& s = g.stats;
    up += g.is_up;
    // Gauges count the groups that are up and answered now; the counters below also keep a
    // down group's last values (they would otherwise fall back, which a counter must not).
    if (g.is_up && g.answered) {
      running += s.num_running;
      waiting += s.num_waiting;
      blocks += s.num_blocks;
      used += s.num_used_blocks;
      cached += s.num_cached_blocks;
      free += s.num_free_blocks;
    }
    queries += s.counters.num_prefix_queries;
    hits += s.counters.num_prefix_hits;
    query_tokens += s.counters.num_prefix_query_tokens;
    hit_tokens += s.counters.num_prefix_hit_tokens;
    preemptions += s.counters.num_preemptions;
  }
  gauge(out, "deepinfer:num_requests_running", "Requests in the running batches.", double(running));
  gauge(out, "deepinfer:num_requests_waiting", "Requests waiting to be scheduled.",
        double(waiting));
  gauge(out, "deepinfer:num_groups_up", "Data-parallel groups able to serve.", double(up));
  gauge(out, "deepinfer:kv_cache_usage_perc",
        "Fraction of KV blocks held by live requests (1 = full).",
        blocks > 0 ? double(used) / double(blocks) : 0.0);
  gauge(out, "deepinfer:kv_blocks_total", "KV blocks of all groups.", double(blocks));
  gauge(out, "deepinfer:kv_blocks_used", "KV blocks held by live requests.", double(used));
  gauge(out, "deepinfer:kv_blocks_cached", "KV blocks cached for prefix reuse and unreferenced.",
        double(cached));
  gauge(out, "deepinfer:kv_blocks_free", "KV blocks free.", double(free));
  // vLLM's prefix_cache_queries / _hits count tokens; the admissions are the lookups.
  gauge(out, "deepinfer:prefix_cache_queries_total",
        "Tokens looked up in the prefix cache at admission.", double(query_tokens), "counter");
  gauge(out, "deepinfer:prefix_cache_hits_total", "Tokens served from the prefix cache.",
        double(hit_tokens), "counter");
  gauge(out, "deepinfer:prefix_cache_hit_tokens_total",
        "Prompt tokens served from the prefix cache (= prefix_cache_hits_total).",
        double(hit_tokens), "counter");
  gauge(out, "deepinfer:prefix_cache_hit_rate", "prefix_cache_hits / prefix_cache_queries.",
        query_tokens > 0 ? double(hit_tokens) / double(query_tokens) : 0.0);
  gauge(out, "deepinfer:prefix_cache_lookups_total", "Admissions that looked up the prefix cache.",
        double(queries), "counter");
  gauge(out, "deepinfer:prefix_cache_lookup_hits_total", "Admissions that reused cached blocks.",
        double(hits), "counter");
  gauge(out, "deepinfer:num_preemptions_total", "Preemptions (recompute) of running requests.",
        double(preemptions), "counter");
  gauge(out, "deepinfer:router_requests_live", "Requests the router has in flight.",
        double(c.router.num_live));
}

}  // namespace

histogram::histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void histogram::observe(double x) {
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), x);
  ++counts_[std::size_t(it - bounds_.begin())];
  sum_ += x;
  ++count_;
}

void histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  std::int64_t cumulative = 0;
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name,
                     sum_, name, count_);
}

server_metrics::server_metrics() : ttft_(ttft_bounds), itl_(itl_bounds), e2e_(e2e_bounds) {}

void server_metrics::on_http_response(int status) {
  std::lock_guard lock(mutex_);
  ++http_responses_[status];
}

void server_metrics::on_first_token(double seconds) {
  std::lock_guard lock(mutex_);
  ttft_.observe(seconds);
}

void server_metrics::on_tokens(std::int64_t num_tokens, double gap_seconds) {
  std::lock_guard lock(mutex_);
  for (std::int64_t i = 0; i < num_tokens; ++i) itl_.observe(gap_seconds / double(num_tokens));
}

void server_metrics::on_request_done(const std::string& finish_reason, std::int64_t prompt_tokens,
                                     std::int64_t generation_tokens, double e2e_seconds) {
  std::lock_guard lock(mutex_);
  ++finished_[finish_reason];
  prompt_tokens_ += prompt_tokens;
  generation_tokens_ += generation_tokens;
  e2e_.observe(e2e_seconds);
}

std::string server_metrics::render(const actors::cluster_status* cluster,
                                   const front_end_gauges& gauges) const {
  std::string out;
  {
    std::lock_guard lock(mutex_);
    out +=
        "# HELP deepinfer:request_success_total Finished generations by finish reason.\n"
        "# TYPE deepinfer:request_success_total counter\n";
    for (const char* reason : {"stop", "length", "abort", "error"}) {
      auto it = finished_.find(reason);
      out += fmt::format("deepinfer:request_success_total{{finished_reason=\"{}\"}} {}\n", reason,
                         it == finished_.end() ? 0 : it->second);
    }
    gauge(out, "deepinfer:prompt_tokens_total", "Prompt tokens of finished generations.",
          double(prompt_tokens_), "counter");
    gauge(out, "deepinfer:generation_tokens_total", "Generated tokens of finished generations.",
          double(generation_tokens_), "counter");
    ttft_.render(out, "deepinfer:time_to_first_token_seconds",
                 "Time from the HTTP request to the first token.");
    itl_.render(out, "deepinfer:inter_token_latency_seconds",
                "Time between tokens of one generation.");
    e2e_.render(out, "deepinfer:e2e_request_latency_seconds",
                "Time from the HTTP request to the last token.");
    out +=
        "# HELP deepinfer:http_responses_total HTTP responses by status.\n"
        "# TYPE deepinfer:http_responses_total counter\n";
    for (const auto& [status, n] : http_responses_)
      out += fmt::format("deepinfer:http_responses_total{{status=\"{}\"}} {}\n", status, n);
  }
  gauge(out, "deepinfer:http_connections", "Open HTTP connections.",
        double(gauges.num_connections));
  gauge(out, "deepinfer:http_requests_inflight", "Generation requests being served over HTTP.",
        double(gauges.num_inflight));
  gauge(out, "deepinfer:cluster_reachable", "1 when the router answered this scrape.",
        cluster ? 1.0 : 0.0);
  if (cluster) render_cluster(out, *cluster);
  return out;
}

}  // namespace di::server
