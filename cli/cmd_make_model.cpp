// `deepinfer make-model --preset NAME --out DIR [--seed S] [--force]`: writes a random-weight
// checkpoint in the official DeepSeek format (see model/make_model). `--dry-run` prints what
// a preset would contain (parameters, bytes per dtype, shards) without writing anything, and
// `--list` names the presets.
#include "cli/command.hpp"
#include "cli/detail/sampling_flags.hpp"
#include "common/error.hpp"
#include "model/make_model/make_model.hpp"

#include <fmt/format.h>

#include <charconv>
#include <csignal>
#include <cstdlib>

#include <memory>

namespace {

struct make_model_cli_options {
  std::string preset;
  std::string out;
  std::uint64_t seed = 0;
  bool force = false;
  bool dry_run = false;
  bool list = false;
  bool quiet = false;
  std::uint64_t max_shard_bytes = di::default_max_shard_bytes;
};

/// 1234567 -> "1,234,567"
std::string grouped(std::uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

void print_presets() {
  for (const auto& p : di::model_presets()) fmt::print("{:<14} {}\n", p.name, p.summary);
}

void print_plan(const di::model_preset& preset, const di::model_config& c,
                const di::model_plan& plan, std::uint64_t max_shard_bytes) {
  fmt::print("preset:       {}\n", preset.name);
  fmt::print("type:         {}  ({} layers, hidden {}, vocab {}, compress ratios [{}])\n",
             c.model_type, c.num_layers, c.hidden_size, c.vocab_size,
             fmt::join(c.compress_ratios, ", "));
  fmt::print("about:        {}\n", preset.description);
  fmt::print("tensors:      {} in {} file(s) of at most {:.2f} GiB of tensor data\n",
             plan.num_stored_tensors(), plan.shard_files.size(),
             double(max_shard_bytes) / (1u << 30));
  fmt::print("parameters (FP4 counted as two per byte, scales excluded):\n");
  for (const auto& [group, n] : plan.params_per_group)
    fmt::print("  {:<16} {:>18}\n", di::to_string(group), grouped(std::uint64_t(n)));
  fmt::print("  {:<16} {:>18}\n", "total", grouped(std::uint64_t(plan.total_params)));
  fmt::print("  {:<16} {:>18}\n", "active/token",
             grouped(std::uint64_t(plan.active_params_per_token)));
  fmt::print("bytes per dtype:\n");
  for (const auto& [t, bytes] : plan.bytes_per_dtype)
    fmt::print("  {:<16} {:>18}\n", di::dtype_name(t), grouped(bytes));
  fmt::print("  {:<16} {:>18}  ({:.2f} GB)\n", "total", grouped(plan.total_bytes),
             double(plan.total_bytes) / 1e9);
}

volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_interrupt(int sig) {
  g_interrupted = sig;
}

void run_make_model(const make_model_cli_options& o) {
  if (o.list) {
    print_presets();
    return;
  }
  DI_CHECK(!o.preset.empty(), "make-model: --preset is required (or --list)");
  const di::model_preset& preset = di::find_model_preset(o.preset);
  if (o.dry_run) {
    di::model_config config = di::preset_model_config(preset);
    print_plan(preset, config, di::plan_model(config, o.max_shard_bytes), o.max_shard_bytes);
    return;
  }
  DI_CHECK(!o.out.empty(), "make-model: --out DIR is required (or --dry-run)");
  // SIGINT/SIGTERM stop the writing and remove the files written so far (they were left
  // behind: GBs of shards without a config.json, and the next run said "folder is not empty").
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  di::make_model_result r;
  try {
    r = di::make_model({.preset = o.preset,
                        .out_dir = o.out,
                        .seed = o.seed,
                        .force = o.force,
                        .max_shard_bytes = o.max_shard_bytes,
                        .tokenizer_dir = {},  // the bundled tokenizer
                        .show_progress = !o.quiet,
                        .scales = {},
                        .cancel = &g_interrupted});
  } catch (const di::error&) {
    if (g_interrupted == 0) throw;
    // The shards written so far are gone (make_model removed them); end as the signal would.
    std::fprintf(stderr, "make-model: interrupted; removed the files it had written\n");
    const int sig = int(g_interrupted);
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    throw;
  }
  if (o.quiet) return;
  fmt::print("wrote {} (seed {}) to {}: {} tensors in {} safetensors file(s), {} bytes, {:.2f}s\n",
             o.preset, o.seed, o.out, r.plan.num_stored_tensors(), r.plan.shard_files.size(),
             grouped(r.plan.total_bytes), r.seconds);
}

void setup_make_model(CLI::App& app) {
  auto opts = std::make_shared<make_model_cli_options>();
  auto* sub = app.add_subcommand(
      "make-model", "Write a random-weight checkpoint of a preset in the official DeepSeek format");
  sub->add_option("--preset", opts->preset, "Model shape (see --list)");
  sub->add_option("--out", opts->out, "Output folder (created if missing)");
  sub->add_option("--seed", opts->seed,
                  "Seed of the weights in [0, 2^64); the same seed gives the same bytes")
      ->capture_default_str();
  sub->add_flag("--force", opts->force,
                "Replace the checkpoint files (config, tokenizer, *.safetensors, index) of a "
                "non-empty output folder");
  sub->add_flag("--dry-run", opts->dry_run,
                "Print the parameters and bytes per dtype the preset would have; write nothing");
  sub->add_flag("--list", opts->list, "List the presets");
  sub->add_flag("--quiet", opts->quiet, "No progress bar and no summary line");
  sub->add_option("--max-shard-size", opts->max_shard_bytes,
                  "Largest safetensors file, e.g. 4GiB (default) or 500MB")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {  // the size parser wraps "-5" to 2^64 - 5
            if (s.find('-') != std::string::npos) return "must not be negative";
            // ... and saturated a number past 2^64 - 1 ("18446744073709551616" was taken as
            // 2^64 - 1, where every other unsigned option refuses it)
            const std::size_t start = s.find_first_not_of(" \t");
            const std::size_t end = s.find_first_not_of("0123456789", start);
            std::uint64_t value = 0;
            const std::string range = "'" + s + "' is out of range [1, 18446744073709551615] bytes";
            if (start != std::string::npos &&
                std::from_chars(s.data() + start,
                                s.data() + (end == std::string::npos ? s.size() : end), value)
                        .ec == std::errc::result_out_of_range)
              return range;
            // Zero in any unit ("0", "0MB", "0.0GiB") was refused only after the parse, as
            // "the largest shard must hold at least one byte", naming no option (exit 1).
            char* number_end = nullptr;
            const double number = std::strtod(s.c_str(), &number_end);
            if (number_end != s.c_str() && number == 0) return range;
            return {};
          },
          "SIZE"))
      ->transform(CLI::AsSizeValue(true));
  std::string names;
  for (const auto& p : di::model_presets()) names += (names.empty() ? "" : ", ") + p.name;
  sub->footer("Presets: " + names +
              ". The checkpoint folder holds config.json, "
              "model*.safetensors (+ model.safetensors.index.json), tokenizer.json and "
              "tokenizer_config.json; `deepinfer inspect --model DIR` verifies it.");
  sub->callback([opts] { run_make_model(*opts); });
}

}  // namespace

DI_REGISTER_COMMAND(setup_make_model);
