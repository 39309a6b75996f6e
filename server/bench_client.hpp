// The load generator of `deepinfer bench serve`: requests arrive as a Poisson process at
// `request_rate` (or all at once), at most `concurrency` in flight, each a streaming
// /v1/completions request of a random token-id prompt of input_len tokens (/v1/chat/completions:
// a message whose text is input_len tokens, random ids decoded with a tokenizer; or a dataset
// line) with ignore_eos and max_tokens = output_len. Asynchronous on one Asio thread: a thousand
// concurrent streams cost one thread. Per request it records TTFT, the gaps between streamed
// chunks (ITL), TPOT and end-to-end latency, the output tokens from usage (or, when the server
// sends none, the content chunks streamed), and failures.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace di::server {

struct bench_params {
  std::string url = "http://127.0.0.1:8000";  ///< server base URL (http only)
  std::string endpoint = "/v1/completions";
  std::string model;  ///< empty: the first of GET /v1/models
  std::string api_key;
  int num_prompts = 100;
  double request_rate = std::numeric_limits<double>::infinity();  ///< requests/s (Poisson)
  int concurrency = 0;                                            ///< 0 = unlimited
  int input_len = 128;
  int output_len = 128;
  std::string dataset;  ///< JSONL of {"prompt", "output_len"?}; empty = random
  std::string tokenizer_dir;  ///< decodes the random prompts of /v1/chat/completions
  std::uint64_t seed = 0;
  std::int32_t vocab_lo = 1000;  ///< random prompt ids are in [vocab_lo, vocab_hi)
  std::int32_t vocab_hi = 20000;
  double timeout_s = 600;                                ///< per request
  std::function<void(int done, int total)> on_progress;  ///< after each request
};

/// One request's measurements.
struct bench_request_result {
  bool is_ok = false;
  std::string error;
  int status = 0;
  std::int64_t prompt_tokens = 0;
  std::int64_t output_tokens = 0;
  double ttft_s = 0;
  double e2e_s = 0;
  std::vector<double> itl_s;  ///< gaps between content chunks after the first
  bool has_usage = false;     ///< false: output_tokens counts the content chunks streamed
};

/// Percentiles interpolate linearly between the closest ranks (numpy.percentile's default, as
/// vLLM's benchmark reports them). count 0: no sample, the figures mean nothing ("n/a").
struct latency_summary {
  double mean = 0, p50 = 0, p99 = 0;
  std::size_t count = 0;
};

/// Summary of `xs` (seconds) in milliseconds.
latency_summary summarize_ms(std::vector<double> xs);

struct bench_report {
  double duration_s = 0;
  int num_completed = 0;
  int num_failed = 0;
  std::vector<std::string> errors;   ///< a message of each failing status, then a few more
  std::map<int, int> status_counts;  ///< HTTP status of every request (0 = no response)
  latency_summary failed_e2e_ms;     ///< how fast failures failed (e.g. 429 at admission)
  std::int64_t prompt_tokens = 0;
  std::int64_t output_tokens = 0;
  double request_throughput = 0;  ///< completed requests / s
  double output_throughput = 0;   ///< output tokens / s
  double total_throughput = 0;    ///< (prompt + output) tokens / s
  int max_in_flight = 0;
  int num_without_usage = 0;  ///< completed requests whose output tokens are streamed chunks
  latency_summary ttft_ms, tpot_ms, itl_ms, e2e_ms;
};

/// Runs the benchmark (blocks). Throws di::error for a bad URL or an unreachable server.
bench_report run_bench(const bench_params& params);

/// The report as the JSON object `bench serve --json` prints.
std::string report_json(const bench_params& params, const bench_report& r);

}  // namespace di::server
