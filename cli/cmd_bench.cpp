// `deepinfer bench prefill|decode`: times the forward pass of a checkpoint and relates it to
// the physical limits measured in the same run (host copy bandwidth for decode; an estimate
// of FLOP/s for prefill). --device cuda runs the forward on the GPU (weights resident there) and
// compares with the device copy bandwidth and the cuBLAS bf16 rate measured in the same run;
// --cuda-graphs off|on|both times its decode steps eagerly, through CUDA graphs, or both ways.
#include "cli/command.hpp"
#include "cli/detail/act_quant_flags.hpp"
#include "cli/detail/bench_serve.hpp"
#include "cli/detail/device_setup.hpp"
#include "cli/detail/memory_bandwidth.hpp"
#include "cli/detail/offline_generation.hpp"
#include "cli/detail/option_checks.hpp"
#include "cli/detail/step_cost.hpp"
#include "cli/detail/token_id_list.hpp"
#include "common/error.hpp"
#include "model/forward/model.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <random>

#include <sys/resource.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

struct bench_options {
  std::string model;
  std::string device = "cpu";
  std::string device_weights = "stored";
  std::string batches = "1";
  std::string contexts = "128";
  int steps = 8;
  bool act_quant = true;            ///< --act-quant on|off, --no-act-quant
  std::string cuda_graphs = "on";   ///< decode steps through CUDA graphs: off, on or both
  bool ordered_splits = false;      ///< CUDA GEMM K splits added in a fixed order
  bool batched_decode = true;       ///< CUDA decode attention batched across sequences
  std::string logits = "device";    ///< CUDA: where a step's logits end up (device or host)
  int timeline = 0;                 ///< CUDA: steps (prefills) traced per row after the timed ones
  bool json = false;
  /// Flags of CUDA runs only, with whether each was given: on the CPU they are refused (they
  /// were ignored, e.g. --cuda-graphs both printed one row per batch).
  std::vector<const CLI::Option*> cuda_only;
};

/// "1,8,32" -> {1, 8, 32}: every item a positive decimal integer, nothing else ("1e2", "2x",
/// "1.5" and the empty items of "1," or "1,,2" are errors, not truncated or skipped).
std::vector<int> parse_list(const std::string& s, const char* what) {
  std::vector<int> out;
  for (std::int64_t v : di::cli::parse_integer_list(s, what, 1, std::numeric_limits<int>::max(),
                                                    "a positive integer"))
    out.push_back(int(v));
  return out;
}

/// The check of --batch and --context: parse_list's rule, as a usage error.
CLI::Validator positive_list() {
  return CLI::Validator(
      [](const std::string& s) {
        return di::cli::integer_list_error(s, 1, std::numeric_limits<int>::max(),
                                           "a positive integer");
      },
      "");
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Random prompt ids in the ordinary-text range of the vocabulary (seeded: same run, same ids).
std::vector<std::int64_t> random_ids(std::mt19937_64& rng, std::int64_t n, std::int64_t vocab) {
  std::uniform_int_distribution<std::int64_t> pick(3, std::min<std::int64_t>(vocab, 128000) - 1);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
  for (auto& id : ids) id = pick(rng);
  return ids;
}

struct bench_batch {
  std::unique_ptr<di::kv_block_pool> pool;
  std::vector<std::unique_ptr<di::sequence_state>> states;
};

bench_batch make_batch(const di::deepseek_model& m, int batch, std::int64_t capacity) {
  bench_batch b;
  const auto& layout = m.layout();
  b.pool = std::make_unique<di::kv_block_pool>(
      layout, int(batch * (capacity / layout.entries_per_block + 2)), m.dev(),
      m.dev().kind == di::device_kind::cpu ? 0 : batch);  // slot arena: batched decode
  for (int i = 0; i < batch; ++i)
    b.states.push_back(std::make_unique<di::sequence_state>(*b.pool, capacity));
  return b;
}

/// One forward over every sequence of the batch with `ids[i]` as its new tokens.
void step(const di::deepseek_model& m, bench_batch& b,
          const std::vector<std::vector<std::int64_t>>& ids) {
  std::vector<std::vector<std::int64_t>> positions(ids.size());
  std::vector<di::forward_request> reqs(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    for (std::size_t t = 0; t < ids[i].size(); ++t)
      positions[i].push_back(b.states[i]->num_tokens() + std::int64_t(t));
    reqs[i].state = b.states[i].get();
    reqs[i].tokens = ids[i];
    reqs[i].positions = positions[i];
    reqs[i].logit_rows = {std::int64_t(ids[i].size()) - 1};
  }
  m.forward(reqs);
  m.synchronize();  // the logits may stay on the device (--logits device): wait for them
}

/// Prefills every sequence on its own in chunks of at most 2048 tokens (bounds the
/// activations of large batches at long contexts).
void prefill_each(const di::deepseek_model& m, bench_batch& b,
                  const std::vector<std::vector<std::int64_t>>& ids) {
  const std::size_t chunk = 2048;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    for (std::size_t at = 0; at < ids[i].size(); at += chunk) {
      std::vector<std::int64_t> part(ids[i].begin() + std::ptrdiff_t(at),
                                     ids[i].begin() + std::ptrdiff_t(std::min(ids[i].size(), at + chunk)));
      std::vector<std::int64_t> positions;
      for (std::size_t t = 0; t < part.size(); ++t)
        positions.push_back(b.states[i]->num_tokens() + std::int64_t(t));
      std::vector<di::forward_request> reqs(1);
      reqs[0].state = b.states[i].get();
      reqs[0].tokens = part;
      reqs[0].positions = positions;
      reqs[0].logit_rows = {std::int64_t(part.size()) - 1};
      m.forward(reqs);
    }
  }
}

/// Page faults so far that had to read from storage. The weights are memory-mapped and need
/// not fit in RAM; a step with such faults is bound by the disk, not by memory bandwidth.
long major_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_majflt;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// A traced summary as the JSON rows carry it (print_timeline's input).
nlohmann::json timeline_json(const di::timeline_summary& t) {
  nlohmann::json kernels = nlohmann::json::array();
  for (const auto& k : t.kernels)
    kernels.push_back({{"name", k.name},
                       {"launches_per_step", k.launches_per_step},
                       {"us_per_step", k.us_per_step},
                       {"own_us_per_step", k.own_us_per_step},
                       {"idle_before_us", k.idle_before_us}});
  nlohmann::json calls = nlohmann::json::array();
  for (const auto& a : t.api)
    calls.push_back({{"name", a.name},
                     {"calls_per_step", a.calls_per_step},
                     {"us_per_step", a.us_per_step},
                     {"max_us", a.max_us}});
  return {{"steps", t.steps},
          {"wall_us", t.wall_us},
          {"lead_us", t.lead_us},
          {"span_us", t.span_us},
          {"busy_us", t.busy_us},
          {"idle_us", t.idle_us},
          {"kernel_us", t.kernel_us},
          {"launches", t.launches},
          {"kernels", kernels},
          {"api_us", t.api_us},
          {"api", calls}};
}

/// DEEPINFER_TIMELINE_SEQUENCE=FILE: the last traced window's kernels in start order, one a line
/// (start and end in us from the window's first kernel start, then the name) -- which launch
/// follows which, for finding neighbours to fuse. Appends, so several rows share one file.
void write_sequence(const char* path, const di::timeline_records& records,
                    const di::timeline_window& w) {
  std::vector<const di::timed_kernel*> in;
  for (const auto& k : records.device)
    if (k.start_ns >= w.begin_ns && k.start_ns < w.end_ns) in.push_back(&k);
  std::sort(in.begin(), in.end(),
            [](const auto* a, const auto* b) { return a->start_ns < b->start_ns; });
  std::FILE* f = std::fopen(path, "a");
  if (!f) {
    fmt::print(stderr, "cannot open {} for the kernel sequence\n", path);
    return;
  }
  const std::uint64_t t0 = in.empty() ? 0 : in.front()->start_ns;
  fmt::print(f, "# window of {} kernels\n", in.size());
  for (const auto* k : in)
    fmt::print(f, "{:.2f}\t{:.2f}\t{}\n", (k->start_ns - t0) / 1e3, (k->end_ns - t0) / 1e3,
               k->name);
  std::fclose(f);
}

/// The device timeline of `steps` calls of `one_step` (kernels recorded by `tracer` since
/// before the row's first step, so that the graphs it captured are traced too): each call is
/// one window of the summary.
template <typename Step>
nlohmann::json trace_steps(int steps, const di::cli::kernel_tracer& tracer, Step&& one_step) {
  tracer.collect();  // what ran before: loading, prefill, the timed steps
  std::vector<di::timeline_window> windows;
  for (int s = 0; s < steps; ++s) {
    const std::uint64_t begin = tracer.now_ns();
    one_step();
    windows.push_back({begin, tracer.now_ns()});
  }
  di::timeline_records records = tracer.collect();
  if (const char* path = std::getenv("DEEPINFER_TIMELINE_SEQUENCE");
      path && *path && !windows.empty())
    write_sequence(path, records, windows.back());
  return timeline_json(di::summarize_timeline(std::move(records), windows));
}

/// The timeline of `steps` more decode steps of batch b.
nlohmann::json trace_decode_steps(const di::deepseek_model& m, bench_batch& b, std::mt19937_64& rng,
                                  int batch, int steps, const di::cli::kernel_tracer& tracer) {
  return trace_steps(steps, tracer, [&] {
    std::vector<std::vector<std::int64_t>> next;
    for (int i = 0; i < batch; ++i) next.push_back(random_ids(rng, 1, m.config().vocab_size));
    step(m, b, next);
  });
}

nlohmann::json bench_decode(const di::deepseek_model& m, int batch, int context, int steps,
                            double copy_gbs, const di::cli::kernel_tracer* tracer,
                            int timeline_steps) {
  std::mt19937_64 rng(1234);
  bench_batch b = make_batch(m, batch, context + steps + 1 + std::max(0, timeline_steps));
  std::vector<std::vector<std::int64_t>> prompt;
  for (int i = 0; i < batch; ++i) prompt.push_back(random_ids(rng, context, m.config().vocab_size));
  prefill_each(m, b, prompt);
  std::vector<double> times;
  long faults = 0;
  for (int s = 0; s < steps + 1; ++s) {
    std::vector<std::vector<std::int64_t>> next;
    for (int i = 0; i < batch; ++i) next.push_back(random_ids(rng, 1, m.config().vocab_size));
    const long faults_before = major_faults();
    double t0 = now_s();
    step(m, b, next);
    if (s == 0) continue;  // the first step warms caches
    times.push_back(now_s() - t0);
    faults += major_faults() - faults_before;
  }
  nlohmann::json timeline;
  if (tracer && timeline_steps > 0)
    timeline = trace_decode_steps(m, b, rng, batch, timeline_steps, *tracer);
  double ms = median(times) * 1e3;
  auto w = di::cli::decode_weight_bytes(m.config(), batch);
  double cache = double(batch) *
                 (double(m.layout().slot_bytes) + m.layout().stream_bytes_per_token() * context);
  double bytes_read = w.weights + cache;
  double gbs = bytes_read / (ms * 1e-3) / 1e9;
  nlohmann::json row = {{"phase", "decode"},
                        {"batch", batch},
                        {"context", context},
                        {"ms_per_step", ms},
                        {"tokens_per_s", batch / (ms * 1e-3)},
                        {"weight_bytes", w.weights},
                        {"cache_bytes", cache},
                        {"bytes_read", bytes_read},
                        {"achieved_gbs", gbs},
                        {"copy_gbs", copy_gbs},
                        {"share_of_copy", gbs / copy_gbs},
                        {"experts_touched_per_layer", w.experts_touched_per_layer},
                        {"disk_faults_per_step", double(faults) / steps}};
  if (!timeline.is_null()) row["timeline"] = timeline;
  return row;
}

nlohmann::json bench_prefill(const di::deepseek_model& m, int batch, int context, int steps,
                             double peak_tflops, const di::cli::kernel_tracer* tracer,
                             int timeline_steps) {
  std::mt19937_64 rng(4321);
  std::vector<double> times;
  // The prefill of fresh sequences (a new batch, so that no step sees another's cache).
  auto prefill_fresh = [&] {
    bench_batch b = make_batch(m, batch, context + 1);
    std::vector<std::vector<std::int64_t>> prompt;
    for (int i = 0; i < batch; ++i)
      prompt.push_back(random_ids(rng, context, m.config().vocab_size));
    double t0 = now_s();
    step(m, b, prompt);
    return now_s() - t0;
  };
  // One untimed forward first (as the decode bench's first step): it grows the device
  // allocator's pools and creates the GEMM handles, which a timed median of two would average in.
  for (int s = 0; s < 1 + std::max(3, steps / 4); ++s) {  // median of >= 3 timed
    const double t = prefill_fresh();
    if (s > 0) times.push_back(t);
  }
  nlohmann::json timeline;
  if (tracer && timeline_steps > 0)
    timeline = trace_steps(timeline_steps, *tracer, [&] { prefill_fresh(); });
  double sec = median(times);
  double tokens = double(batch) * context;
  double gflops = 2.0 * di::cli::active_params_per_token(m.config()) * tokens / sec / 1e9;
  nlohmann::json row = {{"phase", "prefill"},           {"batch", batch},
                        {"context", context},           {"ms_per_step", sec * 1e3},
                        {"tokens_per_s", tokens / sec}, {"gemm_gflops_estimate", gflops}};
  if (peak_tflops > 0) {
    row["bf16_peak_tflops"] = peak_tflops;
    row["share_of_bf16_peak"] = gflops / 1e3 / peak_tflops;
  }
  if (!timeline.is_null()) row["timeline"] = timeline;
  return row;
}

/// --timeline's lines under a row: where a traced step's (or prefill's) device time went, then
/// the kernels that took the most of it.
void print_timeline(const nlohmann::json& t) {
  const double span = t["span_us"].get<double>();
  fmt::print(
      "        timeline of {} traced steps (CUPTI, per step): wall {:.1f} us, host before the "
      "first kernel {:.1f} us, {:.0f} launches\n"
      "        kernels from first start to last end {:.1f} us = device busy {:.1f} + idle "
      "between kernels {:.1f} ({:.0f}%); kernel durations add to {:.1f} us\n",
      t["steps"].get<int>(), t["wall_us"].get<double>(), t["lead_us"].get<double>(),
      t["launches"].get<double>(), span, t["busy_us"].get<double>(), t["idle_us"].get<double>(),
      span > 0 ? 100.0 * t["idle_us"].get<double>() / span : 0.0, t["kernel_us"].get<double>());
  fmt::print(
      "        {:>9} {:>9} {:>9} {:>11}  kernel or copy (by own time: what it added to "
      "the busy time; its duration includes waits for the kernel before)\n",
      "own us", "duration", "launches", "idle before");
  int shown = 0;
  for (const auto& k : t["kernels"]) {
    if (++shown > 30) {
      fmt::print("        ... {} more kernels (--json lists them all)\n", t["kernels"].size() - 30);
      break;
    }
    fmt::print("        {:>9.1f} {:>9.1f} {:>9.1f} {:>11.1f}  {}\n",
               k["own_us_per_step"].get<double>(), k["us_per_step"].get<double>(),
               k["launches_per_step"].get<double>(), k["idle_before_us"].get<double>(),
               k["name"].get<std::string>());
  }
  fmt::print("        host time inside CUDA runtime calls: {:.1f} us per step\n",
             t["api_us"].get<double>());
  fmt::print("        {:>9} {:>9} {:>11}  call\n", "us/step", "calls", "longest us");
  shown = 0;
  for (const auto& a : t["api"]) {
    if (++shown > 12) break;
    fmt::print("        {:>9.1f} {:>9.1f} {:>11.1f}  {}\n", a["us_per_step"].get<double>(),
               a["calls_per_step"].get<double>(), a["max_us"].get<double>(),
               a["name"].get<std::string>());
  }
}

void print_table(const nlohmann::json& rows, const nlohmann::json& env) {
  fmt::print(
      "model {} (loaded in {:.2f} s) | device {} | threads {} | copy bandwidth {:.1f} GB/s "
      "(read+write) | logits on the {}{}\n",
      env["model"].get<std::string>(), env["load_s"].get<double>(),
      env["device"].get<std::string>(), env["threads"].get<int>(), env["copy_gbs"].get<double>(),
      env["logits"].get<std::string>(), env["act_quant"].get<bool>() ? "" : " | act-quant off");
  if (env.contains("timeline_note"))
    fmt::print("(--timeline: the kernel tracer was on for every step, the timed ones included)\n");
  for (const auto& r : rows) {
    if (r["phase"] == "decode") {
      fmt::print(
          "decode  batch {:>4} ctx {:>6}{}: {:>9.2f} ms/step {:>9.1f} tok/s | read {:.3f} GB "
          "weights + {:.3f} GB cache | {:.1f} GB/s = {:.0f}% of copy bandwidth\n",
          r["batch"].get<int>(), r["context"].get<int>(),
          r.contains("cuda_graphs") ? (r["cuda_graphs"].get<bool>() ? " graphs on " : " graphs off")
                                    : "",
          r["ms_per_step"].get<double>(),
          r["tokens_per_s"].get<double>(), r["weight_bytes"].get<double>() / 1e9,
          r["cache_bytes"].get<double>() / 1e9, r["achieved_gbs"].get<double>(),
          100.0 * r["share_of_copy"].get<double>());
      if (r.contains("graph_failure"))
        fmt::print("        CUDA graph capture failed, steps ran eagerly: {}\n",
                   r["graph_failure"].get<std::string>());
      if (r.contains("timeline")) print_timeline(r["timeline"]);
      // (Printed "0 page faults per step ... do not all fit in RAM" for 0.125 a step: a cold
      // page cache's few reads in one of eight steps, on a model of 83 MB.)
      if (const double faults = r["disk_faults_per_step"].get<double>(); faults > 0)
        fmt::print(
            "        {:.3g} major page faults per step read weights from storage during the timed "
            "steps ({}): the step time includes storage reads\n",
            faults,
            faults < 1 ? "a cold page cache, most likely: run again"
                       : "a cold page cache, or weights that do not all fit in RAM");
    } else {
      fmt::print(
          "prefill batch {:>4} ctx {:>6}: {:>9.2f} ms/step {:>9.1f} tok/s | ~{:.1f} GFLOP/s (2 x "
          "active params)\n",
          r["batch"].get<int>(), r["context"].get<int>(), r["ms_per_step"].get<double>(),
          r["tokens_per_s"].get<double>(), r["gemm_gflops_estimate"].get<double>());
      if (r.contains("share_of_bf16_peak"))
        fmt::print("        = {:.1f}% of the cuBLAS bf16 peak measured in this run ({:.0f} "
                   "TFLOP/s)\n",
                   100.0 * r["share_of_bf16_peak"].get<double>(),
                   r["bf16_peak_tflops"].get<double>());
      if (r.contains("timeline")) print_timeline(r["timeline"]);
    }
  }
}

void run_bench(const bench_options& o, bool decode) {
  DI_CHECK(o.logits == "device" || o.logits == "host", "--logits must be device or host, got '{}'",
           o.logits);
  DI_CHECK(o.cuda_graphs == "off" || o.cuda_graphs == "on" || o.cuda_graphs == "both",
           "--cuda-graphs must be off, on or both, got '{}'", o.cuda_graphs);
  auto batches = parse_list(o.batches, "--batch");
  auto contexts = parse_list(o.contexts, "--context");
  di::cli::check_device_choice(o.device, o.cuda_only);  // before the model loads
  const double load_start = now_s();
  auto loaded = di::cli::load_model_for_generation(o.model, o.act_quant);
  const di::device dev = di::cli::place_model(*loaded.model, o.device, o.device_weights);
  const double load_s = now_s() - load_start;
  di::deepseek_model* model = loaded.model.get();
  // Every row's sequences must fit the model's positions: checked before any row runs (a
  // decode past them used to run on, silently, until something gave out).
  const std::int64_t positions = model->config().max_position_embeddings;
  for (int c : contexts) {
    const std::int64_t reach =
        decode ? std::int64_t(c) + o.steps + 1 + std::max(0, o.timeline) : std::int64_t(c) + 1;
    DI_CHECK(positions <= 0 || reach <= positions,
             "--context {}: the sequences reach {} positions{}; the model has {} "
             "(max_position_embeddings)",
             c, reach, decode ? " with --steps and --timeline" : "", positions);
  }
  // Each row's cache pool, estimated before it is allocated (a --batch of 1e9 overflowed the
  // pool's block count, or ended in "std::bad_alloc" after the model had loaded).
  const di::cache_layout& layout = model->layout();
  for (int b : batches)
    for (int c : contexts) {
      const std::int64_t capacity = std::int64_t(c) + o.steps + 1 + std::max(0, o.timeline);
      const std::int64_t blocks = std::int64_t(b) * (capacity / layout.entries_per_block + 2);
      double bytes = double(b) * double(layout.slot_bytes);
      for (int s = 0; s < int(layout.streams.size()); ++s)
        bytes += double(blocks) * double(layout.block_bytes(s));
      const double ram = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
      DI_CHECK(blocks <= std::numeric_limits<int>::max() &&
                   (dev.kind != di::device_kind::cpu || ram <= 0 || bytes <= ram),
               "--batch {} --context {}: the caches alone need {:.1f} GB{}", b, c, bytes / 1e9,
               dev.kind == di::device_kind::cpu && ram > 0
                   ? fmt::format(", more than this host's {:.1f} GB of memory", ram / 1e9)
                   : std::string(" (too many cache blocks)"));
    }
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
#endif
  const bool on_gpu = dev.kind == di::device_kind::cuda;
  std::vector<bool> graph_modes{o.cuda_graphs == "on"};
  if (o.cuda_graphs == "both") graph_modes = {false, true};
  if (!on_gpu || !decode) graph_modes = {false};  // graphs: CUDA decode steps only
  DI_CHECK(!o.ordered_splits || on_gpu, "--ordered-splits needs --device cuda");
  DI_CHECK(o.timeline == 0 || on_gpu, "--timeline traces CUDA steps: it needs --device cuda");
  // Started before the rows' first steps, so that kernels of the graphs they capture are
  // recorded as well; the tracer's own cost is then part of every timed step too.
  std::optional<di::cli::kernel_tracer> tracer;
  if (o.timeline > 0) tracer = di::cli::start_kernel_tracer();
  if (on_gpu) di::cli::set_ordered_gemm_splits(o.ordered_splits);
  const double copy_gbs =
      on_gpu ? di::cli::measure_device_copy_gbs(dev) : di::cli::measure_copy_bandwidth();
  const double peak_tflops = on_gpu && !decode ? di::cli::measure_device_bf16_tflops(dev) : 0.0;
  nlohmann::json env = {{"model", o.model},
                        {"device", o.device},
                        {"threads", threads},
                        {"load_s", load_s},
                        {"copy_gbs", copy_gbs},
                        {"act_quant", o.act_quant},
                        {"ordered_splits", o.ordered_splits},
                        {"batched_decode", o.batched_decode},
                        {"logits", on_gpu ? o.logits : "host"}};
  nlohmann::json rows = nlohmann::json::array();
  for (int b : batches)
    for (int c : contexts)
      for (bool graphs : graph_modes) {
        di::forward_options fo = model->options();
        fo.cuda_graphs = graphs;
        fo.batched_decode = o.batched_decode;
        fo.logits_to_host = o.logits == "host";
        model->set_options(fo);
        // Long rows (a CPU prefill of thousands of tokens) take minutes: say what runs.
        std::fprintf(stderr, "bench: %s batch %d context %d%s...\n", decode ? "decode" : "prefill",
                     b, c, on_gpu && decode ? (graphs ? " graphs on" : " graphs off") : "");
        nlohmann::json row = decode ? bench_decode(*model, b, c, o.steps, copy_gbs,
                                                   tracer ? &*tracer : nullptr, o.timeline)
                                    : bench_prefill(*model, b, c, o.steps, peak_tflops,
                                                    tracer ? &*tracer : nullptr, o.timeline);
        if (decode && on_gpu) {
          row["cuda_graphs"] = graphs;
          row["graph_pieces"] = model->captured_graphs();
          if (!model->graph_failure().empty()) row["graph_failure"] = model->graph_failure();
        }
        rows.push_back(row);
      }
  if (tracer) env["timeline_note"] = "steps timed with the kernel tracer on";
  if (o.json) {
    env["results"] = rows;
    fmt::print("{}\n", env.dump(2));
  } else {
    print_table(rows, env);
  }
}

/// The options of both benchmarks; `decode`: also those of decode steps alone (bench prefill
/// listed --cuda-graphs, --batched-decode and --per-sequence-decode, and took them silently).
void add_common(CLI::App* sub, const std::shared_ptr<bench_options>& o, bool decode) {
  sub->add_option("--model", o->model, "Checkpoint folder")->required();
  sub->add_option("--device", o->device, "Backend: cpu, cuda or cuda:N")->capture_default_str();
  o->cuda_only.push_back(
      sub->add_option("--device-weights", o->device_weights,
                      "CUDA weight layout: stored (FP8/FP4 as the checkpoint stores them) or f32")
          ->capture_default_str());
  // Values out of range are usage errors (exit 2), as for every other option; they were found
  // in run_bench and exited 1.
  sub->add_option("--batch", o->batches, "Comma-separated batch sizes")
      ->check(positive_list())
      ->capture_default_str();
  sub->add_option("--context", o->contexts,
                  "Comma-separated context lengths (tokens already in "
                  "each sequence for decode; prompt length for prefill)")
      ->check(positive_list())
      ->capture_default_str();
  sub->add_option("--steps", o->steps,
                  "Timed steps: decode steps, or prefills for bench prefill (median reported)")
      ->check(di::cli::integer_range<int>(1))
      ->capture_default_str();
  // generate's spellings: --act-quant on|off and --no-act-quant (bench had only the flags
  // --act-quant / --no-act-quant, so `--act-quant off` was a usage error)
  di::cli::add_act_quant_flags(*sub, o->act_quant);
  sub->add_flag("--ordered-splits", o->ordered_splits,
                "CUDA: add the K splits of decode GEMMs in a fixed order (bit-reproducible, "
                "batch-invariant) instead of with atomic adds");
  if (decode) {
    o->cuda_only.push_back(
        sub->add_option("--cuda-graphs", o->cuda_graphs,
                        "CUDA decode steps through captured graphs: off, on, or both (each "
                        "batch timed both ways)")
            ->capture_default_str());
    auto* bd = sub->add_flag("--batched-decode", o->batched_decode,
                             "CUDA decode: each layer's attention as a few launches over the "
                             "whole batch (the default)");
    o->cuda_only.push_back(bd);
    o->cuda_only.push_back(sub->add_flag_callback(
                                  "--per-sequence-decode", [o] { o->batched_decode = false; },
                                  "CUDA decode: each layer's attention per sequence (the "
                                  "reference path)")
                               ->excludes(bd));
  }
  o->cuda_only.push_back(
      sub->add_option("--logits", o->logits,
                      "CUDA: a step ends with its logits on the device (device: the forward "
                      "alone, as transformers' model() call is timed) or copied to host memory "
                      "(host: adds the copy, [batch, vocab] f32)")
          ->capture_default_str());
  sub->add_flag("--json", o->json, "Print one JSON object");
}

/// --timeline, on both benchmarks (`what`: the steps it traces).
void add_timeline(CLI::App* sub, const std::shared_ptr<bench_options>& o, const char* what) {
  sub->add_option(
         "--timeline", o->timeline,
         fmt::format("CUDA: after each row's timed {0}, trace this many more with CUPTI and "
                     "print where one's device time went -- busy, idle between "
                     "kernels, time per kernel (the tracer runs from the start, so the "
                     "timed {0} carry its cost: compare them with a run without it)",
                     what))
      ->check(di::cli::integer_range<int>(0))
      ->capture_default_str();
}

void setup_bench(CLI::App& app) {
  auto* bench =
      app.add_subcommand("bench", "Benchmark the forward pass against measured hardware limits");
  bench->require_subcommand(1);
  auto od = std::make_shared<bench_options>();
  auto* decode =
      bench->add_subcommand("decode", "Time one-token decode steps of a batch of sequences");
  add_common(decode, od, true);
  add_timeline(decode, od, "steps");
  decode->callback([od] { run_bench(*od, true); });
  auto op = std::make_shared<bench_options>();
  auto* prefill = bench->add_subcommand("prefill", "Time the prefill of a batch of prompts");
  add_common(prefill, op, false);
  add_timeline(prefill, op, "prefills");
  prefill->callback([op] { run_bench(*op, false); });
  di::cli::add_bench_serve(bench);
  bench->footer(
      "Decode reports the bytes a step reads -- weights in the checkpoint's stored format "
      "(the CPU backend decodes FP8/FP4/BF16 inside its GEMMs) plus the KV caches -- and "
      "the achieved bandwidth as a share of the copy bandwidth measured in the same run. "
      "Routed experts count as the expected number of distinct experts the batch touches "
      "under uniform routing.");
}

}  // namespace

DI_REGISTER_COMMAND(setup_bench);
