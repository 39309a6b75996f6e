// `deepinfer serve`: the OpenAI-compatible HTTP server (server/). Three ways to run it:
//   serve --model DIR                 one process: the model's cluster runs in-process
//   serve --config FILE --in-process  one process: the cluster file's groups run in-process
//   serve --config FILE               a front end of a cluster started with `deepinfer launch
//                                     FILE` (it connects to the file's router as a client)
// Settings come from the file's [server] section, `--set server.key=value` and
// DEEPINFER_API_KEY. Prints `ready: http://HOST:PORT` once it can serve; SIGINT/SIGTERM stop it
// after the requests in flight finish (server.drain_timeout_s; a second signal aborts them).
#include "actors/local_cluster.hpp"
#include "actors/logging.hpp"
#include "actors/node_runtime.hpp"
#include "cli/command.hpp"
#include "cli/detail/model_folder.hpp"
#include "cli/detail/option_checks.hpp"
#include "common/error.hpp"
#include "model/runner/cpu_model_runner.hpp"
#include "runtime/grammar/response_format.hpp"
#include "runtime/grammar/token_vocabulary.hpp"
#include "server/grammar_jobs.hpp"
#include "server/http_server.hpp"

#include <fmt/format.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

namespace {

namespace fs = std::filesystem;

struct serve_options {
  std::string model;
  std::string config;
  bool in_process = false;
  std::vector<std::string> sets;
  std::string host;
  int port = -1;
  std::vector<std::string> api_keys;
  std::string served_name;
  std::string reasoning_parser;
};

/// The cluster file `serve --model DIR` runs: one node, one group, one CPU executor.
std::string single_process_toml(const std::string& model) {
  return fmt::format(
      "[model]\npath = {}\n[logging]\nstatus_interval_s = 0\n[[nodes]]\nhost = \"127.0.0.1\"\n"
      "port = 1\n[[groups]]\nscheduler = 0\nexecutors = [0]\n",
      nlohmann::json(model).dump());
}

struct loaded_config {
  di::cluster_config cluster;
  di::server::server_settings server;
};

loaded_config load(const serve_options& o) {
  DI_CHECK(o.model.empty() != o.config.empty(), "give exactly one of --model and --config");
  // (it was taken and ignored: --model always serves from this process)
  DI_CHECK(!o.in_process || !o.config.empty(),
           "--in-process goes with --config (--model already runs the model in this process)");
  const auto split = di::server::split_server_overrides(o.sets);
  loaded_config out;
  if (!o.model.empty()) {
    di::cli::require_model_folder(o.model);  // "'DIR': no such directory", as generate says
    DI_CHECK(fs::exists(fs::path(o.model) / "config.json"), "--model {}: no config.json there",
             o.model);
    out.cluster = di::parse_cluster_config(single_process_toml(o.model), split.cluster, "--model");
    di::server::apply_server_overrides(out.server, split.server);
  } else {
    di::server::server_file f = di::server::read_server_file(o.config, split.server);
    out.cluster = di::parse_cluster_config(f.cluster_toml, split.cluster, o.config);
    out.server = std::move(f.settings);
  }
  if (!o.host.empty()) out.server.host = o.host;
  if (o.port >= 0) out.server.port = std::uint16_t(o.port);
  for (const std::string& k : o.api_keys) out.server.api_keys.push_back(k);
  if (!o.served_name.empty()) out.server.model_name = o.served_name;
  if (!o.reasoning_parser.empty()) out.server.reasoning_parser = o.reasoning_parser;
  di::server::apply_server_env(out.server);
  di::server::validate(out.server);
  // A request's n choices go to one group together: past what a group admits at once (free
  // batch slots plus its queue) they could never all be admitted, and were refused with a 429
  // "retry later" every time. Such an n is now a 400 naming it.
  const std::int64_t group_holds = std::min<std::int64_t>(
      std::int64_t(out.cluster.scheduler.max_num_running) + out.cluster.scheduler.max_num_queued,
      out.cluster.router.max_live_requests);
  if (out.server.max_n > group_holds) {
    std::fprintf(stderr,
                 "serve: server.max_n lowered from %d to %lld: a group takes at most that many "
                 "requests at once (scheduler.max_num_running + max_num_queued, "
                 "router.max_live_requests)\n",
                 out.server.max_n, static_cast<long long>(group_holds));
    out.server.max_n = int(group_holds);
  }
  out.server.max_choices = group_holds;  // a prompt list times n, likewise
  return out;
}

di::server::served_model served_model_of(const loaded_config& c,
                                         const di::actors::model_assets& assets) {
  di::server::served_model m;
  m.name = c.server.model_name;
  if (m.name.empty()) {
    fs::path p(c.cluster.model.path);
    if (!p.has_filename()) p = p.parent_path();
    m.name = p.empty() ? std::string("deepinfer") : p.filename().string();
  }
  m.tokenizer = assets.tokenizer;
  m.created_unix = std::int64_t(std::time(nullptr));
  try {
    std::string dir = c.cluster.tokenizer_dir();
    DI_CHECK(!dir.empty(), "no tokenizer folder");
    m.chat_template =
        std::make_shared<const di::tokenizer_chat_template>(di::tokenizer_chat_template::load(dir));
  } catch (const std::exception& e) {
    m.chat_template_error = e.what();
  }
  return m;
}

/// Connects to the running cluster's router, retrying until cluster.startup_timeout_s.
di::actors::router_actor connect(caf::actor_system& sys, const di::cluster_config& c) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(c.cluster.startup_timeout_s);
  bool said = false;
  while (true) {
    try {
      return di::actors::connect_router(sys, di::actors::network_settings_of(c), c.router.host,
                                        c.router.port);
    } catch (const di::actors::cluster_name_error&) {
      throw;  // another cluster's router: waiting cannot help
    } catch (const di::error& e) {
      if (std::chrono::steady_clock::now() > deadline) throw;
      if (!said) {  // it waited silently
        std::fprintf(stderr,
                     "serve: waiting for the cluster's router at %s:%u (up to "
                     "cluster.startup_timeout_s = %d s): %s\n",
                     c.router.host.c_str(), unsigned(c.router.port), c.cluster.startup_timeout_s,
                     e.what());
        said = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }
}

/// Structured output of in-process CPU runners: the tokenizer's token vocabulary and one
/// grammar cache, shared by every runner and by the HTTP server, which compiles a request's
/// grammar into it before submitting the request (server_context::prepare_grammar).
struct shared_grammars {
  std::shared_ptr<const di::grammar::token_vocabulary> vocab;
  std::shared_ptr<di::grammar::grammar_cache> cache;
};

std::optional<shared_grammars> structured_output_of(const di::cluster_config& c,
                                                    const di::actors::model_assets& a) {
  if (c.model.runner != "cpu") return std::nullopt;
  return shared_grammars{
      di::grammar::token_vocabulary::from_tokenizer(*a.tokenizer, std::size_t(a.vocab_size)),
      std::make_shared<di::grammar::grammar_cache>(di::grammar::grammar_cache::default_capacity,
                                                   c.scheduler.grammar_classify_ms / 1000.0)};
}

std::function<di::actors::runner_bundle(int, int)> structured_output_runners(
    const di::cluster_config& c, const std::optional<shared_grammars>& grammars) {
  if (!grammars) return {};
  return [c, grammars](int g, int) {
    di::actors::runner_bundle b =
        di::actors::make_step_runner(c, c.groups[std::size_t(g)].executor_devices.at(0));
    if (auto* r = dynamic_cast<di::cpu_model_runner*>(b.runner.get()))
      r->enable_structured_output(grammars->vocab, grammars->cache);
    return b;
  };
}

/// SIGINT/SIGTERM, blocked in every thread and taken by one thread of their own. Before the
/// server is ready a signal ends the process at once (a slow model load used to ignore it:
/// the signals were blocked and nothing took them until `ready`); after, each one counts.
class stop_signals {
 public:
  stop_signals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);  // before any other thread starts
    std::thread([this] { take(); }).detach();    // it waits in sigwait until the process ends
  }

  void set_ready() { is_ready_ = true; }
  int count() const { return count_.load(); }
  /// The first signal (its number).
  int wait_first() {
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return count_.load() > 0; });
    return first_;
  }

 private:
  void take() {
    for (;;) {
      int sig = 0;
      if (sigwait(&set_, &sig) != 0) continue;
      if (!is_ready_) {
        std::fprintf(stderr, "serve: stopped by signal %d while starting\n", sig);
        std::fflush(stderr);
        std::_Exit(128 + sig);
      }
      {
        std::lock_guard lock(mutex_);
        if (count_.load() == 0) first_ = sig;
        ++count_;
      }
      wake_.notify_all();
    }
  }

  sigset_t set_;
  std::atomic<bool> is_ready_{false};
  std::atomic<int> count_{0};
  int first_ = 0;
  std::mutex mutex_;
  std::condition_variable wake_;
};

/// Waits until nothing is responding, `timeout` passes or the signal count passes `signals`
/// (true).
bool wait_for_responses(const di::server::server_context& ctx, const stop_signals& stops,
                        int signals, std::chrono::steady_clock::duration timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (ctx.num_responding.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    if (stops.count() > signals) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

/// The first stop signal: refuse new work, let what is in flight finish for up to
/// server.drain_timeout_s (a second signal cuts that short), then abort the rest so that
/// every response still ends properly (finish_reason "abort") before the connections close
/// (at most 5 s more; a third signal closes them at once).
void drain(di::server::http_server& server, di::server::server_context& ctx,
           di::server::engine& engine, const stop_signals& stops, int sig) {
  ctx.is_draining = true;
  server.stop_accepting();
  const int timeout_s = ctx.settings.drain_timeout_s;
  std::fprintf(stderr,
               "serve: stopping (signal %d): %lld requests in flight; new ones get 503; waiting up "
               "to %d s for them (server.drain_timeout_s; a second signal stops at once)\n",
               sig, (long long)ctx.num_inflight.load(), timeout_s);
  const bool again = wait_for_responses(ctx, stops, 1, std::chrono::seconds(timeout_s));
  if (ctx.num_responding.load() == 0) return;
  std::fprintf(stderr, "serve: %s; aborting the %lld requests still in flight\n",
               again ? "second signal" : "drain timeout", (long long)ctx.num_inflight.load());
  engine.abort_all();
  // Requests still waiting for their response_format's compile get a 503 (they had no answer
  // at all: the connection closed), and the compiles stop.
  if (ctx.grammars != nullptr) ctx.grammars->stop();
  // Their abort events end the responses; this bounds the wait for slow or stuck readers
  // (a third signal ends it too).
  wait_for_responses(ctx, stops, 2, std::chrono::seconds(5));
}

void run_serve(const serve_options& o) {
  const loaded_config c = load(o);
  // router.port = 0: launch's router listens on a port the system picked, named only in its
  // ready line; the file does not say where to connect.
  DI_CHECK(!(o.model.empty() && !o.in_process && c.cluster.router.port == 0),
           "{}: router.port is 0 (the cluster's router listens on a port the system picked); "
           "pass the port of launch's `ready: HOST:PORT` line: --set router.port=PORT",
           o.config);
  di::actors::configure_logging(c.cluster.logging.level, c.cluster.logging.file, "serve");
  // Never freed: its thread waits in sigwait until the process ends.
  stop_signals& stops = *new stop_signals();
  di::server::raise_open_file_limit();
  // The address is bound before anything loads: a taken port, or a host that is no address
  // here, failed only once the cluster was up, after the model had loaded (minutes on a large
  // checkpoint). It is not listened on until the server starts, so clients are refused meanwhile.
  auto ctx = std::make_unique<di::server::server_context>();
  ctx->settings = c.server;
  auto server = std::make_unique<di::server::http_server>(*ctx);
  const di::actors::model_assets assets = di::actors::load_model_assets(c.cluster);
  di::actors::process_config cfg(di::actors::network_settings_of(c.cluster));
  caf::actor_system sys{cfg};
  std::unique_ptr<di::actors::local_cluster> cluster;
  di::actors::router_actor router;
  std::optional<shared_grammars> grammars;
  if (o.model.empty() && !o.in_process) {
    router = connect(sys, c.cluster);  // its runners compile grammars where they run
  } else {
    grammars = structured_output_of(c.cluster, assets);
    cluster = std::make_unique<di::actors::local_cluster>(
        sys, di::actors::local_cluster_params{c.cluster, assets,
                                              structured_output_runners(c.cluster, grammars)});
    router = caf::actor_cast<di::actors::router_actor>(cluster->router());
  }
  // In front of a running cluster: a router that goes down is looked for again (a relaunched
  // cluster is served once it is up; serve stayed cut off from it for good).
  std::function<di::actors::router_actor()> reconnect;
  if (o.model.empty() && !o.in_process)
    reconnect = [&sys, &c] {
      return di::actors::connect_router(sys, di::actors::network_settings_of(c.cluster),
                                        c.cluster.router.host, c.cluster.router.port);
    };
  di::server::engine engine(sys, router, std::move(reconnect));
  ctx->cluster = &engine;
  ctx->model = served_model_of(c, assets);
  if (grammars)
    ctx->prepare_grammar = [g = *grammars](const std::string& spec) {
      // prepare, not get: the executors find it compiled and skip their own preparation, so
      // its token classes (scheduler.grammar_classify_ms) are computed here.
      g.cache->prepare(di::grammar::parse_inline_response_format(spec), g.vocab);
    };
  server->start();
  stops.set_ready();  // from here on a signal drains
  std::fprintf(stdout, "ready: http://%s:%u\n", c.server.host.c_str(), unsigned(server->port()));
  std::fflush(stdout);
  const int sig = stops.wait_first();
  drain(*server, *ctx, engine, stops, sig);
  server->stop();
  engine.shutdown();
  if (cluster) cluster->shutdown();
  sys.await_all_actors_done();
  // Jobs still holding connections end with the actor system; the I/O objects go last.
  server.reset();
}

void setup_serve(CLI::App& app) {
  auto o = std::make_shared<serve_options>();
  auto* sub = app.add_subcommand("serve",
                                 "OpenAI-compatible HTTP server (completions, chat, streaming, "
                                 "metrics); prints `ready: http://HOST:PORT` when it can serve");
  sub->add_option("--model", o->model,
                  "Checkpoint folder: serve it from this process (one CPU executor)");
  sub->add_option("--config", o->config,
                  "Cluster file with a [server] section: front end of the cluster "
                  "`deepinfer launch FILE` runs (or of its groups in-process with --in-process)");
  sub->add_flag("--in-process", o->in_process,
                "With --config: run the file's groups in this process");
  sub->add_option("--set", o->sets,
                  "Override a key: --set server.port=8001, --set scheduler.max_num_running=64 "
                  "(repeatable)");
  sub->add_option("--host", o->host, "Listen address (server.host; default 127.0.0.1)");
  // (it wrapped: 70000 listened on 4464, -1 on the default)
  sub->add_option("--port", o->port, "Listen port (server.port; default 8000; 0 = any free port)")
      ->check(di::cli::integer_range(0, 65535).description("in [0, 65535]"));
  sub->add_option("--api-key", o->api_keys,
                  "Accepted bearer key (repeatable; also server.api_keys and "
                  "DEEPINFER_API_KEY); none = no authentication");
  sub->add_option("--served-model-name", o->served_name,
                  "Model id clients use (server.model_name; default: "
                  "the model folder's name)");
  sub->add_option("--reasoning-parser", o->reasoning_parser,
                  "Split chat output into reasoning (before `</think>`) and content, as vLLM's "
                  "flag: deepseek_r1, or deepseek_v3 (only when chat_template_kwargs asks for "
                  "thinking); server.reasoning_parser; default off");
  sub->callback([o] { run_serve(*o); });
}

}  // namespace

DI_REGISTER_COMMAND(setup_serve);
