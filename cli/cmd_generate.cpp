// `deepinfer generate`: offline generation of one completion, through the actor runtime in
// this process (cli/detail/offline_generation.hpp). Text streams to the terminal as it
// becomes final; --json prints one object at the end.
// Without --model it uses a built-in default: the tiny-v41 preset, generated once into the
// user's cache folder.
#include "cli/command.hpp"
#include "cli/detail/act_quant_flags.hpp"
#include "cli/detail/device_setup.hpp"
#include "cli/detail/json_input.hpp"
#include "cli/detail/offline_generation.hpp"
#include "cli/detail/option_checks.hpp"
#include "cli/detail/sampling_flags.hpp"
#include "cli/detail/schema_warnings.hpp"
#include "cli/detail/token_id_list.hpp"
#include "common/error.hpp"
#include "common/mapped_file.hpp"
#include "config/cluster_config.hpp"
#include "model/chat_template/openai_messages.hpp"
#include "model/chat_template/tokenizer_chat_template.hpp"
#include "model/make_model/make_model.hpp"
#include "runtime/grammar/response_format.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

#include <unistd.h>

namespace {

namespace fs = std::filesystem;

struct generate_options {
  std::string model;
  std::optional<std::string> prompt;  ///< "" is a prompt too: BOS alone
  std::optional<std::string> prompt_ids;
  std::string chat;
  bool act_quant = true;  ///< --act-quant on|off, --no-act-quant
  std::string cuda_graphs = "on";
  std::string device = "cpu";
  std::string device_weights = "stored";
  bool json = false;
  bool no_stats = false;
  di::cli::sampling_flags sampling;
  std::string response_format;
  int n = 1;
  /// Flags of CUDA runs only: refused on the CPU (they were ignored there).
  std::vector<const CLI::Option*> cuda_only;
};

/// $DEEPINFER_CACHE, else $XDG_CACHE_HOME/deepinfer, else ~/.cache/deepinfer.
fs::path cache_dir() {
  // An empty value is unset (the XDG rule; it was a folder relative to the working directory).
  if (const char* d = std::getenv("DEEPINFER_CACHE"); d != nullptr && *d != '\0') return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0')
    return fs::path(x) / "deepinfer";
  if (const char* h = std::getenv("HOME")) return fs::path(h) / ".cache" / "deepinfer";
  return fs::temp_directory_path() / "deepinfer";
}

/// Writes the built-in default model (tiny-v41, seed 0) into `dir`.
void generate_default_model(const fs::path& dir) {
  di::make_model_options o;
  o.preset = "tiny-v41";
  o.out_dir = dir;
  o.force = true;
  o.show_progress = false;
  di::make_model(o);
}

/// The built-in default model: tiny-v41 (seed 0), generated on first use.
std::string default_model() {
  fs::path dir = cache_dir() / "models" / "tiny-v41";
  if (!fs::exists(dir / "config.json")) {
    fmt::print(stderr, "no --model given: generating the built-in tiny-v41 model into {}\n", dir.string());
    generate_default_model(dir);
  }
  return dir.string();
}

/// The model of --model, or the built-in one -- generated again when its cached copy does not
/// load (a damaged file there failed every run with no word of the cache).
di::cli::loaded_model load_model(const std::string& given, bool act_quant, std::string& dir) {
  dir = given.empty() ? default_model() : given;
  if (!given.empty()) return di::cli::load_model_for_generation(dir, act_quant);
  try {
    return di::cli::load_model_for_generation(dir, act_quant);
  } catch (const di::error& e) {
    fmt::print(stderr, "the cached built-in model in {} does not load ({}): generating it again\n",
               dir, e.what());
    generate_default_model(dir);
    return di::cli::load_model_for_generation(dir, act_quant);
  }
}

std::vector<std::int32_t> prompt_tokens(const generate_options& o, const di::cli::loaded_model& m,
                                        const std::string& model_dir) {
  int given = int(o.prompt.has_value()) + int(o.prompt_ids.has_value()) + int(!o.chat.empty());
  DI_CHECK(given == 1, "give exactly one of --prompt, --prompt-ids and --chat");
  if (o.prompt_ids) return di::cli::parse_token_id_list(*o.prompt_ids);
  if (o.prompt) return m.tokenizer->encode(*o.prompt, {.add_bos = true});
  std::string text = o.chat == "-" ? std::string(std::istreambuf_iterator<char>(std::cin), {})
                                   : di::read_text_file(o.chat);
  const nlohmann::ordered_json doc = di::cli::parse_json_input(text, "--chat " + o.chat);
  di::chat_request req;
  const nlohmann::ordered_json& messages =
      doc.is_object() && doc.contains("messages") ? doc["messages"] : doc;
  DI_CHECK(messages.is_array(), "--chat {}: expected a JSON array of messages", o.chat);
  if (doc.is_object()) {  // the chat endpoint's template fields; sampling comes from the flags
    for (const auto& [key, value] : doc.items()) {
      if (key == "messages") continue;
      if (key == "tools") {
        DI_CHECK(value.is_array(), "--chat {}: 'tools' must be a list", o.chat);
        req.tools = value;
      } else if (key == "chat_template_kwargs") {
        DI_CHECK(value.is_object(), "--chat {}: 'chat_template_kwargs' must be an object", o.chat);
        req.kwargs = value;
      } else if (key == "add_generation_prompt" || key == "continue_final_message") {
        DI_CHECK(value.is_boolean(), "--chat {}: '{}' must be a boolean", o.chat, key);
        (key == "add_generation_prompt" ? req.add_generation_prompt : req.continue_final_message) =
            value.get<bool>();
      } else {
        DI_FAIL(
            "--chat {}: '{}' is not read from the file (it takes messages, tools, "
            "chat_template_kwargs, add_generation_prompt and continue_final_message; "
            "sampling comes from the command's flags)",
            o.chat, key);
      }
    }
  }
  // The server's rules (roles, content), so that a message the template would drop is an error.
  req.messages =
      di::openai_chat_messages(messages, [&](const std::string& param, const std::string& why) {
        DI_FAIL("--chat {}: {}: {}", o.chat, param, why);
      });
  auto tmpl = di::tokenizer_chat_template::load(model_dir);
  return m.tokenizer->encode(tmpl.apply(req));  // the template writes BOS itself
}

nlohmann::json top_list(const std::vector<di::runtime::token_logprob>& top) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& t : top) list.push_back({t.id, t.logprob});
  return list;
}

void print_json(const std::vector<std::int32_t>& prompt, const di::cli::generation_result& r,
                const generate_options& o) {
  nlohmann::json j;
  j["prompt_ids"] = prompt;
  j["output_ids"] = r.output_ids;
  j["text"] = r.text;
  j["finish_reason"] = std::string(di::runtime::to_string(r.finish));
  j["seed"] = r.seed;
  if (o.sampling.logprobs) {
    j["logprobs"] = nlohmann::json::array();
    j["token_logprobs"] = nlohmann::json::array();
    for (const auto& p : r.logprobs) {
      j["logprobs"].push_back(top_list(p.top));
      j["token_logprobs"].push_back(p.logprob);
    }
  }
  if (o.sampling.prompt_logprobs) {
    j["prompt_logprobs"] = nlohmann::json::array();
    j["prompt_token_logprobs"] = nlohmann::json::array();
    for (const auto& p : r.prompt_logprobs) {
      j["prompt_logprobs"].push_back(p ? top_list(p->top) : nlohmann::json(nullptr));
      j["prompt_token_logprobs"].push_back(p ? nlohmann::json(p->logprob) : nlohmann::json(nullptr));
    }
  }
  fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void run_generate(generate_options& o) {
  DI_CHECK(o.sampling.max_tokens > 0, "--max-tokens must be positive, got {}",
           o.sampling.max_tokens);
  DI_CHECK(o.json || (!o.sampling.logprobs && !o.sampling.prompt_logprobs),
           "--logprobs and --prompt-logprobs need --json (text output has no place for them)");
  di::cli::check_device_choice(o.device, o.cuda_only);  // before the model loads
  std::string dir;
  di::cli::loaded_model m = load_model(o.model, o.act_quant, dir);
  di::cli::place_model(*m.model, o.device, o.device_weights);
  DI_CHECK(o.cuda_graphs == "on" || o.cuda_graphs == "off", "--cuda-graphs must be on or off, "
           "got '{}'", o.cuda_graphs);
  di::forward_options fo = m.model->options();
  fo.cuda_graphs = o.cuda_graphs == "on";
  m.model->set_options(fo);
  di::cli::generation_request req;
  req.prompt_ids = prompt_tokens(o, m, dir);
  req.params = o.sampling.to_params();
  if (!o.response_format.empty()) {
    const auto format = di::grammar::parse_response_format(o.response_format);
    req.params.response_format = di::grammar::to_inline_spec(format);
    di::cli::enable_structured_output(m);
    // Compiled here (the runner then finds it in the shared cache), so that an error names
    // the flag and its file rather than failing the generation; the warnings are that compile's
    // (they came from a second run of the schema's front end, number automata and all).
    std::vector<std::string> warnings;
    try {
      warnings = m.grammars
                     ->get_with_warnings(
                         di::grammar::parse_inline_response_format(req.params.response_format),
                         m.grammar_vocab)
                     .warnings;
    } catch (const di::error& e) {
      DI_FAIL("--response-format {}: {}", o.response_format, e.what());
    }
    di::cli::print_schema_warnings(warnings, "--response-format " + o.response_format);
  }
  if (isatty(STDERR_FILENO))  // a long prefill shows how far it has come, on the terminal only
    req.on_prefill_progress = [](const di::cli::prefill_progress& p) {
      if (p.is_final)
        fmt::print(stderr, "\r\033[K");  // the line goes before the text comes
      else
        fmt::print(stderr, "\rprefill: {}/{} prompt tokens ({:.0f} s)\033[K", p.done, p.total,
                   p.seconds);
      std::fflush(stderr);
    };
  if (!o.json)
    req.on_text = [](const std::string& text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    };
  DI_CHECK(o.n >= 1, "--n must be at least 1, got {}", o.n);
  // The n generations are one batch of one in-process group, whose router takes at most
  // router.max_live_requests at once (--n 1000000 grew memory for minutes instead).
  const int max_n = di::cluster_config{}.router.max_live_requests;
  DI_CHECK(o.n <= max_n, "--n must be at most {} (one batch), got {}", max_n, o.n);
  DI_CHECK(o.n == 1 || o.json, "--n above 1 needs --json (one object per line)");
  // --n: one cluster, the n generations decoded as one batch; seeds seed, seed + 1, ...
  const std::vector<di::cli::generation_result> results = di::cli::generate_n(m, req, o.n);
  if (o.json) {
    for (const auto& r : results) print_json(req.prompt_ids, r, o);
    return;
  }
  const di::cli::generation_result& r = results.front();
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!o.no_stats) {
    // The first token comes from the prefill (its time is the prefill's); the decode time runs
    // from it to the last, so the tokens decoded in it are the others.
    const std::size_t decoded = r.output_ids.empty() ? 0 : r.output_ids.size() - 1;
    double decode_tps = r.decode_seconds > 0 ? double(decoded) / r.decode_seconds : 0;
    fmt::print(stderr,
               "[{} prompt tokens in {:.2f} s ({:.1f} tok/s, with the first output token); {} "
               "generated, the {} after the first in {:.2f} s ({:.1f} tok/s); finish_reason={}; "
               "seed={}]\n",
               req.prompt_ids.size(), r.prefill_seconds,
               double(req.prompt_ids.size()) / std::max(r.prefill_seconds, 1e-9),
               r.output_ids.size(), decoded, r.decode_seconds, decode_tps,
               di::runtime::to_string(r.finish), r.seed);
  }
}

void setup_generate(CLI::App& app) {
  auto o = std::make_shared<generate_options>();
  auto* sub = app.add_subcommand("generate",
                                 "Generate a completion (on the CPU by default, or --device cuda)");
  sub->add_option("--model", o->model,
                  "Checkpoint folder (default: the built-in tiny-v41, generated on first use "
                  "into $DEEPINFER_CACHE, else $XDG_CACHE_HOME/deepinfer, else "
                  "~/.cache/deepinfer)")
      ->check(di::cli::not_empty("leave --model out for the built-in model"));
  sub->add_option("--prompt", o->prompt, "Prompt text (BOS is added as tokenizer_config.json says)");
  sub->add_option("--prompt-ids", o->prompt_ids, "Prompt as comma-separated token ids");
  sub->add_option("--chat", o->chat, "JSON file of chat messages (or '-' for stdin), rendered with "
                  "the model's chat template and a generation prompt");
  di::cli::add_sampling_flags(*sub, o->sampling);
  sub->add_option(
         "--n", o->n,
         "Generations of the same prompt, decoded together as one batch "
         "(with --json: one line each, in order; with --seed S their seeds are S, S+1, ...)")
      ->check(di::cli::integer_range(1));
  sub->add_option(
      "--response-format", o->response_format,
      std::string("Structured output: ") + di::grammar::k_cli_response_formats +
          "; JSON kinds take +compact, +pretty, +any (the default), +lenient or +extra_keys "
          "(json_schema+compact:FILE; +extra_keys: an object may get keys its schema does not "
          "declare and an array items after prefixItems, where the schema says nothing of them, "
          "as JSON Schema allows; by default they are not written, as xgrammar's strict mode). "
          "The text is guaranteed to match; it ends when the grammar is complete");
  di::cli::add_act_quant_flags(*sub, o->act_quant);  // bench's spellings too
  sub->add_option("--device", o->device, "Where the forward runs: cpu, cuda or cuda:N (weights "
                  "resident on the GPU)")->capture_default_str();
  o->cuda_only.push_back(
      sub->add_option("--device-weights", o->device_weights,
                      "CUDA weight layout: stored (FP8/FP4 as the checkpoint stores them) or f32 "
                      "(decoded exactly)")
          ->capture_default_str());
  o->cuda_only.push_back(sub->add_option("--cuda-graphs", o->cuda_graphs,
                                         "CUDA: decode steps replay captured graphs (on) or "
                                         "launch every kernel (off)")
                             ->capture_default_str());
  sub->add_flag("--json", o->json, "Print one JSON object (prompt_ids, output_ids, text, "
                "finish_reason, logprobs, prompt_logprobs) instead of streaming text");
  sub->add_flag("--no-stats", o->no_stats,
                "Do not print the timing line on stderr (--json never prints it)");
  sub->callback([o] { run_generate(*o); });
}

}  // namespace

DI_REGISTER_COMMAND(setup_generate);
