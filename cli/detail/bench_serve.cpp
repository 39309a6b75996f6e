// `deepinfer bench serve --url URL --num-prompts N --request-rate R --concurrency C
// [--input-len L --output-len L | --dataset FILE] [--json]`: runs the load generator, shows a
// progress bar on stderr, and prints a table (or one JSON object) of throughput and TTFT /
// TPOT / ITL / end-to-end latency (mean, p50, p99) and failures. Exit code 1 when any failed.
#include "cli/detail/bench_serve.hpp"

#include "cli/command.hpp"
#include "server/bench_client.hpp"
#include "server/http_server.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

namespace di::cli {

namespace {

void progress(int done, int total) {
  if (!isatty(STDERR_FILENO) && done != total && done % std::max(1, total / 20) != 0) return;
  const int width = 40, filled = total > 0 ? done * width / total : width;
  std::fprintf(stderr, "\r[%s%s] %d/%d", std::string(std::size_t(filled), '#').c_str(),
               std::string(std::size_t(width - filled), ' ').c_str(), done, total);
  if (done == total) std::fputc('\n', stderr);
  std::fflush(stderr);
}

void print_table(const server::bench_params& p, const server::bench_report& r) {
  auto row = [](const char* name, const server::latency_summary& s) {
    fmt::print("{:<22} {:>10.2f} {:>10.2f} {:>10.2f}\n", name, s.mean, s.p50, s.p99);
  };
  fmt::print("============ Serving benchmark ({}) ============\n", p.url + p.endpoint);
  fmt::print("{:<34} {}\n", "Successful requests:", r.num_completed);
  fmt::print("{:<34} {}\n", "Failed requests:", r.num_failed);
  for (const std::string& e : r.errors) fmt::print("  error: {}\n", e);
  for (const auto& [status, n] : r.status_counts)
    fmt::print("  HTTP {}: {} request(s)\n", status, n);
  fmt::print("{:<34} {:.2f}\n", "Benchmark duration (s):", r.duration_s);
  fmt::print("{:<34} {}\n", "Max requests in flight:", r.max_in_flight);
  fmt::print("{:<34} {}\n", "Total input tokens:", r.prompt_tokens);
  fmt::print("{:<34} {}\n", "Total generated tokens:", r.output_tokens);
  fmt::print("{:<34} {:.2f}\n", "Request throughput (req/s):", r.request_throughput);
  fmt::print("{:<34} {:.2f}\n", "Output token throughput (tok/s):", r.output_throughput);
  fmt::print("{:<34} {:.2f}\n", "Total token throughput (tok/s):", r.total_throughput);
  fmt::print("{:<22} {:>10} {:>10} {:>10}\n", "latency (ms)", "mean", "p50", "p99");
  row("TTFT", r.ttft_ms);
  row("TPOT", r.tpot_ms);
  row("ITL", r.itl_ms);
  row("E2E", r.e2e_ms);
  if (r.num_failed > 0) row("E2E of failures", r.failed_e2e_ms);
}

}  // namespace

void add_bench_serve(CLI::App* bench) {
  auto p = std::make_shared<server::bench_params>();
  auto json_out = std::make_shared<bool>(false);
  auto rate = std::make_shared<std::string>("inf");
  auto* sub = bench->add_subcommand("serve",
                                    "Load-test an OpenAI-compatible server: Poisson arrivals, "
                                    "streaming requests, TTFT/TPOT/ITL/E2E and throughput");
  sub->add_option("--url", p->url, "Server base URL")->capture_default_str();
  sub->add_option("--endpoint", p->endpoint, "/v1/completions or /v1/chat/completions")
      ->capture_default_str();
  sub->add_option("--model", p->model, "Model id (default: the first of GET /v1/models)");
  sub->add_option("--api-key", p->api_key, "Bearer key (default: $DEEPINFER_API_KEY)");
  sub->add_option("--num-prompts", p->num_prompts, "Requests to send")->capture_default_str();
  sub->add_option("--request-rate", *rate,
                  "Mean arrival rate in requests/s (Poisson); inf = all at once")
      ->capture_default_str();
  sub->add_option("--concurrency", p->concurrency, "Most requests in flight (0 = no limit)")
      ->capture_default_str();
  sub->add_option("--input-len", p->input_len, "Prompt tokens (random ids)")->capture_default_str();
  sub->add_option("--output-len", p->output_len, "Generated tokens per request (ignore_eos)")
      ->capture_default_str();
  sub->add_option("--dataset", p->dataset,
                  "JSONL file of {\"prompt\": ..., \"output_len\": N} instead of random");
  sub->add_option("--seed", p->seed, "Seed of prompts and arrivals")->capture_default_str();
  sub->add_option("--timeout", p->timeout_s, "Per-request timeout in seconds")
      ->capture_default_str();
  sub->add_flag("--json", *json_out, "Print one JSON object instead of the table");
  sub->callback([p, json_out, rate] {
    try {
      p->request_rate = *rate == "inf" ? std::numeric_limits<double>::infinity() : std::stod(*rate);
    } catch (const std::exception&) {
      throw CLI::ValidationError("--request-rate", "expected a number or inf, got " + *rate);
    }
    if (p->api_key.empty())
      if (const char* k = std::getenv("DEEPINFER_API_KEY")) p->api_key = k;
    p->on_progress = progress;
    server::raise_open_file_limit();
    const server::bench_report r = server::run_bench(*p);
    if (*json_out)
      fmt::print("{}\n", server::report_json(*p, r));
    else
      print_table(*p, r);
    if (r.num_failed > 0) set_exit_code(1);
  });
}

}  // namespace di::cli
