// Benchmark, not a test (build with --target bench_runner): steady decode through the runtime
// scheduler and the CPU model runner at a given batch, and where each step's time goes —
// inside the runner (forward, sampling, bookkeeping) and in the scheduler (schedule, apply).
// Usage: bench_runner --model DIR [--batch 32] [--prompt 64] [--steps 32] [--json]
#include "common/error.hpp"
#include "model/runner/cpu_model_runner.hpp"
#include "runtime/sampling_rng.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

struct options {
  std::string model;
  int batch = 32;
  int prompt = 64;
  int steps = 32;
  bool json = false;
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] {
      DI_CHECK(i + 1 < argc, "{} needs a value", a);
      return std::string(argv[++i]);
    };
    if (a == "--model")
      o.model = value();
    else if (a == "--batch")
      o.batch = std::stoi(value());
    else if (a == "--prompt")
      o.prompt = std::stoi(value());
    else if (a == "--steps")
      o.steps = std::stoi(value());
    else if (a == "--json")
      o.json = true;
    else
      DI_CHECK(false, "unknown argument {}", a);
  }
  DI_CHECK(!o.model.empty(),
           "usage: bench_runner --model DIR [--batch N] [--prompt N] [--steps N]");
  return o;
}

/// Per-step seconds of one phase.
struct phase_times {
  std::vector<double> runner, forward, sampling, bookkeeping, scheduler;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

/// Serves `batch` requests to the end and records every step in which all of them decode.
phase_times run_decode(di::cpu_model_runner& runner, const options& o, bool greedy) {
  di::runtime::scheduler_config c;
  c.max_num_batched_tokens = 8192;
  di::runtime::scheduler s(di::scheduler_config_for(runner, c));
  for (int i = 0; i < o.batch; ++i) {
    di::runtime::request r{.id = std::uint64_t(i), .seed = std::uint64_t(i)};
    for (int t = 0; t < o.prompt; ++t)
      r.prompt_ids.push_back(3 + std::int32_t(di::runtime::random_bits(i, t) % 120000));
    r.params.max_tokens = o.steps + 2;
    r.params.ignore_eos = true;
    r.params.temperature = greedy ? 0.0 : 0.8;
    if (!greedy) {
      r.params.top_k = 50;
      r.params.top_p = 0.95;
    }
    DI_CHECK(s.add_request(std::move(r)).is_accepted(), "request {} refused", i);
  }
  phase_times t;
  while (s.has_unfinished()) {
    const auto t0 = clock_type::now();
    const di::runtime::step_plan plan = s.schedule();
    const double schedule_s = std::chrono::duration<double>(clock_type::now() - t0).count();
    const di::runner_stats before = runner.stats();
    const di::runtime::step_result result = runner.run(plan);
    const di::runner_stats& after = runner.stats();
    const auto t1 = clock_type::now();
    if (!plan.sequences.empty()) DI_CHECK(s.apply(result).is_ok(), "apply failed");
    const double apply_s = std::chrono::duration<double>(clock_type::now() - t1).count();
    if (plan.num_rows() != o.batch || int(plan.sequences.size()) != o.batch) continue;
    t.runner.push_back(after.total_seconds - before.total_seconds);
    t.forward.push_back(after.forward_seconds - before.forward_seconds);
    t.sampling.push_back(after.sampling_seconds - before.sampling_seconds);
    t.bookkeeping.push_back(after.bookkeeping_seconds() - before.bookkeeping_seconds());
    t.scheduler.push_back(schedule_s + apply_s);
  }
  runner.run(s.schedule());  // the finished ids
  return t;
}

nlohmann::json report(const phase_times& t, bool greedy) {
  const double step = median(t.runner) + median(t.scheduler);
  return {{"sampling", greedy ? "greedy" : "top-k 50, top-p 0.95, T 0.8"},
          {"num_steps", t.runner.size()},
          {"step_ms", 1e3 * step},
          {"runner_ms", 1e3 * median(t.runner)},
          {"forward_ms", 1e3 * median(t.forward)},
          {"sampling_ms", 1e3 * median(t.sampling)},
          {"bookkeeping_ms", 1e3 * median(t.bookkeeping)},
          {"scheduler_ms", 1e3 * median(t.scheduler)}};
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const options o = parse(argc, argv);
    // Blocks belong to one sequence (a ratio-2 block spans 128 tokens): room for twice the
    // batch's tokens in whole token blocks, so that every request runs at once.
    const std::int64_t len = o.prompt + o.steps + 2;
    auto runner = di::cpu_model_runner::load(
        o.model,
        {.kv_pool_tokens = 2 * o.batch * std::max<std::int64_t>(len, 128), .max_model_len = len});
    nlohmann::json rows = nlohmann::json::array();
    for (bool greedy : {true, false})
      rows.push_back(report(run_decode(*runner, o, greedy), greedy));
    nlohmann::json out = {
        {"model", o.model}, {"batch", o.batch}, {"prompt", o.prompt}, {"results", rows}};
    if (o.json) {
      fmt::print("{}\n", out.dump(2));
      return 0;
    }
    fmt::print("{} | batch {} | prompt {} | median of {} steady decode steps\n", o.model, o.batch,
               o.prompt, rows[0]["num_steps"].get<int>());
    fmt::print("{:<30} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9}\n", "sampling", "step ms", "runner",
               "forward", "sampling", "bookkeeping", "scheduler");
    for (const auto& r : rows)
      fmt::print("{:<30} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>11.3f} {:>9.3f}\n",
                 r["sampling"].get<std::string>(), r["step_ms"].get<double>(),
                 r["runner_ms"].get<double>(), r["forward_ms"].get<double>(),
                 r["sampling_ms"].get<double>(), r["bookkeeping_ms"].get<double>(),
                 r["scheduler_ms"].get<double>());
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
