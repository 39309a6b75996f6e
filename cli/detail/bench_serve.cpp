// `deepinfer bench serve --url URL --num-prompts N --request-rate R[,R...] --concurrency C
// [--input-len L --output-len L | --dataset FILE] [--json] [--plot FILE.png]`: runs the load
// generator, shows a progress bar on stderr, and prints a table (or one JSON object) of
// throughput and TTFT / TPOT / ITL / end-to-end latency (mean, p50, p99) and failures. Several
// rates make a sweep: one run per rate, then a summary table (JSON: an array of the objects)
// and, with --plot, a PNG drawn by gnuplot. Exit code 1 when any request failed. A figure with
// no sample (no request succeeded) prints as n/a.
#include "cli/detail/bench_serve.hpp"

#include "cli/command.hpp"
#include "cli/detail/option_checks.hpp"
#include "cli/detail/sweep_plot.hpp"
#include "model/make_model/assets.hpp"
#include "server/bench_client.hpp"
#include "server/http_server.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <sstream>
#include <vector>

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

/// `x` with two decimals, or "n/a" when `s` has no sample.
std::string ms(const server::latency_summary& s, double x) {
  return s.count > 0 ? fmt::format("{:.2f}", x) : "n/a";
}

void print_table(const server::bench_params& p, const server::bench_report& r) {
  auto row = [](const char* name, const server::latency_summary& s) {
    fmt::print("{:<22} {:>10} {:>10} {:>10}\n", name, ms(s, s.mean), ms(s, s.p50), ms(s, s.p99));
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
  if (r.num_without_usage > 0)
    fmt::print("  ({} request(s) sent no usage: their streamed content chunks are counted)\n",
               r.num_without_usage);
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

/// "1,2.5,inf" -> {1, 2.5, inf}: each rate positive or inf.
std::vector<double> parse_rates(const std::string& list) {
  std::vector<double> rates;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    double r = 0;
    std::size_t used = 0;
    try {
      r = item == "inf" ? std::numeric_limits<double>::infinity() : std::stod(item, &used);
      if (item == "inf") used = item.size();
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || item.empty() || !(r > 0))
      throw CLI::ValidationError(
          "--request-rate",
          "expected positive numbers or inf separated by commas, got '" + list + "'");
    rates.push_back(r);
  }
  if (rates.empty()) throw CLI::ValidationError("--request-rate", "no rate given");
  return rates;
}

void print_sweep(const std::vector<sweep_point>& points) {
  fmt::print("============ Request-rate sweep ============\n");
  fmt::print("{:>10} {:>9} {:>11} {:>10} {:>10} {:>10} {:>10} {:>7}\n", "rate", "req/s",
             "out tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "failed");
  for (const sweep_point& p : points) {
    const server::bench_report& r = p.report;
    fmt::print("{:>10} {:>9.2f} {:>11.1f} {:>10} {:>10} {:>10} {:>10} {:>7}\n",
               std::isfinite(p.offered_rate) ? fmt::format("{:g}", p.offered_rate) : "inf",
               r.request_throughput, r.output_throughput, ms(r.ttft_ms, r.ttft_ms.p50),
               ms(r.ttft_ms, r.ttft_ms.p99), ms(r.tpot_ms, r.tpot_ms.p50),
               ms(r.tpot_ms, r.tpot_ms.p99), r.num_failed);
  }
  fmt::print("(latencies in ms)\n");
}

}  // namespace

void add_bench_serve(CLI::App* bench) {
  auto p = std::make_shared<server::bench_params>();
  auto json_out = std::make_shared<bool>(false);
  auto rate = std::make_shared<std::string>("inf");
  auto plot = std::make_shared<std::string>();
  auto* sub = bench->add_subcommand("serve",
                                    "Load-test an OpenAI-compatible server: Poisson arrivals, "
                                    "streaming requests, TTFT/TPOT/ITL/E2E and throughput");
  sub->add_option("--url", p->url, "Server base URL")->capture_default_str();
  sub->add_option("--endpoint", p->endpoint, "/v1/completions or /v1/chat/completions")
      ->capture_default_str();
  sub->add_option("--model", p->model, "Model id (default: the first of GET /v1/models)");
  sub->add_option("--api-key", p->api_key, "Bearer key (default: $DEEPINFER_API_KEY)");
  sub->add_option("--num-prompts", p->num_prompts, "Requests to send")
      ->check(integer_range<int>(1))
      ->capture_default_str();
  sub->add_option("--request-rate", *rate,
                  "Mean arrival rate in requests/s (Poisson); inf = all at once; several "
                  "(e.g. 1,2,4,inf) run a sweep, one benchmark per rate")
      ->capture_default_str();
  sub->add_option("--concurrency", p->concurrency, "Most requests in flight (0 = no limit)")
      ->check(integer_range<int>(0))
      ->capture_default_str();
  sub->add_option("--input-len", p->input_len,
                  "Prompt tokens (random ids; chat: of the message text, before the template)")
      ->check(integer_range<int>(1))
      ->capture_default_str();
  sub->add_option("--output-len", p->output_len, "Generated tokens per request (ignore_eos)")
      ->check(integer_range<int>(1))
      ->capture_default_str();
  sub->add_option("--dataset", p->dataset,
                  "JSONL file of {\"prompt\": ..., \"output_len\": N} instead of random");
  sub->add_option("--tokenizer", p->tokenizer_dir,
                  "Folder with tokenizer.json that decodes the random chat prompts (default: the "
                  "bundled DeepSeek-V3 one)");
  sub->add_option("--seed", p->seed, "Seed of prompts and arrivals")->capture_default_str();
  sub->add_option("--timeout", p->timeout_s, "Per-request timeout in seconds")
      ->capture_default_str();
  sub->add_flag("--json", *json_out,
                "Print one JSON object (a sweep: an array of them) instead of the tables");
  sub->add_option("--plot", *plot,
                  "With a sweep: write a PNG of TTFT and TPOT against the achieved throughput "
                  "(needs gnuplot; its data goes to FILE.tsv)");
  sub->callback([p, json_out, rate, plot] {
    const std::vector<double> rates = parse_rates(*rate);
    if (!plot->empty()) {
      if (rates.size() < 2)
        throw CLI::ValidationError("--plot", "needs a sweep: give several --request-rate values");
      require_gnuplot();
    }
    if (p->endpoint == "/v1/chat/completions" && p->dataset.empty() && p->tokenizer_dir.empty())
      p->tokenizer_dir = find_tokenizer_assets().string();
    if (p->api_key.empty())
      if (const char* k = std::getenv("DEEPINFER_API_KEY")) p->api_key = k;
    p->on_progress = progress;
    server::raise_open_file_limit();
    std::vector<sweep_point> points;
    std::string json_items;
    for (double r : rates) {
      p->request_rate = r;
      if (rates.size() > 1)
        fmt::print(stderr, "rate {}:\n", std::isfinite(r) ? fmt::format("{:g}/s", r) : "inf");
      points.push_back({r, server::run_bench(*p)});
      if (*json_out)
        json_items +=
            (json_items.empty() ? "" : ",\n") + server::report_json(*p, points.back().report);
      else
        print_table(*p, points.back().report);
      if (points.back().report.num_failed > 0) set_exit_code(1);
    }
    if (*json_out) fmt::print("{}\n", rates.size() > 1 ? "[" + json_items + "]" : json_items);
    if (rates.size() > 1 && !*json_out) print_sweep(points);
    if (!plot->empty()) {
      plot_sweep(points, *plot);
      fmt::print(stderr, "wrote {} (data: {}.tsv)\n", *plot, *plot);
    }
  });
}

}  // namespace di::cli
