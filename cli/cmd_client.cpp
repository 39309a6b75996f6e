// `deepinfer client --connect HOST:PORT (--prompt TEXT | --prompt-ids IDS | --file FILE.jsonl |
// --status)`: submits requests to a running cluster through a client actor and streams the
// results: text as it arrives for one --prompt, else one JSON line per request in the format
// of `generate --json` (plus "index" for files, "error" when a request failed or was refused),
// with a progress bar on stderr for files (lines, when stderr is not a terminal). --status
// prints the cluster's nodes, groups and counters as JSON. Exit code 1 when any request ended
// with an error.
#include "actors/client_actor.hpp"
#include "actors/node_runtime.hpp"
#include "cli/command.hpp"
#include "cli/detail/json_input.hpp"
#include "cli/detail/option_checks.hpp"
#include "cli/detail/sampling_flags.hpp"
#include "cli/detail/token_id_list.hpp"
#include "common/error.hpp"
#include "common/json_brief.hpp"
#include "common/mapped_file.hpp"
#include "runtime/sequence_status.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>

namespace {

using json = nlohmann::json;

struct client_options {
  std::string connect;
  std::optional<std::string> prompt;
  std::optional<std::string> prompt_ids;
  std::string file;
  bool status = false;
  bool json_out = false;
  int concurrency = 8;
  std::string cluster_name = "deepinfer";
  std::int64_t max_message_bytes = di::default_max_message_bytes;
  di::tls_section tls;
  di::cli::sampling_flags sampling;
  int connection_timeout_ms = 10000;
};

/// One request to send, or the reason its input line was rejected.
struct input_item {
  std::size_t index = 0;
  std::size_t line = 0;  ///< its line of --file (from 1)
  std::optional<di::actors::submit_request> request;
  std::string error;
};

di::actors::submit_request base_request(const client_options& o) {
  di::actors::submit_request r;
  r.params = o.sampling.to_params();
  return r;
}

/// A JSON line's integer field in [lo, hi]: a float, or a value out of range, is an error
/// naming the field (nlohmann's get<int>() wrapped 2^32 + 5 to 5 and truncated 2.9 to 2).
template <class T>
T integer_field(const json& v, const std::string& key, T lo = std::numeric_limits<T>::min(),
                T hi = std::numeric_limits<T>::max()) {
  DI_CHECK(v.is_number_integer(), "\"{}\" must be an integer, got {}", key, di::json_brief(v));
  const bool fits = v.is_number_unsigned()
                        ? v.get<std::uint64_t>() <= std::uint64_t(hi)
                        : v.get<std::int64_t>() >= std::int64_t(lo) &&
                              (hi > T(std::numeric_limits<std::int64_t>::max()) ||
                               v.get<std::int64_t>() <= std::int64_t(hi));
  DI_CHECK(fits, "\"{}\" must be in [{}, {}], got {}", key, lo, hi, di::json_brief(v));
  return v.is_number_unsigned() ? T(v.get<std::uint64_t>()) : T(v.get<std::int64_t>());
}

std::vector<std::int32_t> integer_list(const json& v, const std::string& key) {
  DI_CHECK(v.is_array(), "\"{}\" must be a list of token ids", key);
  std::vector<std::int32_t> ids;
  for (const json& x : v) ids.push_back(integer_field<std::int32_t>(x, key, 0));
  return ids;
}

/// What a JSON line's field of a non-integer type holds, for its error ("a string").
const char* expected_type(const std::string& key) {
  if (key == "prompt" || key == "cache_salt") return "a string";
  if (key == "stop") return "a string or a list of strings";
  if (key == "ignore_eos" || key == "skip_special_tokens" || key == "include_stop_str_in_output")
    return "true or false";
  return "a number";  // temperature, top_p, min_p and the penalties
}

/// Applies one JSON line's fields over the command line's defaults.
void apply_line(const json& j, di::actors::submit_request& r) {
  DI_CHECK(j.is_object(), "expected a JSON object");
  auto& p = r.params;
  for (const auto& [key, v] : j.items()) try {
      if (key == "prompt")
        r.prompt = v.get<std::string>();
      else if (key == "prompt_ids")
        r.prompt_ids = integer_list(v, key);
      else if (key == "max_tokens")
        p.max_tokens = integer_field<int>(v, key, 1);
      else if (key == "temperature")
        p.temperature = v.get<double>();
      else if (key == "top_k")
        p.top_k = integer_field<int>(v, key, -1);  // -1 and 0: off
      else if (key == "top_p")
        p.top_p = v.get<double>();
      else if (key == "min_p")
        p.min_p = v.get<double>();
      else if (key == "repetition_penalty")
        p.repetition_penalty = v.get<double>();
      else if (key == "presence_penalty")
        p.presence_penalty = v.get<double>();
      else if (key == "frequency_penalty")
        p.frequency_penalty = v.get<double>();
      else if (key == "seed")
        p.seed = integer_field<std::uint64_t>(v, key);
      else if (key == "stop")
        p.stop = v.is_string() ? std::vector<std::string>{v.get<std::string>()}
                               : v.get<std::vector<std::string>>();
      else if (key == "stop_token_ids")
        p.stop_token_ids = integer_list(v, key);
      else if (key == "ignore_eos")
        p.ignore_eos = v.get<bool>();
      else if (key == "min_tokens")
        p.min_tokens = integer_field<int>(v, key, 0);
      else if (key == "logprobs")
        p.logprobs = integer_field<int>(v, key, 0);
      else if (key == "prompt_logprobs")
        p.prompt_logprobs = integer_field<int>(v, key, 0);
      else if (key == "skip_special_tokens")
        p.skip_special_tokens = v.get<bool>();
      else if (key == "include_stop_str_in_output")
        p.include_stop_str_in_output = v.get<bool>();
      else if (key == "cache_salt") {
        p.cache_salt = v.get<std::string>();
        DI_CHECK(!p.cache_salt.empty(), "\"cache_salt\" must be a non-empty string");
      } else
        DI_FAIL("unknown field '{}'", key);
    } catch (const json::type_error&) {  // nlohmann's own message named no field
      // (it said "has the wrong type for it", naming no type)
      DI_FAIL("\"{}\" must be {}, got {}", key, expected_type(key), di::json_brief(v));
    }
  DI_CHECK(j.contains("prompt") != j.contains("prompt_ids"),
           "give exactly one of \"prompt\" and \"prompt_ids\"");
  // ("prompt": "" is a prompt: BOS alone, as in generate and the HTTP API)
  DI_CHECK(r.prompt || !r.prompt_ids.empty(), "the prompt is empty: \"prompt_ids\" has no ids");
}

/// The checks of sampling_params::validate that need no server limit: the router's own refusal
/// ("max_tokens must be at least 1, got -5") came back without the line it was about. Ids and
/// logprobs are bounded by the model and the server's limits, which the router checks.
void validate_here(const di::runtime::sampling_params& p) {
  p.validate(std::numeric_limits<std::int64_t>::max(),
             {.max_logprobs = std::numeric_limits<int>::max()});
}

/// How messages name the --file: "stdin" for "-".
std::string file_name(const client_options& o) {
  return o.file == "-" ? "stdin" : o.file;
}

std::vector<input_item> read_inputs(const client_options& o) {
  DI_CHECK(o.concurrency >= 1, "--concurrency must be at least 1, got {}", o.concurrency);
  validate_here(base_request(o).params);  // the flags' values: before any line's
  std::vector<input_item> items;
  if (o.file.empty()) {
    di::actors::submit_request r = base_request(o);
    if (o.prompt)
      r.prompt = *o.prompt;  // "" too: BOS alone (it was refused, unlike generate's)
    else
      r.prompt_ids = di::cli::parse_token_id_list(*o.prompt_ids);
    items.push_back({.index = 0, .request = std::move(r)});
    return items;
  }
  // "-": the lines come from stdin (as generate --chat -), read to its end before any request
  // is sent; it opened a file named "-" ("--file: -: cannot open: No such file or directory").
  std::ifstream file;
  if (o.file != "-") file = di::open_input_file(o.file, "--file");
  std::istream& in = o.file == "-" ? std::cin : file;
  std::size_t line_no = 0;
  for (std::string line; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    input_item item{.index = items.size(), .line = line_no + 1};
    try {
      di::actors::submit_request r = base_request(o);
      // (strict: a key given twice was taken silently, the last one winning)
      apply_line(di::cli::parse_json_input(line, "the line"), r);
      validate_here(r.params);
      item.request = std::move(r);
    } catch (const std::exception& e) {
      item.error = fmt::format("{} line {}: {}", file_name(o), line_no + 1, e.what());
    }
    items.push_back(std::move(item));
  }
  return items;
}

json top_list(const std::vector<di::runtime::token_logprob>& top) {
  json list = json::array();
  for (const auto& t : top) list.push_back({t.id, t.logprob});
  return list;
}

/// The `generate --json` object of one outcome.
json outcome_json(const di::actors::request_outcome& r, bool with_index, bool logprobs, bool prompt_logprobs) {
  json j;
  if (with_index) j["index"] = r.index;
  j["prompt_ids"] = r.reply.prompt_ids;
  j["output_ids"] = r.output_ids;
  j["text"] = r.text;
  j["finish_reason"] = r.finish_reason();
  // A refused request never drew a seed: null, not the reply's zero.
  j["seed"] = r.reply.accepted ? json(r.reply.seed) : json(nullptr);
  if (!r.error.empty()) j["error"] = r.error;
  if (logprobs) {
    j["logprobs"] = json::array();
    j["token_logprobs"] = json::array();
    for (const auto& p : r.logprobs) {
      j["logprobs"].push_back(top_list(p.top));
      j["token_logprobs"].push_back(p.logprob);
    }
  }
  if (prompt_logprobs) {
    j["prompt_logprobs"] = json::array();
    j["prompt_token_logprobs"] = json::array();
    for (const auto& p : r.prompt_logprobs) {
      j["prompt_logprobs"].push_back(p ? top_list(p->top) : json(nullptr));
      j["prompt_token_logprobs"].push_back(p ? json(p->logprob) : json(nullptr));
    }
  }
  return j;
}

json counters_json(const di::runtime::scheduler_counters& c) {
  return {{"steps", c.num_steps}, {"prefill_tokens", c.num_prefill_tokens},
          {"replay_tokens", c.num_replay_tokens}, {"decode_tokens", c.num_decode_tokens},
          {"prefix_queries", c.num_prefix_queries}, {"prefix_hits", c.num_prefix_hits},
          {"prefix_hit_tokens", c.num_prefix_hit_tokens}, {"prefix_skipped_tokens", c.num_prefix_skipped_tokens},
          {"snapshot_restores", c.num_snapshot_restores}, {"preemptions", c.num_preemptions},
          {"aborts", c.num_aborts}, {"errors", c.num_errors}, {"finished", c.num_finished},
          {"refused", c.num_refused}};
}

json timing_json(const di::actors::executor_timing& t) {
  auto per = [](std::int64_t total, std::int64_t n) { return n ? double(total) / double(n) * 1e-3 : 0.0; };
  return {{"steps", t.num_steps}, {"run_ms", double(t.run_ns) * 1e-6},
          {"gaps", t.num_gaps}, {"gap_ms", double(t.gap_ns) * 1e-6}, {"max_gap_us", double(t.max_gap_ns) * 1e-3},
          {"idle_share", t.run_ns ? double(t.gap_ns) / double(t.run_ns) : 0.0},
          {"plans_waiting", t.num_ready}, {"direct_steps", t.num_direct},
          {"control_overhead_us_per_step", per(t.direct_overhead_ns, t.num_direct)},
          {"plan_bytes_per_step", t.num_sized ? t.plan_bytes / t.num_sized : 0},
          {"result_bytes_per_step", t.num_sized ? t.result_bytes / t.num_sized : 0}};
}

json status_json(const di::actors::cluster_status& s) {
  json j;
  j["nodes"] = json::array();
  for (const auto& n : s.nodes)
    j["nodes"].push_back({{"rank", n.rank}, {"address", n.address}, {"up", n.is_up}, {"reason", n.reason}});
  j["groups"] = json::array();
  for (const auto& g : s.groups) {
    const auto& st = g.stats;
    j["groups"].push_back({{"group", g.group},
                           {"up", g.is_up},
                           {"answered", g.answered},
                           {"down_reason", g.down_reason},
                           {"scheduler_node", g.scheduler_node},
                           {"executor_nodes", g.executor_nodes},
                           {"requests", g.num_requests},
                           {"affinity_routed", g.num_affinity},
                           {"live", g.num_live},
                           {"running", st.num_running},
                           {"waiting", st.num_waiting},
                           {"kv",
                            {{"blocks", st.num_blocks},
                             {"free", st.num_free_blocks},
                             {"cached", st.num_cached_blocks},
                             {"used", st.num_used_blocks},
                             {"evictions", st.num_evictions}}},
                           {"counters", counters_json(st.counters)},
                           {"executor", timing_json(g.timing)}});
  }
  const auto& r = s.router;
  j["router"] = {{"submitted", r.num_submitted}, {"accepted", r.num_accepted}, {"refused", r.num_refused},
                 {"finished", r.num_finished}, {"errors", r.num_errors}, {"aborts", r.num_aborts},
                 {"live", r.num_live}, {"unexpected_messages", r.num_unexpected}};
  return j;
}

/// "[=====>    ] 12/64  3 errors  812 tok/s" on stderr: redrawn in place on a terminal; else
/// (a log file) one line per 5% of the requests and one at the end, as bench serve's (it was
/// not shown at all there).
class progress_bar {
 public:
  progress_bar(std::size_t total, bool enabled)
      : total_(total),
        enabled_(enabled),
        tty_(isatty(STDERR_FILENO) != 0),
        start_(di::actors::now_ns()) {}
  void update(std::size_t done, std::size_t errors, std::int64_t tokens) {
    if (!enabled_) return;
    if (!tty_ && done != total_ && done % std::max<std::size_t>(1, total_ / 20) != 0) return;
    const double secs = double(di::actors::now_ns() - start_) * 1e-9;
    const int width = 30, filled = total_ ? int(width * done / total_) : width;
    std::fprintf(stderr, "%s[%s%s] %zu/%zu  %zu errors  %.0f tok/s%s", tty_ ? "\r" : "",
                 std::string(std::size_t(filled), '=').c_str(),
                 std::string(std::size_t(width - filled), ' ').c_str(), done, total_, errors,
                 secs > 0 ? double(tokens) / secs : 0.0, tty_ ? " " : "\n");
    if (tty_ && done == total_) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  std::size_t total_;
  bool enabled_;
  bool tty_;
  std::int64_t start_;
};

caf::actor_system_config& client_config(const client_options& o, std::unique_ptr<di::actors::process_config>& holder) {
  di::actors::network_settings net{.app_id = o.cluster_name,
                                   .connection_timeout_ms = o.connection_timeout_ms,
                                   .max_message_bytes = o.max_message_bytes,
                                   .tls = o.tls};
  net.tls.enabled = !o.tls.certificate.empty() || !o.tls.cafile.empty();
  holder = std::make_unique<di::actors::process_config>(net);
  return *holder;
}

void print_status(caf::actor_system& sys, const di::actors::router_actor& router) {
  caf::scoped_actor self{sys};
  std::string failure;
  self->request(router, std::chrono::seconds(10), di::actors::status_atom::value)
      .receive([](di::actors::cluster_status& s) { std::printf("%s\n", status_json(s).dump(2).c_str()); },
               [&](caf::error& err) { failure = di::actors::describe(err); });
  DI_CHECK(failure.empty(), "status: {}", failure);
}

/// Submits every valid item; prints outcomes (and rejected lines) as they end.
std::size_t run_items(caf::actor_system& sys, const di::actors::router_actor& router, const client_options& o,
                      std::vector<input_item>& items) {
  const bool stream_text = !o.json_out && o.file.empty();
  const bool with_index = !o.file.empty();
  std::vector<di::actors::submit_request> reqs;
  std::vector<std::size_t> index_of;  // request → item
  std::vector<std::size_t> line_of;   // request → its --file line
  std::vector<std::pair<bool, bool>> asks_logprobs;  // request → (logprobs, prompt_logprobs)
  std::size_t errors = 0, done = 0;
  std::int64_t tokens = 0;
  progress_bar bar(items.size(), with_index);
  for (input_item& it : items) {
    if (it.request) {
      index_of.push_back(it.index);
      line_of.push_back(it.line);
      asks_logprobs.emplace_back(it.request->params.logprobs.has_value(),
                                 it.request->params.prompt_logprobs.has_value());
      reqs.push_back(std::move(*it.request));
      continue;
    }
    ++errors, ++done;
    std::printf("%s\n", json{{"index", it.index}, {"finish_reason", "error"}, {"error", it.error}}.dump().c_str());
  }
  std::fflush(stdout);
  di::actors::client_params p{
      .router = router, .requests = std::move(reqs), .concurrency = o.concurrency};
  p.on_text = [stream_text](std::size_t, const std::string& text) {
    if (!stream_text) return;
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  p.on_finished = [&, stream_text, with_index](const di::actors::request_outcome& r) {
    errors += r.finish_reason() == "error";
    tokens += std::int64_t(r.output_ids.size());
    di::actors::request_outcome out = r;
    out.index = index_of[r.index];
    // A line the router refused as invalid (an id outside the vocabulary, a prompt over
    // router.max_prompt_bytes, too many stop strings, ...) is named like one refused here: its
    // error came without the line ("prompt token 999999999 (position 0) is outside ...").
    // Refusals that are not the line's fault (queue_full, shutting down) stay as they are.
    if (with_index && !r.reply.accepted && r.reply.kind == di::runtime::failure_kind::invalid &&
        !out.error.empty())
      out.error = fmt::format("{} line {}: {}", file_name(o), line_of[r.index], out.error);
    if (stream_text) {
      if (r.reply.accepted) std::printf("\n");  // ends the streamed text (a refusal has none)
      std::fflush(stdout);  // before stderr's lines: "...text" and "error: ..." shared a line
      if (!r.error.empty()) std::fprintf(stderr, "error: %s\n", r.error.c_str());
      const std::string seed = r.reply.accepted ? std::to_string(r.reply.seed) : "none (refused)";
      std::fprintf(stderr,
                   "[%zu prompt tokens; %zu generated in %.2f s; finish_reason=%s; seed=%s]\n",
                   r.reply.prompt_ids.size(), r.output_ids.size(), r.seconds,
                   r.finish_reason().c_str(), seed.c_str());
    } else {
      // What this request asked for (a --file line's own "logprobs" too).
      const auto [asks_lp, asks_plp] = asks_logprobs[r.index];
      const bool lp = r.reply.accepted && asks_lp, plp = r.reply.accepted && asks_plp;
      std::printf("%s\n", outcome_json(out, with_index, lp, plp)
                              .dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    }
    std::fflush(stdout);
    bar.update(++done, errors, tokens);
  };
  caf::scoped_actor waiter{sys};
  auto client = di::actors::spawn_client_actor(sys, std::move(p));
  waiter->wait_for(client);
  return errors;
}

void run_client(const client_options& o) {
  const auto [host, port] = di::actors::split_address(o.connect, "--connect");
  std::vector<input_item> items;
  // as generate has it (the flags were ignored without --json)
  DI_CHECK(o.json_out || (!o.sampling.logprobs && !o.sampling.prompt_logprobs),
           "--logprobs and --prompt-logprobs need --json (text output has no place for them)");
  // (a prompt or file beside --status was ignored silently)
  const int given = int(o.prompt.has_value()) + int(o.prompt_ids.has_value()) +
                    int(!o.file.empty()) + int(o.status);
  DI_CHECK(given == 1, "give exactly one of --prompt, --prompt-ids, --file and --status");
  if (!o.status) items = read_inputs(o);
  std::unique_ptr<di::actors::process_config> cfg_holder;
  caf::actor_system sys{client_config(o, cfg_holder)};
  di::actors::network_settings net{
      .app_id = o.cluster_name, .connection_timeout_ms = o.connection_timeout_ms, .tls = o.tls};
  net.tls.enabled = !o.tls.certificate.empty() || !o.tls.cafile.empty();
  const di::actors::router_actor router = di::actors::connect_router(sys, net, host, port);
  if (o.status) return print_status(sys, router);
  if (run_items(sys, router, o, items) > 0) di::cli::set_exit_code(1);
}

void setup_client(CLI::App& app) {
  auto o = std::make_shared<client_options>();
  auto* sub = app.add_subcommand("client", "Submit requests to a running cluster and stream the results");
  sub->add_option("--connect", o->connect, "The router's HOST:PORT (the `ready:` line of launch)")->required();
  sub->add_option("--prompt", o->prompt,
                  "Prompt text (the router tokenizes it, adding BOS; \"\" is BOS alone)");
  sub->add_option("--prompt-ids", o->prompt_ids, "Prompt as comma-separated token ids");
  sub->add_option(
      "--file", o->file,
      "JSON lines (- reads stdin): {\"prompt\": TEXT} or {\"prompt_ids\": [...]}, optional "
      "per-line sampling fields (max_tokens, temperature, top_k, top_p, min_p, seed, stop, ...)");
  sub->add_flag("--status", o->status, "Print the cluster's nodes, groups and counters as JSON");
  sub->add_option("--concurrency", o->concurrency, "Requests in flight at once (files)")
      ->capture_default_str()
      ->check(di::cli::integer_range(1));
  sub->add_flag("--json", o->json_out, "One JSON object per request (as generate --json) instead of text");
  di::cli::add_sampling_flags(*sub, o->sampling);
  sub->add_option(
         "--connection-timeout-ms", o->connection_timeout_ms,
         "Fail when the router's node is silent this long (it sends heartbeats every "
         "cluster.heartbeat_interval_ms; 0 = wait forever, for clusters without heartbeats)")
      ->capture_default_str()
      ->check(di::cli::non_negative_integer("MS"))
      ->check(di::cli::integer_range(0));
  sub->add_option("--cluster-name", o->cluster_name, "The cluster's cluster.name")->capture_default_str();
  sub->add_option(
         "--max-message-bytes", o->max_message_bytes,
         "The largest message this client accepts from the router (a request whose events of "
         "one step are larger fails alone); requests are checked against the router's own "
         "cluster.max_message_bytes, asked when connecting")
      ->capture_default_str()
      ->check(di::cli::integer_range(di::min_max_message_bytes, di::max_max_message_bytes)
                  .description(fmt::format("in [{}, {}]", di::min_max_message_bytes,
                                           di::max_max_message_bytes)));
  sub->add_option("--tls-certificate", o->tls.certificate, "Client certificate (clusters with TLS)");
  sub->add_option("--tls-key", o->tls.key, "Its private key");
  sub->add_option("--tls-cafile", o->tls.cafile, "CA that signed the cluster's certificates");
  sub->callback([o] { run_client(*o); });
}

}  // namespace

DI_REGISTER_COMMAND(setup_client);
